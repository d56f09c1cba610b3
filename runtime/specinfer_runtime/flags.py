"""The `vllm serve` flags the operator owns, and when vLLM's parser would read an argument as one of them.

vLLM reads `--speculative_config`, `--speculative-config=...`, `--speculative-config.num_speculative_tokens 20`,
any prefix argparse can resolve (`--speculative-confi`) and a short alias with its value attached (`-qawq`)
as the flag itself, and the last value wins. So an `engineArgs` item that could be read as an owned flag
is refused. Each option becomes one regular expression of the arguments that could be read as it; the
CRD's CEL rule and `specinfer validate` match the same expressions (a split-and-compare formulation
is far beyond the API server's CEL cost budget).

`vllm_serve_flags.json` is generated from vLLM's own parser (`make vllm-flags`); the engine suite fails
when the installed vLLM defines a flag or alias the table lacks, and tries every spelling of every owned
flag against vLLM's parser.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from specinfer_runtime.celrules import cel_string

TABLE: dict[str, Any] = json.loads(resources.files(__package__).joinpath("vllm_serve_flags.json").read_text())
VLLM_VERSION: str = TABLE["vllm"]
# Every option string of an owned vLLM setting -> why engineArgs may not set it.
OWNED: dict[str, str] = TABLE["owned"]
# Real flags of their own that the owned patterns would catch (`-dpl` starts like `-dp`).
LOOKALIKES: list[str] = TABLE["lookalikes"]
# Every option string of `vllm serve`.
OPTIONS: list[str] = TABLE["options"]

# What may follow an option's name in the same argument: `=value`, or `.key` (merged into a JSON flag).
# Values may hold newlines (int("9001\n") is 9001), hence `.` with the s flag.
_REST = "([=.](?s:.*))?$"


def _atoms(name: str, long: bool) -> list[str]:
    """`name` a character at a time, as vLLM accepts it: in a `--` flag `_` stands for `-`."""
    if not re.fullmatch(r"[A-Za-z0-9-]+", name):
        raise ValueError(f"unexpected option name {name!r}")
    return ["[-_]" if long and c == "-" else c for c in name]


def _prefixes(parts: list[str]) -> str:
    """Any non-empty prefix of the concatenated parts: `a(b(c)?)?`."""
    return parts[0] + (f"({_prefixes(parts[1:])})?" if parts[1:] else "")


def pattern(option: str) -> str:
    """The arguments argparse could read as `option`, after vLLM's own rewriting: the option or any prefix
    of it (argparse takes an unambiguous prefix; an ambiguous one stops the engine), followed by `=value`
    or `.key`; for short options also the value attached (`-qawq`); `-O<anything>` is -O."""
    if option == "-O":
        return "^-O(?s:.*)$"
    if option.startswith("--"):
        return "^--" + _prefixes(_atoms(option[2:], long=True)) + _REST
    return f"^(-{_prefixes(_atoms(option[1:], long=False))}{_REST}|{option}(?s:.*)$)"


def exact(option: str) -> str:
    """The arguments that name `option` itself."""
    long = option.startswith("--")
    return ("^--" if long else "^-") + "".join(_atoms(option.lstrip("-"), long)) + _REST


def _any(patterns: list[str]) -> str:
    return "|".join(f"({p})" for p in patterns) or "$^"


OWNED_PATTERN = _any([pattern(o) for o in sorted(OWNED)])
LOOKALIKE_PATTERN = _any([exact(o) for o in LOOKALIKES])
# CEL, on one engineArgs item: it could be read as an owned flag.
SHADOWS_OWNED = (
    f"(self.startsWith('-') && self.matches({cel_string(OWNED_PATTERN)}) "
    f"&& !self.matches({cel_string(LOOKALIKE_PATTERN)}))"
)


# Options sharing a reason with more than this many others are described together: one nested condition per
# option would exceed the nesting CEL parsers allow.
_ALONE = 8


def _branches(options: list[str]) -> list[tuple[list[str], str]]:
    """(options, what to say) for each check of the description, in order: options alone, then by reason."""
    by_reason: dict[str, list[str]] = {}
    for option in options:
        by_reason.setdefault(OWNED[option], []).append(option)
    alone = [([o], f"could be read as {o}, which {OWNED[o]}") for o in options if len(by_reason[OWNED[o]]) <= _ALONE]
    together = [
        (group, f"could be read as one of {', '.join(o for o in group if o.startswith('--'))}, which {reason}")
        for reason, group in by_reason.items()
        if len(group) > _ALONE
    ]
    return alone + together


def _describe(branches: list[tuple[list[str], str]]) -> str:
    if not branches:
        return "'an owned flag'"
    (options, said), rest = branches[0], branches[1:]
    test = cel_string(_any([pattern(o) for o in options]))
    return f"(self.matches({test}) ? {cel_string(said)} : {_describe(rest)})"


# CEL, on one engineArgs item: `'--speculative-confi' could be read as --speculative-config, which is rendered
# from spec.speculative`
DESCRIBE = f'"\'" + self + "\' " + {_describe(_branches(sorted(OWNED)))}'


def lookalikes(owned: list[str], others: list[str]) -> list[str]:
    """The options in `others` that the owned patterns catch: real flags, exempted by name."""
    caught = re.compile(_any([pattern(o) for o in owned]))
    return sorted(o for o in others if caught.match(o))


def is_flag(argument: str) -> bool:
    """Whether argparse treats `argument` as an option: not `-` or `--`, not a negative number."""
    return len(argument) > 1 and argument != "--" and argument.startswith("-") and not _NEGATIVE.match(argument)


_NEGATIVE = re.compile(r"^-([0-9]+|[0-9]*\.[0-9]+)$")


@cache
def _matchers() -> list[tuple[re.Pattern[str], re.Pattern[str]]]:
    """Per option: what names it, what could be read as it (compiled once, when first needed)."""
    return [(re.compile(exact(o)), re.compile(pattern(o))) for o in OPTIONS]


def unknown(argument: str) -> bool:
    """A flag no option of the table names exactly or is the only one to match: vLLM stops at start on it."""
    if not is_flag(argument):
        return False
    if any(named.match(argument) for named, _ in _matchers()):
        return False
    return sum(1 for _, read in _matchers() if read.match(argument)) != 1
