"""The sample lines of a Prometheus text exposition, read in time linear in its size (pure).

The text comes from a pod, so its parse cost must not depend on what the pod chooses to send: the
general-purpose parser of prometheus_client takes time quadratic in a line's label count (seconds for
one line of 50,000 labels). Only the few samples the operator reads are parsed here, each line bounded
in length and label count and their number bounded, before any of them is taken apart; every other line
costs one scan for its name. Comments (TYPE, HELP) are not needed to read counter values and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass

MAX_LINE = 4096  # bytes of one sample line the operator reads; vLLM's are ~120
MAX_LABELS = 16  # labels of such a line; vLLM's have three
MAX_SAMPLES = 1024  # such lines in one exposition: 22 per served model and engine at K=14

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,?)')
_VALUE = re.compile(r"[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
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


def _labels(text: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    at, more = 0, True
    while at < len(text):
        found = _LABEL.match(text, at) if more else None
        if found is None or found.end() == at:
            raise ExpositionError(f"malformed labels in {_quote(line)}")
        name, raw, more = found.group(1), found.group(2), bool(found.group(3))
        labels[name] = re.sub(r"\\.", lambda m: _ESCAPES.get(m.group(0), m.group(0)), raw)
        at = found.end()
    return labels


def _sample(line: str) -> Sample:
    name = _NAME.match(line)
    assert name is not None  # the caller matched the name
    at, labels = name.end(), {}
    if line.startswith("{", at):
        close = line.rfind("}")
        if close < at:
            raise ExpositionError(f"unclosed labels in {_quote(line)}")
        labels = _labels(line[at + 1 : close].rstrip(" \t"), line)
        at = close + 1
    value = _VALUE.fullmatch(line, at)
    if value is None or not _NUMBER.fullmatch(value.group(1)):
        raise ExpositionError(f"no value in {_quote(line)}")
    return Sample(name.group(0), labels, float(value.group(1)))


def _lines(text: str, names: Collection[str]) -> Iterator[str]:
    """The lines that hold a sample of `names`, checked against the bounds before they are parsed."""
    kept = 0
    for raw in text.splitlines():
        line = raw.lstrip(" \t")
        name = _NAME.match(line)
        if name is None or name.group(0) not in names:
            continue  # a comment, a blank line or another metric: one scan of its name
        kept += 1
        if kept > MAX_SAMPLES:
            raise ExpositionError(f"more than {MAX_SAMPLES} samples of the spec-decode and step counters", True)
        if len(line) > MAX_LINE:
            raise ExpositionError(
                f"a sample line of {len(line)} characters, more than {MAX_LINE}: {_quote(line)}", True
            )
        if line.count('="') > MAX_LABELS:
            raise ExpositionError(f"a sample with more than {MAX_LABELS} labels: {_quote(line)}", True)
        yield line


def samples(text: str, names: Collection[str]) -> list[Sample]:
    """The samples of the metrics `names` (full sample names, e.g. `..._total`), in the order given;
    ExpositionError for a line that breaks a bound or the format."""
    return [_sample(line) for line in _lines(text, names)]
