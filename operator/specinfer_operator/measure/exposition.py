"""The sample lines of a Prometheus text exposition, read as it arrives, in time linear in its size (pure).

The text comes from a pod, so neither the memory nor the time its parse takes may depend on what the pod
chooses to send. The body is never held whole, decoded whole or split into lines: a Reader is fed the bytes
as they are received and looks only for the lines of the few samples the operator reads (one search for
their common prefix, in C, over everything else, whatever it holds). What it keeps is bounded: the piece
of a line that spans two receives (at most MAX_LINE bytes; a longer line the operator does not read is
skipped to its end without being kept), and the samples read, each line bounded in length and label count,
their number and their bytes in all bounded, and of their labels only those the caller asks for. The
general-purpose parser of prometheus_client is not used: it takes time quadratic in a line's label count.
Comments (TYPE, HELP) are not needed to read counter values and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

MAX_LINE = 4096  # bytes of one sample line the operator reads; vLLM's are ~120
MAX_LABELS = 16  # labels of such a line; vLLM's have three
MAX_SAMPLES = 1024  # such lines in one exposition: 22 per served model and engine at K=14
MAX_KEPT = 128 << 10  # bytes of such lines in all: ~3.3 KiB per engine at K=14; 32 data-parallel ones take 106 KiB

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A label and its quoted value: the value's loop is unrolled (runs of plain characters, then one escape),
# so that a value of escapes costs one step per escape, not a backtracking alternation per character.
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"[ \t]*(,?)')
_VALUE = re.compile(r"[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN")
_BLANK = re.compile(rb"[ \t]*")
_STAND_INS = "\x00\x01\x02"
QUOTE = 60  # characters of an offending line quoted in an error


class ExpositionError(ValueError):
    """Why the samples cannot be read; `bound` when a limit was passed rather than the format broken."""

    def __init__(self, message: str, bound: bool = False) -> None:
        super().__init__(message)
        self.bound = bound


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _quote(line: str) -> str:
    return repr(line[:QUOTE] + ("..." if len(line) > QUOTE else ""))


def _unescape(raw: str) -> str:
    """A label value without its escapes (\\\\, \\", \\n; others stay as written), in C string operations: in a
    well-formed value each backslash starts a pair, so the pairs of backslashes, taken first and left to right
    (a character the value lacks stands in for each meanwhile), leave no other pair to mistake."""
    if "\\" not in raw:
        return raw
    held = next((c for c in _STAND_INS if c not in raw), None)
    if held is None:  # a value that holds every stand-in: its pairs of backslashes apart
        return "\\".join(part.replace('\\"', '"').replace("\\n", "\n") for part in raw.split("\\\\"))
    return raw.replace("\\\\", held).replace('\\"', '"').replace("\\n", "\n").replace(held, "\\")


def _labels(text: str, line: str, keep: Collection[str]) -> dict[str, str]:
    """The labels of `keep` in the text between the braces; every label is checked and counted as it is read
    (however it is spaced), only those are kept."""
    labels: dict[str, str] = {}
    at, more, count = 0, True, 0
    while at < len(text):
        found = _LABEL.match(text, at) if more else None
        if found is None or found.end() == at:
            raise ExpositionError(f"malformed labels in {_quote(line)}")
        count += 1
        if count > MAX_LABELS:
            raise ExpositionError(f"a sample with more than {MAX_LABELS} labels: {_quote(line)}", True)
        name, more = found.group(1), bool(found.group(3))
        if name in keep:
            labels[name] = _unescape(found.group(2))
        at = found.end()
    return labels


def _sample(line: str, keep: Collection[str]) -> Sample:
    name = _NAME.match(line)
    assert name is not None  # the reader matched the name
    at, labels = name.end(), {}
    if line.startswith("{", at):
        close = line.rfind("}")
        if close < at:
            raise ExpositionError(f"unclosed labels in {_quote(line)}")
        labels = _labels(line[at + 1 : close].rstrip(" \t"), line, keep)
        at = close + 1
    value = _VALUE.fullmatch(line, at)
    if value is None or not _NUMBER.fullmatch(value.group(1)):
        raise ExpositionError(f"no value in {_quote(line)}")
    return Sample(name.group(0), labels, float(value.group(1)))


def _start_of(names: Collection[str]) -> re.Pattern[bytes]:
    """A name of `names` followed by its labels or value. Written as the names' common prefix, then the
    rest of each, so that the regex engine searches for the prefix as a literal, at memchr speed."""
    encoded = sorted({n.encode() for n in names}, key=len, reverse=True)
    first, last = min(encoded), max(encoded)  # the sorted extremes share what every name shares
    prefix = first[: next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))]
    rests = b"|".join(re.escape(n[len(prefix) :]) for n in encoded)
    return re.compile(re.escape(prefix) + b"(?:" + rests + b")(?=[{ \t])")


class Reader:
    """The samples of the metrics `names` (full sample names, e.g. `..._total`), from an exposition fed in
    pieces as it arrives; of their labels, those in `labels`. ExpositionError as soon as a line breaks a
    bound or the format."""

    def __init__(self, names: Collection[str], labels: Collection[str]) -> None:
        self._start = _start_of(names)
        self._keep = frozenset(labels)
        self._carry = b""  # the start of a line whose end has not arrived
        self._skipping = False  # inside a line too long to be one the operator reads
        self._kept = 0
        self.samples: list[Sample] = []

    def feed(self, data: bytes) -> None:
        if self._skipping:
            end = data.find(b"\n")
            if end < 0:
                return
            data, self._skipping = data[end + 1 :], False
        buffer = self._carry + data if self._carry else data
        end = buffer.rfind(b"\n")
        if end >= 0:
            self._scan(buffer, end)
        self._carry = buffer[end + 1 :]
        if len(self._carry) > MAX_LINE:
            line = self._carry.lstrip(b" \t")
            if self._start.match(line):
                raise ExpositionError(f"a sample line of more than {MAX_LINE} bytes: {_quote(_text(line))}", True)
            self._carry, self._skipping = b"", True

    def close(self) -> list[Sample]:
        """The samples, once the last piece was fed (a last line without its newline is read too)."""
        if self._carry:
            carry, self._carry = self._carry + b"\n", b""
            self._scan(carry, len(carry) - 1)
        return self.samples

    def _scan(self, buffer: bytes, end: int) -> None:
        """Read the lines of `names` in buffer[:end], which holds whole lines."""
        at = 0
        while (found := self._start.search(buffer, at, end)) is not None:
            start = buffer.rfind(b"\n", 0, found.start()) + 1
            stop = buffer.find(b"\n", found.start(), end)
            stop = end if stop < 0 else stop
            if _BLANK.fullmatch(buffer, start, found.start()):  # at the start of its line: one of ours
                self._read(buffer[found.start() : stop])
            at = stop + 1

    def _read(self, raw: bytes) -> None:
        if len(raw) > MAX_LINE:
            raise ExpositionError(f"a sample line of more than {MAX_LINE} bytes: {_quote(_text(raw))}", True)
        self._kept += len(raw)
        if len(self.samples) >= MAX_SAMPLES or self._kept > MAX_KEPT:
            raise ExpositionError(
                f"more than {MAX_SAMPLES} samples or {MAX_KEPT >> 10} KiB of the spec-decode and step counters", True
            )
        self.samples.append(_sample(_text(raw).rstrip("\r"), self._keep))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def samples(data: bytes | str, names: Collection[str], labels: Collection[str]) -> list[Sample]:
    """The samples of `names` in a whole exposition, with their `labels` (see Reader)."""
    reader = Reader(names, labels)
    reader.feed(data.encode() if isinstance(data, str) else data)
    return reader.close()
