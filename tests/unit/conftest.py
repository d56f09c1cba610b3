"""The real kubectl and helm, for the tests of what `specinfer validate` builds from kustomizations and charts and
of what the charts render.

They are the versions hack/versions.env pins, from ${SPECINFER_CACHE:-~/.cache/specinfer}/bin. When they are not
there yet, hack/build-binaries.sh builds them (a few minutes, once; with `make test` this waits for the build it
starts beside the unit tests to make these two, which it makes first): these tests never skip for want of a binary.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pinned() -> dict[str, Path]:
    versions = dict(
        line.split("=", 1) for line in (ROOT / "hack" / "versions.env").read_text().splitlines() if "=" in line
    )
    cache = Path(os.environ.get("SPECINFER_CACHE", Path.home() / ".cache" / "specinfer"))
    return {
        "kubectl": cache / "bin" / f"kubectl-{versions['KUBERNETES_VERSION'].strip()}",
        "helm": cache / "bin" / f"helm-{versions['HELM_VERSION'].strip()}",
    }


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    found = _pinned()
    if not all(os.access(path, os.X_OK) for path in found.values()):
        subprocess.run([str(ROOT / "hack" / "build-binaries.sh"), *found], check=True)
    return found
