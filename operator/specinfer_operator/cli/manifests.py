"""Read manifests from files, directories and stdin the way a GitOps repository holds them, and find the
SpeculativeInferences among them (render/admission.py checks each).

A repository holds much else: other kinds, kustomize patches (top-level lists), Helm templates,
scalar or JSON-array files, documents with tags of other tools. Those are skipped, each with its reason.
What cannot be read at all (a missing or unreadable path, bytes that are not UTF-8, YAML kubectl would
refuse) is a failure: never a silent pass.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specinfer_operator.api.policy import POLICY_KIND, SpeculativeInferencePolicy, TenantPolicySpec
from specinfer_operator.cli.yaml_documents import MAX_BYTES, ManifestError, Parsed, documents
from specinfer_operator.render.admission import not_ours
from specinfer_runtime.validation import validate

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Document:
    """One SpeculativeInference document, and where it came from."""

    source: str
    index: int
    count: int
    data: Any
    custom_tags: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.source}#{self.index}" if self.count > 1 else self.source


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


Item = Document | LoadFailure | Skipped


def read_limited(stream: BinaryIO) -> str:
    """At most MAX_BYTES of UTF-8 (a byte-order mark allowed, as kubectl allows it)."""
    data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ManifestError(f"larger than {MAX_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise ManifestError(f"not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})") from error


def open_regular(path: str | Path) -> BinaryIO:
    """A file opened for reading without blocking first: a FIFO or a device would hold the open (or the read)
    until some writer came. ManifestError for anything but a regular file; OSError as open raises it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ManifestError("not a regular file (a FIFO, socket or device): give a file, a directory, or -")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


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


def _walk(root: Path) -> Iterator[Path | LoadFailure | Skipped]:
    """Manifest files under `root`, following symlinked directories once each (a link back up is a loop,
    skipped). Templates of a Helm chart (a directory beside Chart.yaml) are skipped whole."""
    seen: set[tuple[int, int]] = set()
    pending = [root]
    while pending:
        directory = pending.pop()
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
        chart = any(e.name == "Chart.yaml" for e in entries)
        files = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir():
                if chart and entry.name == "templates":
                    yield Skipped(str(path), "Helm chart templates (render them with helm template first)")
                else:
                    pending.append(path)
            elif path.suffix in MANIFEST_SUFFIXES:
                if entry.is_file():
                    files.append(path)
                elif not path.exists():
                    yield LoadFailure(str(path), "a broken symlink")
                else:  # a FIFO would block the read until some writer came
                    yield Skipped(str(path), "not a regular file")
        yield from reversed(files)


def _classify(source: str, parsed: list[Parsed]) -> Iterator[Document | Skipped]:
    # A `kind: List` (as `kubectl get -o yaml` prints) stands for its items.
    expanded: list[tuple[Any, list[str]]] = []
    for doc in parsed:
        if doc.data is None:
            continue
        if isinstance(doc.data, dict) and doc.data.get("kind") == "List" and isinstance(doc.data.get("items"), list):
            expanded += [(item, doc.custom_tags) for item in doc.data["items"]]
        else:
            expanded.append((doc.data, doc.custom_tags))
    for i, (data, tags) in enumerate(expanded, 1):
        label = f"{source}#{i}" if len(expanded) > 1 else source
        reason = not_ours(data)
        if reason:
            yield Skipped(label, reason)
        else:
            yield Document(source, i, len(expanded), data, tuple(tags))


def _documents(source: str, text: str) -> Iterator[Item]:
    try:
        parsed = list(documents(text))
    except ManifestError as error:
        if "{{" in text:
            yield Skipped(source, "a template, not YAML (Helm, Go templates)")
        else:
            yield LoadFailure(source, str(error))
        return
    found = list(_classify(source, parsed))
    if not found:
        yield Skipped(source, "no documents")
    yield from found


def load(paths: list[str]) -> Iterator[Item]:
    """Every document under `paths`, checked or skipped; `-` reads standard input."""
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
        for file in _walk(root) if is_dir else [root]:
            if not isinstance(file, Path):
                yield file
                continue
            try:
                with open_regular(file) as stream:
                    text = read_limited(stream)
            except OSError as error:
                yield LoadFailure(str(file), f"cannot read: {error.strerror or error}")
                continue
            except ManifestError as error:
                yield LoadFailure(str(file), str(error))
                continue
            yield from _documents(str(file), text)


def load_policy(path: str) -> TenantPolicySpec:
    """The tenant policy in a SpeculativeInferencePolicy manifest (as the chart renders it, or `kubectl get
    specinferpolicy NAME -o yaml` prints it); ManifestError, in one line, for anything else."""
    try:
        with open_regular(path) as stream:
            text = read_limited(stream)
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error.strerror or error}") from error
    except ManifestError as error:
        raise ManifestError(f"{path}: {error}") from error
    found = [d.data for d in documents(text) if d.data is not None]
    if len(found) != 1 or not isinstance(found[0], dict) or found[0].get("kind") != POLICY_KIND:
        raise ManifestError(f"{path}: not one policy manifest (kind {POLICY_KIND})")
    report = validate(SpeculativeInferencePolicy, found[0])
    if report.value is None:
        raise ManifestError(f"{path}: " + "; ".join(str(p) for p in report.errors))
    return report.value.spec
