"""Lay out the docs' `kubectl get specinference` samples from the CRD's printer columns.

A page's sample is a console line `$ kubectl get specinference ...` and the table after it. The columns, their
order and their layout are the CRD's (`-o wide` adds the priority-1 ones), laid out as kubectl's tab writer does;
only each row's values are written by hand, read under the column names they stand under. A column the CRD
gained shows empty until a value is written under it; one it lost is dropped.

python -m hack.get_samples         # rewrite the samples (make docs); a test fails when a page's copy is stale
"""

from __future__ import annotations

import re
from pathlib import Path

from specinfer_operator.api.crd import crd

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs")
COMMAND = re.compile(r"^\$ kubectl get (specinference|speculativeinference)\b(?P<rest>.*)$")
PADDING = 3  # kubectl's tab writer: each column as wide as its widest cell, then three spaces


def columns(wide: bool, namespaces: bool) -> list[str]:
    """The headers kubectl prints for the CRD: NAME, the printer columns (priority 1 with -o wide only)."""
    printer = crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    names = [c["name"].upper() for c in printer if wide or not c.get("priority")]
    return (["NAMESPACE"] if namespaces else []) + ["NAME", *names]


def layout(rows: list[list[str]]) -> list[str]:
    """Rows as kubectl's tab writer aligns them; the last cell is not padded, trailing spaces are dropped."""
    widths = [max(len(row[i]) for row in rows) + PADDING for i in range(len(rows[0]) - 1)]
    return [("".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + row[-1]).rstrip() for row in rows]


def cells(header: str, line: str) -> dict[str, str]:
    """A row's values by the column each stands under (a column runs from its header to the next one)."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return {name: line[start:end].strip() for name, start, end in zip(names, starts, ends, strict=True)}


def sample(command: str, table: list[str]) -> list[str]:
    """The table of `command` laid out from the CRD, with the values `table` (header first) holds."""
    wide = bool(re.search(r"-o\s*wide\b", command))
    namespaces = bool(re.search(r"(^|\s)(-A|--all-namespaces)\b", command))
    headers = columns(wide, namespaces)
    values = [cells(table[0], line) for line in table[1:]]
    return layout([headers, *([row.get(h, "") for h in headers] for row in values)])


def rewritten(text: str) -> str:
    """`text` with every sample laid out anew (a table ends at a blank line, a `$` line, a fence or a header)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        match = COMMAND.match(lines[i])
        i += 1
        if match is None or "-o " in match["rest"].replace("-o wide", ""):
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() and not lines[end].startswith(("$", "```", "NAME ")):
            end += 1
        if i < len(lines) and lines[i].startswith(("NAME ", "NAMESPACE ")):
            out.extend(sample(lines[i - 1], lines[i:end]))
            i = end
    return "\n".join(out)


def pages() -> list[Path]:
    found = [ROOT / p for p in PAGES if (ROOT / p).is_file()]
    return found + sorted(p for d in PAGES if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.md"))


def write() -> None:
    for page in pages():
        text = page.read_text()
        if (new := rewritten(text)) != text:
            page.write_text(new)


if __name__ == "__main__":
    write()
