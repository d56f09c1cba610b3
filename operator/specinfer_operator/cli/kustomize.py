"""Kustomizations as files: which directory is one, which files it uses as patches, and which patch set a field.

`kubectl kustomize` records where a resource came from and which kustomizations transformed it (buildMetadata),
not which patch set which field. A patch names the fields it sets and their values, so the patch that set a bad
value is the last one, among those kustomizations, that sets that field to that value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specinfer_operator.cli.files import read_text
from specinfer_operator.cli.yaml_documents import ManifestError, documents

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
COMPONENT = "Component"
_INDEX = re.compile(r"\[(\d+)\]\.?")  # a list index in a problem's path: `[0]`, and the dot after it
_MISSING = object()


def kustomization_in(directory: Path) -> Path | None:
    """The kustomization file of `directory`, or None when it is not a kustomization."""
    return next((directory / n for n in KUSTOMIZATION_FILES if (directory / n).is_file()), None)


def read_kustomization(file: Path) -> dict[str, Any]:
    """A kustomization's fields; ManifestError (one line) when it is not one mapping."""
    found = [d.data for d in documents(read_text(file)) if d.data is not None]
    if len(found) != 1 or not isinstance(found[0], dict):
        raise ManifestError("not a kustomization (one YAML mapping)")
    return found[0]


@dataclass(frozen=True)
class _Reference:
    """One patch of a kustomization: a file, or text written inline; the kind its target names."""

    file: Path | None
    text: str | None
    kind: str | None


def _references(kustomization: dict[str, Any], directory: Path) -> Iterator[_Reference]:
    """The patches of `patches`, `patchesStrategicMerge` (a path, or inline YAML) and `patchesJson6902`."""
    for key in ("patchesStrategicMerge", "patches", "patchesJson6902"):
        entries = kustomization.get(key)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, str):  # patchesStrategicMerge: a file if there is one, else the patch itself
                path = directory / entry
                inline = "\n" in entry or not path.is_file()
                yield _Reference(None if inline else path, entry if inline else None, None)
            elif isinstance(entry, dict):
                target = entry.get("target")
                kind = target.get("kind") if isinstance(target, dict) else None
                kind = kind if isinstance(kind, str) else None
                if isinstance(entry.get("path"), str):
                    yield _Reference(directory / entry["path"], None, kind)
                elif isinstance(entry.get("patch"), str):
                    yield _Reference(None, entry["patch"], kind)


def patch_files(kustomization: dict[str, Any], directory: Path) -> set[Path]:
    """The files a kustomization uses as patches, resolved: not resources, never checked on their own."""
    return {r.file.resolve() for r in _references(kustomization, directory) if r.file is not None}


@dataclass(frozen=True)
class Setter:
    """A value a patch sets: at a path of the object (keys, list indices as text), for objects of a kind."""

    kind: str | None
    at: tuple[str, ...]
    value: Any


def _pointer(text: str) -> tuple[str, ...]:
    """A JSON pointer (RFC 6901) as its tokens."""
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in text.split("/")[1:])


def _setters(data: Any, kind: str | None) -> Iterator[Setter]:
    if isinstance(data, dict):  # a strategic-merge patch: the object's own fields
        own = data.get("kind")
        yield Setter(own if isinstance(own, str) else kind, (), data)
    elif isinstance(data, list):  # JSON6902: only add and replace carry the value they set
        for op in data:
            if isinstance(op, dict) and op.get("op") in ("add", "replace") and isinstance(op.get("path"), str):
                yield Setter(kind, _pointer(op["path"]), op.get("value"))


def _same(a: Any, b: Any) -> bool:
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


@dataclass(frozen=True)
class Patch:
    """One patch applied on the way to a built object, named as the report names it."""

    label: str
    setters: tuple[Setter, ...]

    def sets(self, kind: Any, at: list[str | int], value: Any) -> bool:
        """Whether this patch sets the field `at` of an object of `kind` to `value`."""
        wanted = [str(t) for t in at]
        for setter in self.setters:
            if setter.kind not in (None, kind) or list(setter.at) != wanted[: len(setter.at)]:
                continue
            found = _walk(setter.value, at[len(setter.at) :])
            if found is not _MISSING and _same(found, value):
                return True
        return False


def patches(kustomization: dict[str, Any], file: Path, shown: Callable[[Path], str]) -> list[Patch]:
    """The patches of the kustomization in `file`, as applied; a patch that cannot be read sets nothing (kustomize
    refuses to build then, and says why)."""
    found = []
    for ref in _references(kustomization, file.parent):
        label = shown(ref.file) if ref.file else f"an inline patch of {shown(file)}"
        try:
            text = read_text(ref.file) if ref.file else ref.text or ""
            docs = [d.data for d in documents(text)]
        except ManifestError:
            docs = []
        found.append(Patch(label, tuple(s for d in docs for s in _setters(d, ref.kind))))
    return found


def _walk(data: Any, at: list[str | int]) -> Any:
    """The value at `at` (keys, list indices), or _MISSING."""
    for token in at:
        if isinstance(data, dict) and str(token) in data:
            data = data[str(token)]
        elif isinstance(data, list) and isinstance(token, int) and token < len(data):
            data = data[token]
        else:
            return _MISSING
    return data


def locate(data: Any, path: str) -> tuple[list[str | int], Any] | None:
    """The tokens and the value a problem's path (`spec.speculative.numSpeculativeTokens`, `a.b[0].c`) names in
    `data`, keys with dots included (`metadata.annotations.specinfer.io/canary`); None when it names nothing."""
    at: list[str | int] = []
    rest = path
    while rest:
        index = _INDEX.match(rest)
        if index and isinstance(data, list) and int(index.group(1)) < len(data):
            at.append(int(index.group(1)))
            data = data[int(index.group(1))]
            rest = rest[index.end() :]
            continue
        if not isinstance(data, dict):
            return None
        keys = [k for k in data if rest == k or rest.startswith((f"{k}.", f"{k}["))]
        if not keys:
            return None
        key = max(keys, key=len)
        at.append(key)
        data = data[key]
        rest = rest[len(key) :].removeprefix(".")
    return at, data
