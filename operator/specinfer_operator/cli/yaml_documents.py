"""YAML read the way kubectl reads it, within limits that hostile input cannot break.

kubectl turns YAML into JSON with sigs.k8s.io/yaml (go-yaml v2): `yes`, `on`, `y` are booleans,
`2024-01-01` and `1:30` stay strings, `0755` is octal, keys become strings. PyYAML's own resolver
differs on each of these, so values are resolved here from libyaml's event stream, in one pass with an
explicit stack: no recursion (30,000 nested brackets are a depth error, not a crash), aliases count for
everything they expand to (an alias bomb stops at the node limit), and a document that cannot become
JSON is refused with one line naming where. One difference on purpose: a repeated key is refused,
where kubectl silently keeps the last value.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

# libyaml's parser is several times faster; PyYAML wheels ship it, source builds may not.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 32 << 20  # the API server takes 3 MiB per object; a repository file is rarely more than a few
MAX_DEPTH = 64  # a SpeculativeInference nests about 12 deep
MAX_NODES = 200_000  # per document, aliases expanded


class ManifestError(ValueError):
    """A document kubectl could not read either, in one line."""


@dataclass
class Parsed:
    """One document, and the tags of other tools it used (kubectl ignores them and keeps the plain value)."""

    data: Any
    custom_tags: list[str] = field(default_factory=list)


_TRUE = {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"}
_FALSE = {"n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE"}
_NULL = {"", "~", "null", "Null", "NULL"}
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")
_SPECIAL_FLOATS = {".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"}
INT64 = 2**63
_STANDARD = "tag:yaml.org,2002:"


def _int(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 0, 64) (or ParseUint), after go-yaml drops underscores."""
    plain = text.replace("_", "")
    if not _INT.match(plain):
        return None
    sign = -1 if plain.startswith("-") else 1
    digits = plain.lstrip("+-")
    base = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}.get(digits[:2])
    if base:
        value = int(digits[2:], base)
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits[1:], 8)  # Go reads a leading 0 as octal
    else:
        value = int(digits)
    value *= sign
    return value if -INT64 <= value < 2 * INT64 else None


def resolve_plain(text: str) -> Any:
    """A plain (unquoted, untagged) scalar as go-yaml v2 resolves it for kubectl."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text in _NULL:
        return None
    if text in _SPECIAL_FLOATS:
        raise ManifestError(f"{text} is not a number JSON can hold")
    if not text or text[0] not in "+-.0123456789":
        return text
    number = _int(text)
    if number is not None:
        return number
    plain = text.replace("_", "")
    if _FLOAT.match(plain):
        return _json_number(float(plain), text)
    return text  # dates, times, versions: kubectl keeps them as strings


def _json_number(value: float, text: str) -> int | float:
    """A float after kubectl's trip through JSON: Go writes an integral float below 1e21 without a point,
    and the API server reads that back as an integer (so `replicas: 2.0` is 2)."""
    if math.isinf(value):
        raise ManifestError(f"{text} is out of range for a JSON number")
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


def _tagged(tag: str, text: str, where: str) -> Any:
    """A scalar with an explicit standard tag."""
    kind = tag.removeprefix(_STANDARD)
    try:
        if kind == "str":
            return text
        if kind == "bool":
            return resolve_plain(text) if text in _TRUE | _FALSE else _bad(tag, text, where)
        if kind == "null":
            return None
        if kind == "int":
            number = _int(text)
            return number if number is not None else _bad(tag, text, where)
        if kind == "float":
            value = resolve_plain(text)
            return value if isinstance(value, int | float) and not isinstance(value, bool) else _bad(tag, text, where)
        if kind == "binary":
            return base64.b64decode("".join(text.split()), validate=True).decode("utf-8", "replace")
        if kind == "timestamp":
            return text
    except (ValueError, TypeError) as error:
        raise ManifestError(f"{where}: {tag} {text!r}: {error}") from error
    return _bad(tag, text, where)


def _bad(tag: str, text: str, where: str) -> Any:
    raise ManifestError(f"{where}: {text!r} cannot be read as {tag}")


def _key(value: Any, where: str) -> str:
    """Mapping keys become JSON object keys: scalars turn into their text, as sigs.k8s.io/yaml does."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value) if isinstance(value, int) or not value.is_integer() else str(int(value))
    raise ManifestError(
        f"{where}: {'a null' if value is None else 'a ' + type(value).__name__} cannot be a key of a JSON object"
    )


def _where(event: Any) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}"


@dataclass
class _Open:
    """A collection being read: its value, a key waiting for its value, its expanded size."""

    value: Any
    anchor: str | None
    size: int = 1
    key: tuple[Any, Any] | None = None  # (key, its event)
    merged: set[str] = field(default_factory=set)  # keys a merge (<<) set, which later keys may override


class _Builder:
    """Turn one document's events into a value, iteratively."""

    def __init__(self) -> None:
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[Any, int]] = {}  # value and its expanded size
        self.nodes = 0
        self.tags: list[str] = []
        self.result: Any = None

    def _count(self, size: int, event: Any) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            raise ManifestError(f"{_where(event)}: more than {MAX_NODES} values once aliases are expanded")

    def _add(self, value: Any, size: int, event: Any) -> None:
        if not self.stack:
            self.result = value
            return
        top = self.stack[-1]
        top.size += size
        if isinstance(top.value, list):
            top.value.append(value)
        elif top.key is None:
            top.key = (value, event)
        else:
            self._put(top, top.key, value)
            top.key = None

    def _put(self, top: _Open, key: tuple[Any, Any], value: Any) -> None:
        raw, event = key
        mapping: dict[str, Any] = top.value
        if raw == "<<" and isinstance(event, yaml.ScalarEvent) and not event.style:
            for source in value if isinstance(value, list) else [value]:
                if not isinstance(source, dict):
                    raise ManifestError(f"{_where(event)}: a merge key (<<) takes a mapping or a list of them")
                for name, item in source.items():
                    if name not in mapping:
                        mapping[name] = item
                        top.merged.add(name)
            return
        name = _key(raw, _where(event))
        if name in mapping and name not in top.merged:
            raise ManifestError(
                f'{_where(event)}: key "{name}" already set in this mapping (kubectl would keep the last value)'
            )
        top.merged.discard(name)
        mapping[name] = value

    def feed(self, event: Any) -> None:
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in self.anchors:
                raise ManifestError(f"{_where(event)}: unknown alias *{event.anchor}")
            value, size = self.anchors[event.anchor]
            self._count(size, event)
            self._add(value, size, event)
        elif isinstance(event, yaml.ScalarEvent):
            self._count(1, event)
            value = self._scalar(event)
            if event.anchor:
                self.anchors[event.anchor] = (value, 1)
            self._add(value, 1, event)
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            self._count(1, event)
            if len(self.stack) >= MAX_DEPTH:
                raise ManifestError(f"{_where(event)}: nested deeper than {MAX_DEPTH} levels")
            self._custom(event.tag, event)
            self.stack.append(_Open([] if isinstance(event, yaml.SequenceStartEvent) else {}, event.anchor))
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            done = self.stack.pop()
            if done.anchor:
                self.anchors[done.anchor] = (done.value, done.size)
            self._add(done.value, done.size, event)

    def _custom(self, tag: str | None, event: Any) -> None:
        if tag and tag != "!" and not tag.startswith(_STANDARD):
            self.tags.append(f"{tag} ({_where(event)})")

    def _scalar(self, event: Any) -> Any:
        tag, text = event.tag, event.value
        if tag and tag != "!" and not tag.startswith(_STANDARD):
            self._custom(tag, event)
            return text
        if tag and tag != "!":
            return _tagged(tag, text, _where(event))
        if not event.style and event.implicit[0]:
            try:
                return resolve_plain(text)
            except ManifestError as error:
                raise ManifestError(f"{_where(event)}: {error}") from error
        return text


def documents(text: str) -> Iterator[Parsed]:
    """Every document of `text`; ManifestError (one line) on the first that kubectl could not read."""
    if len(text) > MAX_BYTES:
        raise ManifestError(f"larger than {MAX_BYTES >> 20} MiB")
    builder: _Builder | None = None
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.DocumentStartEvent):
                builder = _Builder()
            elif isinstance(event, yaml.DocumentEndEvent) and builder is not None:
                yield Parsed(builder.result, builder.tags)
                builder = None
            elif builder is not None:
                builder.feed(event)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ManifestError(f"not valid YAML: {where}{' '.join(str(problem).split())}") from error
