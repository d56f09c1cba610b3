"""Read manifests from files, directories and stdin the way a GitOps repository holds them, and find the
SpeculativeInferences among them (render/admission.py checks each).

What Argo CD and Flux apply from a kustomization or a Helm chart is what they build, so such a directory is
built (builds.py) and its output checked; its files, and the patches a kustomization uses, are not resources
on their own. A repository holds much else: other kinds, JSON patches (top-level lists), scalar or JSON-array
files, documents with tags of other tools. Those are skipped, each with its reason, but for the Argo CD and Flux
objects that may give the specinfer charts Helm values (Deployer: helm_values.py checks those). What cannot be
read at all (a missing or unreadable path, bytes that are not UTF-8, YAML kubectl would refuse, a build that
fails) is a failure: never a silent pass.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specinfer_operator.api.policy import POLICY_KIND, SpeculativeInferencePolicy, TenantPolicySpec
from specinfer_operator.cli.builds import BuildOptions, Origin, helm_template, kustomize
from specinfer_operator.cli.files import read_limited, read_text
from specinfer_operator.cli.helm_values import deploys
from specinfer_operator.cli.kustomize import (
    COMPONENT,
    KUSTOMIZATION_FILES,
    kustomization_in,
    patch_files,
    read_kustomization,
)
from specinfer_operator.cli.yaml_documents import MAX_BYTES, ManifestError, Parsed, documents
from specinfer_operator.render.admission import not_ours
from specinfer_runtime.validation import Problem, validate

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
CHART_FILE = "Chart.yaml"


@dataclass(frozen=True)
class Document:
    """One SpeculativeInference document, and where it came from (`origin`: the build that made it)."""

    source: str
    index: int
    count: int
    data: Any
    custom_tags: tuple[str, ...] = ()
    origin: Origin | None = None

    @property
    def label(self) -> str:
        if self.origin is not None:  # a built object: the directory built, and the object by kind and name
            meta = self.data.get("metadata") if isinstance(self.data, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            kind = self.data.get("kind") if isinstance(self.data, dict) else None
            return f"{self.source}: {kind}/{name}" if kind and name else f"{self.source}#{self.index}"
        return f"{self.source}#{self.index}" if self.count > 1 else self.source

    def where(self, problem: Problem) -> tuple[str, str] | None:
        """The file a problem of a built object is to be fixed in, when it can be told: ("set in", PATCH), or
        ("from", FILE) for the file the object came from."""
        return self.origin.where(self.data, problem.path) if self.origin else None


@dataclass(frozen=True)
class LoadFailure:
    """A path that could not be read or parsed (exit code 2)."""

    source: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


@dataclass(frozen=True)
class Skipped:
    """A file or document that is not a SpeculativeInference, and why it was passed over."""

    source: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: skipped: {self.reason}"


@dataclass(frozen=True)
class Deployer:
    """An Argo CD Application, a Flux HelmRelease or OCIRepository: not a SpeculativeInference (`reason`), but
    the values it gives a specinfer chart are checked (helm_values.py)."""

    document: Document
    reason: str

    def skipped(self) -> Skipped:
        return Skipped(self.document.label, self.reason)


Item = Document | Deployer | LoadFailure | Skipped


@dataclass(frozen=True)
class _Build:
    """A directory GitOps builds before it applies: a kustomization, or a Helm chart."""

    directory: Path
    tool: str  # "kustomize" or "helm"


def _stdin() -> str:
    if sys.stdin is None or sys.stdin.closed:
        raise ManifestError("standard input is closed")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream without bytes underneath (tests, embedding); documents() checks the size
        text: str = sys.stdin.read(MAX_BYTES + 1)
        return text
    try:
        return read_limited(buffer)
    except OSError as error:
        raise ManifestError(f"cannot read standard input: {error.strerror or error}") from error


def _walk(root: Path) -> Iterator[Path | _Build | LoadFailure | Skipped]:
    """Manifest files and builds under `root`, following symlinked directories once each (a link back up is a
    loop, skipped). A Helm chart is rendered whole; a kustomization is built, and the files in its tree are
    not resources on their own (a kustomization below it is built too)."""
    seen: set[tuple[int, int]] = set()
    pending: list[tuple[Path, Path | None]] = [(root, None)]  # a directory, and the kustomization it is in
    while pending:
        directory, within = pending.pop()
        try:
            info = directory.stat()
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except OSError as error:
            yield LoadFailure(str(directory), f"cannot read the directory: {error.strerror or error}")
            continue
        if (info.st_dev, info.st_ino) in seen:
            yield Skipped(str(directory), "a symlink back to a directory already read")
            continue
        seen.add((info.st_dev, info.st_ino))
        names = {e.name for e in entries if e.is_file()}
        if CHART_FILE in names:
            yield _Build(directory, "helm")
            continue
        own = next((n for n in KUSTOMIZATION_FILES if n in names), None)
        if own:
            yield _Build(directory, "kustomize")
            within = directory
        files = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir():
                pending.append((path, within))
            elif path.suffix in MANIFEST_SUFFIXES and entry.name != own:
                if not entry.is_file() and not path.exists():
                    yield LoadFailure(str(path), "a broken symlink")
                elif within is not None:
                    yield Skipped(str(path), f"in the kustomization {within}, checked as it builds")
                elif entry.is_file():
                    files.append(path)
                else:  # a FIFO would block the read until some writer came
                    yield Skipped(str(path), "not a regular file")
        yield from reversed(files)


class _Patches:
    """Which kustomization, in a directory above a file, uses the file as a patch (kustomize reads patches only
    from inside its own directory tree); each directory is looked at once."""

    def __init__(self) -> None:
        self.known: dict[Path, tuple[Path, set[Path]] | None] = {}

    def _of(self, directory: Path) -> tuple[Path, set[Path]] | None:
        if directory not in self.known:
            file = kustomization_in(directory)
            try:
                self.known[directory] = (file, patch_files(read_kustomization(file), directory)) if file else None
            except ManifestError:  # not a kustomization kustomize could read: it uses nothing
                self.known[directory] = None
        return self.known[directory]

    def user(self, path: Path) -> str | None:
        """The kustomization file that uses `path` as a patch, named from where `path` is; None when none does."""
        real = path.resolve()
        for directory in real.parents:
            found = self._of(directory)
            if found and real in found[1]:
                return os.path.normpath(os.path.join(path.parent, os.path.relpath(found[0], real.parent)))
        return None


def _classify(source: str, parsed: Iterable[tuple[Parsed, Origin | None]]) -> Iterator[Document | Deployer | Skipped]:
    # A `kind: List` (as `kubectl get -o yaml` prints) stands for its items.
    expanded: list[tuple[Any, list[str], Origin | None]] = []
    for doc, origin in parsed:
        if doc.data is None:
            continue
        if isinstance(doc.data, dict) and doc.data.get("kind") == "List" and isinstance(doc.data.get("items"), list):
            expanded += [(item, doc.custom_tags, origin) for item in doc.data["items"]]
        else:
            expanded.append((doc.data, doc.custom_tags, origin))
    for i, (data, tags, origin) in enumerate(expanded, 1):
        document = Document(source, i, len(expanded), data, tuple(tags), origin)
        reason = not_ours(data)
        if reason is None:
            yield document
        else:
            yield Deployer(document, reason) if deploys(data) else Skipped(document.label, reason)


def _documents(source: str, text: str) -> Iterator[Item]:
    try:
        parsed = list(documents(text))
    except ManifestError as error:
        if "{{" in text:
            yield Skipped(source, "a template, not YAML (Helm, Go templates)")
        else:
            yield LoadFailure(source, str(error))
        return
    found = list(_classify(source, ((p, None) for p in parsed)))
    if not found:
        yield Skipped(source, "no documents")
    yield from found


def _component(directory: Path) -> bool:
    file = kustomization_in(directory)
    try:
        return file is not None and read_kustomization(file).get("kind") == COMPONENT
    except ManifestError:  # kubectl says what is wrong with it
        return False


def _built(build: _Build, options: BuildOptions) -> Iterator[Item]:
    """What a kustomization builds or a chart renders. One that cannot be built (a template error, a missing
    dependency or tool, a timeout) is one failure naming its directory; the other paths are still checked."""
    label = str(build.directory)
    if build.tool == "kustomize" and _component(build.directory):
        yield Skipped(label, "a kustomize Component, checked in the kustomizations that use it")
        return
    if build.tool == "helm" and not options.charts:
        yield Skipped(label, "a Helm chart, not rendered (--skip-charts)")
        return
    make = kustomize if build.tool == "kustomize" else helm_template
    try:
        found = list(_classify(label, make(build.directory, label, options)))
    except ManifestError as error:
        yield LoadFailure(label, str(error))
        return
    if not found:
        yield Skipped(label, f"{'kubectl kustomize' if build.tool == 'kustomize' else 'helm template'} built nothing")
    yield from found


def _targets(root: Path, is_dir: bool) -> Iterable[Path | _Build | LoadFailure | Skipped]:
    if is_dir:
        return _walk(root)
    if root.name in KUSTOMIZATION_FILES:
        return [_Build(root.parent, "kustomize")]
    if root.name == CHART_FILE:
        return [_Build(root.parent, "helm")]
    return [root]


def load(paths: list[str], options: BuildOptions | None = None) -> Iterator[Item]:
    """Every document under `paths`, checked or skipped; `-` reads standard input. Kustomizations and charts are
    built with `options`."""
    options = options or BuildOptions()
    patches = _Patches()
    for raw in paths:
        if raw == "-":
            try:
                text = _stdin()
            except ManifestError as error:
                yield LoadFailure("<stdin>", str(error))
                continue
            yield from _documents("<stdin>", text)
            continue
        root = Path(raw)
        try:
            is_dir = stat.S_ISDIR(root.stat().st_mode)
        except FileNotFoundError:
            yield LoadFailure(raw, "a broken symlink" if root.is_symlink() else "no such file or directory")
            continue
        except OSError as error:
            yield LoadFailure(raw, f"cannot read: {error.strerror or error}")
            continue
        for target in _targets(root, is_dir):
            if isinstance(target, _Build):
                yield from _built(target, options)
            elif not isinstance(target, Path):
                yield target
            elif user := patches.user(target):
                yield Skipped(str(target), f"a patch of the kustomization {user}, checked as that builds")
            else:
                try:
                    text = read_text(target)
                except ManifestError as error:
                    yield LoadFailure(str(target), str(error))
                    continue
                yield from _documents(str(target), text)


def load_policy(path: str) -> TenantPolicySpec:
    """The tenant policy in a SpeculativeInferencePolicy manifest (as the chart renders it, or `kubectl get
    specinferpolicy NAME -o yaml` prints it); ManifestError, in one line, for anything else."""
    try:
        text = read_text(path)
    except ManifestError as error:
        raise ManifestError(f"{path}: {error}") from error
    found = [d.data for d in documents(text) if d.data is not None]
    if len(found) != 1 or not isinstance(found[0], dict) or found[0].get("kind") != POLICY_KIND:
        raise ManifestError(f"{path}: not one policy manifest (kind {POLICY_KIND})")
    report = validate(SpeculativeInferencePolicy, found[0])
    if report.value is None:
        raise ManifestError(f"{path}: " + "; ".join(str(p) for p in report.errors))
    return report.value.spec
