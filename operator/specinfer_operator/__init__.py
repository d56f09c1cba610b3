"""specinfer operator: the SpeculativeInference API, its CRD, and the objects it becomes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specinfer")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
