"""What GitOps deploys from a kustomization or a Helm chart: built by the tools Argo CD and Flux run
(`kubectl kustomize`, `helm template`), each run bounded in time and output, and every built object traced back
to the file a problem in it should be fixed in.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specinfer_operator.cli.files import decode
from specinfer_operator.cli.kustomize import Patch, kustomization_in, locate, patches, read_kustomization
from specinfer_operator.cli.remote import offline, refuse_remote
from specinfer_operator.cli.yaml_documents import MAX_BYTES, ManifestError, Parsed, documents

DEFAULT_TIMEOUT = 120.0  # seconds for one build: a remote base is fetched with git
MAX_ERROR_BYTES = 64 << 10  # of a tool's standard error, for its message
MAX_MESSAGE = 400  # characters of a tool's message in the one line that reports it
ORIGIN = "config.kubernetes.io/origin"
TRANSFORMATIONS = "alpha.config.kubernetes.io/transformations"


class BuildError(ManifestError):
    """The tool ran and refused the input: its own message, in one line."""


@dataclass(frozen=True)
class BuildOptions:
    """How kustomizations and charts are built: Helm values files, the time one build may take, whether a
    build may fetch from the network (remote.py), and whether charts are rendered at all (--skip-charts)."""

    values: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    allow_remote: bool = False
    charts: bool = True


def tool(name: str, variable: str, otherwise: str = "") -> str:
    """The executable `variable` names, else `name` on PATH. Without it the build cannot run: one line for the
    directory (`otherwise` says what else the user can do), and the command goes on with the other paths."""
    given = os.environ.get(variable)
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise ManifestError(f"{variable}={given} is not an executable file{otherwise}")
    found = shutil.which(name)
    if not found:
        raise ManifestError(f"{name} not found: put it on PATH or set {variable}{otherwise}")
    return found


def _message(stderr: bytes, code: int) -> str:
    """A tool's error in one line: its own words without its warnings, cut to MAX_MESSAGE."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    kept = [line for line in lines if line and not line.startswith(("# Warning", "WARNING", "walk.go"))]
    text = " ".join(" ".join(kept).split()) or (
        f"killed by signal {-code}" if code < 0 else f"exit status {code}, nothing on standard error"
    )
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _drain(process: subprocess.Popen[bytes], deadline: float, what: str) -> tuple[bytes, bytes]:
    """Both pipes read to their end, standard output at most MAX_BYTES, before `deadline` (TimeoutExpired)."""
    out, err = bytearray(), bytearray()
    assert process.stdout is not None  # both piped by run()
    assert process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(what, 0)
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data is out:
                    out += chunk
                    if len(out) > MAX_BYTES:
                        raise ManifestError(f"{what} printed more than {MAX_BYTES >> 20} MiB")
                elif len(err) < MAX_ERROR_BYTES:
                    err += chunk
    return bytes(out), bytes(err)


def run(command: list[str], timeout: float, what: str, env: dict[str, str] | None = None) -> str:
    """What `command` prints, within `timeout` seconds and MAX_BYTES, run with `env` (None: this process's). It
    runs in a process group of its own (kubectl starts git for a remote base, helm its plugins), killed whole when
    it overruns."""
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except OSError as error:
        raise ManifestError(f"cannot run {command[0]}: {error.strerror or error}") from error
    deadline = time.monotonic() + timeout
    with process:
        try:
            out, err = _drain(process, deadline, what)
            code = process.wait(max(deadline - time.monotonic(), 0.01))
        except BaseException as error:
            # Not waited for yet, so the group still exists (its leader at least as a zombie): this kills only
            # what this command started.
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if isinstance(error, subprocess.TimeoutExpired):
                raise ManifestError(f"{what} did not finish within {timeout:g} s (--build-timeout)") from None
            raise
    if code != 0:
        raise BuildError(f"{what} failed: {_message(err, code)}")
    return decode(out)


@dataclass(frozen=True)
class Origin:
    """Where a built object came from: the directory built and with what, the file the object started in, and
    the patches applied on its way (kustomize), so that each problem names the file to fix."""

    built: str
    tool: str
    file: str | None = None
    patches: tuple[Patch, ...] = ()

    def where(self, data: Any, path: str) -> tuple[str, str] | None:
        """("set in", PATCH) when a patch set the value at `path`, else ("from", FILE); None when unknown."""
        found = locate(data, path) if self.patches and path else None
        if found is not None:
            kind = data.get("kind") if isinstance(data, dict) else None
            setter = next((p for p in reversed(self.patches) if p.sets(kind, *found)), None)
            if setter is not None:
                return "set in", setter.label
        return ("from", self.file) if self.file else None


Built = tuple[Parsed, Origin]


class _Shown:
    """Files kustomize names, shown the way the kustomization was named (`overlays/prod/../../base/x.yaml` is
    `base/x.yaml`): relative when it was given relative, absolute when absolute."""

    def __init__(self, label: str, directory: Path) -> None:
        self.label, self.real = label, directory.resolve()

    def __call__(self, file: Path) -> str:
        return os.path.normpath(os.path.join(self.label, os.path.relpath(file, self.real)))


def _annotation(data: Any, name: str) -> Any:
    """A YAML annotation kustomize wrote, taken off the object (it is not part of what GitOps applies)."""
    metadata = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(metadata, dict):
        return None
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict) or not isinstance(annotations.get(name), str):
        return None
    text = annotations.pop(name)
    if not annotations:
        del metadata["annotations"]
    try:
        return next((d.data for d in documents(text)), None)
    except ManifestError:
        return None


def kustomize(directory: Path, label: str, options: BuildOptions) -> Iterator[Built]:
    """The objects `kubectl kustomize DIRECTORY` builds. It is built as the one resource of a kustomization
    asking for buildMetadata (in a temporary directory: the repository is not written), which names each
    object's source file and the kustomizations that transformed it; a build refused that way is built again
    plainly, for kustomize's message in the repository's own paths. Without --allow-remote, a kustomization that
    names anything remote is refused before kubectl runs, and kubectl runs offline (remote.py)."""
    shown = _Shown(label, directory)
    file = kustomization_in(directory)
    if file is not None and not options.allow_remote:
        refuse_remote(file, shown)
    kubectl = tool("kubectl", "SPECINFER_KUBECTL")
    with offline(options.allow_remote) as env:
        yield from _kustomized(kubectl, directory, label, options, env, shown)


def _kustomized(
    kubectl: str, directory: Path, label: str, options: BuildOptions, env: dict[str, str] | None, shown: _Shown
) -> Iterator[Built]:
    with tempfile.TemporaryDirectory(prefix="specinfer-kustomize-") as scratch:
        top = Path(scratch).resolve()
        top.joinpath("kustomization.yaml").write_text(
            json.dumps(
                {
                    "resources": [os.path.relpath(directory.resolve(), top)],
                    "buildMetadata": ["originAnnotations", "transformerAnnotations"],
                }
            )
        )
        try:
            text = run([kubectl, "kustomize", str(top)], options.timeout, "kubectl kustomize", env)
        except BuildError:
            text = None
    if text is None:
        text = run([kubectl, "kustomize", str(directory)], options.timeout, "kubectl kustomize", env)
        yield from ((d, Origin(label, "kustomize")) for d in documents(text) if d.data is not None)
        return
    applied: dict[Path, list[Patch]] = {}
    for doc in documents(text):
        if doc.data is None:
            continue
        origin = _annotation(doc.data, ORIGIN)
        source = origin.get("path") if isinstance(origin, dict) else None
        if isinstance(source, str) and isinstance(origin, dict) and origin.get("repo"):
            source = f"{origin['repo']}//{source}"
        elif isinstance(source, str):
            source = shown(top / source)
        steps = _annotation(doc.data, TRANSFORMATIONS)
        found: list[Patch] = []
        for file in dict.fromkeys(_configured_in(steps, top)):
            if file not in applied:
                applied[file] = _patches(file, shown)
            found += applied[file]
        yield doc, Origin(label, "kustomize", source, tuple(found))


def _configured_in(steps: Any, top: Path) -> Iterator[Path]:
    """The local kustomization files that transformed an object, in the order they did."""
    for step in steps if isinstance(steps, list) else []:
        where = step.get("configuredIn") if isinstance(step, dict) and not step.get("repo") else None
        if isinstance(where, str):
            yield Path(os.path.normpath(top / where))


def _patches(file: Path, shown: _Shown) -> list[Patch]:
    try:
        return patches(read_kustomization(file), file, shown)
    except ManifestError:
        return []


_SOURCE = re.compile(r"^# Source: (.+)$", re.MULTILINE)
_SEPARATOR = re.compile(r"^---[ \t]*$\n?", re.MULTILINE)


def helm_template(directory: Path, label: str, options: BuildOptions) -> Iterator[Built]:
    """The objects `helm template CHART --values FILE...` renders, each traced to its template by the
    `# Source: CHART/templates/x.yaml` line helm writes above it."""
    helm = tool("helm", "SPECINFER_HELM", ", or leave charts out with --skip-charts")
    values = [arg for file in options.values for arg in ("--values", file)]
    with offline(options.allow_remote) as env:
        text = run([helm, "template", str(directory), *values], options.timeout, "helm template", env)
    for chunk in _SEPARATOR.split(text):
        source = _SOURCE.search(chunk)
        template = source.group(1).strip().partition("/")[2] if source else ""
        origin = Origin(label, "helm", os.path.join(label, template) if template else None)
        yield from ((d, origin) for d in documents(chunk) if d.data is not None)
