"""What the command prints, safe to print whatever the input held.

A repository chooses the values the command echoes: resource names, field values, file names, the messages of
kubectl and helm that quote them. Printed raw, a line break in one starts a line the repository wrote, which a CI
system reads as a command (GitHub Actions: `::error file=...::` at the start of a line after blanks, `##[error]`
anywhere in one; Azure Pipelines `##vso[`, TeamCity `##teamcity[`), and an escape sequence rewrites the terminal.
So every line is escaped as it is printed: control characters, line and paragraph separators and the bidirectional
controls that reorder what is shown become `\\n`, `\\x1b`, `\\u2028`; a `#` before another `#` becomes `\\x23`; a
line that would open with `::` has its first colon escaped. The command's own words hold none of these, so only
echoed values change. JSON and YAML output keep the values exact, in their own escapes.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

import yaml

# C0 and C1 controls and DEL; U+2028/U+2029 (line breaks to JavaScript and some log viewers); the bidirectional
# marks, embeddings, overrides and isolates, which make a line show other text than it holds.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_COMMAND = re.compile("#(?=#)")  # `##[`, `##vso[`, `##teamcity[`: no two `#` in a row survive
_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def line(text: str) -> str:
    """`text` as one line that only shows what it holds and that no CI system reads as a command."""
    text = _COMMAND.sub("\\\\x23", _UNSAFE.sub(_escaped, text))
    start = len(text) - len(text.lstrip())
    return text[:start] + "\\x3a" + text[start + 1 :] if text.startswith("::", start) else text


def say(text: str, file: TextIO) -> None:
    """Print `text` as line() makes it."""
    print(line(text), file=file)


def _write(text: str, out: TextIO) -> None:
    """`text` (ASCII) a line at a time, as json.dump and yaml.dump stream: one write larger than a pipe holds
    returns as if whole once the reader has gone (CPython's BufferedWriter returns the part written, which
    TextIOWrapper drops), and `specinfer render | head` would not be told."""
    out.writelines(text.splitlines(keepends=True))


def write_json(value: Any, out: TextIO) -> None:
    """JSON with every non-ASCII and control character as \\u escapes (json's default), and `##` as `\\u0023#`:
    `#` only occurs inside strings, where the escape means the same character."""
    _write(_COMMAND.sub("\\\\u0023", json.dumps(value, indent=2)) + "\n", out)


def _needs_quotes(text: str) -> bool:
    return bool(_BREAKS.intersection(text)) or "##" in text or text.lstrip().startswith("::")


class _Dumper(yaml.SafeDumper):
    """Strings that hold a line break, `##` or open with `::` as double-quoted scalars, whose escapes keep them on
    one line (PyYAML would write a line break as a new line of a single-quoted scalar)."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if _needs_quotes(text) else None)


_Dumper.add_representer(str, _string)


def write_yaml(objects: list[Any], out: TextIO) -> None:
    """A YAML stream of `objects` that reads back the same and prints no line break nor command of the input:
    non-ASCII and control characters escaped (PyYAML's default), never folded (an unbounded width), and `##` as
    `\\x23#`: once quoted, a `#` beside another only occurs inside a double-quoted scalar."""
    text = yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=float("inf"))
    _write(_COMMAND.sub("\\\\x23", text), out)
