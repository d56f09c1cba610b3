"""Read manifests (files, directories, stdin; multi-document YAML) and check SpeculativeInferences."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specinfer_operator.resource import API_VERSION, GROUP, KIND, SpeculativeInference
from specinfer_runtime.advisories import advise
from specinfer_runtime.validation import Problem, Report, validate

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# libyaml's parser is several times faster; PyYAML wheels ship it, source builds may not.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Document:
    """One YAML document, and where it came from."""

    source: str
    index: int
    count: int
    data: Any

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


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file() and child.suffix in MANIFEST_SUFFIXES:
                yield child
    else:
        yield path


def _documents(source: str, text: str) -> Iterator[Document | LoadFailure]:
    try:
        docs = [d for d in yaml.load_all(text, Loader=Loader) if d is not None]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        yield LoadFailure(source, f"not valid YAML: {where}{problem}")
        return
    # A `kind: List` (as `kubectl get -o yaml` prints) stands for its items.
    expanded: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            expanded.extend(doc["items"])
        else:
            expanded.append(doc)
    for i, doc in enumerate(expanded, 1):
        yield Document(source, i, len(expanded), doc)


def load(paths: list[str]) -> Iterator[Document | LoadFailure]:
    """Every document under `paths`; `-` reads standard input."""
    for raw in paths:
        if raw == "-":
            yield from _documents("<stdin>", sys.stdin.read())
            continue
        root = Path(raw)
        if not root.exists():
            yield LoadFailure(raw, "no such file or directory")
            continue
        for file in _files(root):
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                yield LoadFailure(str(file), f"cannot read: {error}")
                continue
            yield from _documents(str(file), text)


def is_ours(data: Any) -> bool:
    """Whether a document claims to be a SpeculativeInference (others in a directory are skipped)."""
    if not isinstance(data, dict):
        return True
    api_version, kind = str(data.get("apiVersion", "")), data.get("kind")
    return kind == KIND or api_version.split("/")[0] == GROUP


def identity_problems(data: Any) -> list[Problem]:
    """Checks before the schema: is this a SpeculativeInference of a version we serve?"""
    if not isinstance(data, dict):
        return [Problem("", "not a Kubernetes object: expected a mapping with apiVersion, kind, metadata and spec")]
    problems = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(
            Problem(
                "apiVersion",
                f'Unsupported value: "{data.get("apiVersion")}": supported values: "{API_VERSION}"',
            )
        )
    if data.get("kind") != KIND:
        problems.append(Problem("kind", f'Unsupported value: "{data.get("kind")}": supported values: "{KIND}"'))
    return problems


def check(data: Any) -> Report[SpeculativeInference]:
    """Everything `kubectl apply` and the operator would say about one SpeculativeInference."""
    problems = identity_problems(data)
    if problems:
        return Report(errors=problems)
    return validate(SpeculativeInference, data, advise=lambda cr: advise(cr.spec))
