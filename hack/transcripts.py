"""The `$ specinfer ...` transcripts of the docs, run on the files they name, so that a page cannot drift.

Every ```console block of README.md and docs/**/*.md is read: a `$ specinfer ...` line is a command, and the
lines after it, up to the next `$` line or the end of the block, are what it prints (stdout and stderr, in
the order written). Two conventions:

- `(no output; exit N)` alone: the command prints nothing and exits N.
- a line ending in ` (...)`: the command prints a line that starts with the text before ` (...)`, followed by
  a space and more text (the rest is left out of the page).

A file a command names is made from the nearest `transcripts.yaml` up from the page (its own directory first):
an example of the repository with dotted paths set or removed. The command then runs in a temporary
directory holding those files. A command naming a path of the repository (with a `/`) runs at the repository's
root instead. `$` lines of other programs only end the output of the command before them.

python -m hack.transcripts   # rewrite the outputs in the pages with what the CLI prints (`make docs`)
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFINITIONS = "transcripts.yaml"
BLOCK = re.compile(r"^```console\n(.*?)^```$", re.DOTALL | re.MULTILINE)
ELLIPSIS = " (...)"
FILE_SUFFIXES = {".yaml", ".yml", ".json", ".txt"}


@dataclass(frozen=True)
class Transcript:
    """One command of a page and the lines the page shows for it."""

    page: Path
    line: int  # 1-based line of the `$` line in the page
    command: str
    shown: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{_shown(self.page)}:{self.line}"


@dataclass(frozen=True)
class Result:
    output: tuple[str, ...]
    exit_code: int


def _shown(path: Path) -> str:
    """A path as the repository names it, when it is in the repository."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/, wherever a transcript may be."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def transcripts(page: Path) -> Iterator[Transcript]:
    """The `$ specinfer` commands of the page's console blocks, each with the lines up to the next `$` line."""
    text = page.read_text()
    for block in BLOCK.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")] + [len(lines)]
        for start, end in itertools.pairwise(starts):
            command = lines[start].removeprefix("$ ")
            if shlex.split(command, comments=True)[:1] == ["specinfer"]:
                yield Transcript(page, first + start, command, tuple(lines[start + 1 : end]))


def all_transcripts(root: Path = ROOT) -> list[Transcript]:
    """Every transcript of the docs, in page order."""
    return [t for page in pages(root) for t in transcripts(page)]


def definitions_for(page: Path) -> tuple[Path | None, dict[str, Any]]:
    """The nearest transcripts.yaml up from the page, within the repository, and what it defines."""
    for directory in page.parents:
        if (directory / DEFINITIONS).is_file():
            return directory / DEFINITIONS, yaml.safe_load((directory / DEFINITIONS).read_text()) or {}
        if directory == ROOT:
            break
    return None, {}


def _walk(document: Any, path: str) -> tuple[Any, str]:
    """The mapping that holds the last key of a dotted path (created on the way), and that key."""
    *parents, last = path.split(".")
    for key in parents:
        document = document.setdefault(key, {})
    return document, last


def materialize(definition: dict[str, Any]) -> str:
    """The file a definition describes: its example, with `remove` paths removed, then `set` paths set."""
    unknown = set(definition) - {"from", "set", "remove"}
    if unknown or "from" not in definition:
        raise ValueError(
            f"a definition has `from` (an example), and may have `set` and `remove`, not {sorted(unknown)}"
        )
    document = yaml.safe_load((ROOT / definition["from"]).read_text())
    for path in definition.get("remove", []):
        holder, key = _walk(document, path)
        if key not in holder:
            raise ValueError(f"{definition['from']} has no {path} to remove")
        del holder[key]
    for path, value in definition.get("set", {}).items():
        holder, key = _walk(document, path)
        holder[key] = value
    return yaml.safe_dump(document, sort_keys=False)


def _named_files(argv: list[str]) -> list[str]:
    """The arguments after the subcommand that name a file: a path with a `/`, or a name with a file suffix."""
    return [
        arg
        for arg in argv[2:]
        if not arg.startswith("-") and "://" not in arg and ("/" in arg or Path(arg).suffix in FILE_SUFFIXES)
    ]


def undefined(transcript: Transcript) -> str | None:
    """Why the files the command names cannot all be made, or None when they can."""
    source, definitions = definitions_for(transcript.page)
    files = _named_files(shlex.split(transcript.command, comments=True))
    missing = [name for name in files if "/" not in name and name not in definitions]
    if missing:
        where = _shown(source) if source else f"a {DEFINITIONS} beside the page"
        return f"{transcript.id}: no definition of {', '.join(missing)} in {where}"
    if 0 < sum("/" in name for name in files) < len(files):
        return f"{transcript.id}: a command names either paths of the repository or defined files, not both"
    return None


def run(transcript: Transcript) -> Result:
    """What the installed CLI prints for the command, on the files the page's definitions make."""
    problem = undefined(transcript)
    if problem:
        raise LookupError(problem)
    argv = shlex.split(transcript.command, comments=True)
    definitions = definitions_for(transcript.page)[1]
    files = _named_files(argv)
    in_repo = any("/" in name for name in files)
    executable = Path(sys.executable).parent / "specinfer"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "80"}
    with tempfile.TemporaryDirectory() as tmp:
        for name in files if not in_repo else []:
            (Path(tmp) / name).write_text(materialize(definitions[name]))
        done = subprocess.run(
            [str(executable), *argv[1:]],
            cwd=ROOT if in_repo else tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    return Result(tuple(done.stdout.splitlines()), done.returncode)


def shown_for(result: Result, shown: tuple[str, ...] = ()) -> tuple[str, ...]:
    """How a page shows a result: lines the page shortens with ` (...)` stay short while they still match."""
    if not result.output:
        return (f"(no output; exit {result.exit_code})",)
    return tuple(
        shown[i] if i < len(shown) and _line_matches(shown[i], printed) else printed
        for i, printed in enumerate(result.output)
    )


def _line_matches(shown: str, printed: str) -> bool:
    """A page's line matches the printed line exactly, or by its prefix when it ends in ` (...)`."""
    if shown.endswith(ELLIPSIS):
        prefix = shown.removesuffix(ELLIPSIS) + " "
        return printed.startswith(prefix) and len(printed) > len(prefix)
    return shown == printed


def matches(shown: tuple[str, ...], result: Result) -> bool:
    """Whether the page shows what the command printed, by the conventions above."""
    if not result.output:
        return shown == (f"(no output; exit {result.exit_code})",)
    return len(shown) == len(result.output) and all(map(_line_matches, shown, result.output))


def run_all(selected: list[Transcript]) -> dict[Transcript, Result]:
    """Each transcript run, as many at a time as there are CPUs (each run is a new process)."""
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return dict(zip(selected, pool.map(run, selected), strict=True))


def rewrite(page: Path, results: dict[Transcript, Result]) -> bool:
    """Write what each command of the page printed in place of what the page shows; whether anything changed."""
    text = page.read_text()
    lines = text.splitlines(keepends=True)
    # Bottom up, so that the line numbers of the transcripts above stay right.
    for transcript in reversed(list(transcripts(page))):
        result = results[transcript]
        if not matches(transcript.shown, result):
            start = transcript.line  # 0-based, the line after the command
            lines[start : start + len(transcript.shown)] = [f"{line}\n" for line in shown_for(result, transcript.shown)]
    if "".join(lines) == text:
        return False
    page.write_text("".join(lines))
    return True


def main() -> None:
    results = run_all(all_transcripts())
    for page in pages():
        if rewrite(page, results):
            print(f"rewrote {_shown(page)}")


if __name__ == "__main__":
    main()
