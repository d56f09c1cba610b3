"""Engine releases as a spec declares them, and "this release or a later one" as a regular expression.

The API server's CEL has no version type, and the CEL the operator runs in-process has no string library
beyond `matches`: a floor becomes a pattern that matches exactly the releases at or above it, so that
`kubectl apply`, the operator and `specinfer validate` compare versions with one expression.
"""

from __future__ import annotations

import re

# X.Y.Z, optionally a release candidate (vllm-ascend's 0.28.0rc1): the releases the floors are written in.
RELEASE = r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})(rc(0|[1-9][0-9]{0,3}))?$"
_PARTS = re.compile(RELEASE)


def _greater(n: int) -> str:
    """A pattern of the decimal numbers (without leading zeros) greater than `n`."""
    digits = str(n)
    longer = f"[1-9][0-9]{{{len(digits)},}}"
    same = [
        f"{digits[:i]}[{int(d) + 1}-9]" + (f"[0-9]{{{len(digits) - i - 1}}}" if i < len(digits) - 1 else "")
        for i, d in enumerate(digits)
        if d != "9"
    ]
    return "(" + "|".join([longer, *same]) + ")"


def at_least(floor: str) -> str:
    """An anchored pattern matching every release (as RELEASE spells it) at or above `floor`, in PEP 440 order:
    0.25.0rc1 < 0.25.0rc2 < 0.25.0 < 0.25.1rc1."""
    parts = _PARTS.match(floor)
    if parts is None:
        raise ValueError(f"not a release: {floor!r}")
    major, minor, patch = (int(parts.group(i)) for i in (1, 2, 3))
    candidate = int(parts.group(5)) if parts.group(4) else None
    number, rc = r"(0|[1-9][0-9]*)", r"(rc(0|[1-9][0-9]*))?"
    choices = [
        rf"{_greater(major)}\.{number}\.{number}{rc}",
        rf"{major}\.{_greater(minor)}\.{number}{rc}",
        rf"{major}\.{minor}\.{_greater(patch)}{rc}",
        rf"{major}\.{minor}\.{patch}",
    ]
    if candidate is not None:
        choices.append(rf"{major}\.{minor}\.{patch}rc({candidate}|{_greater(candidate)})")
    return "^(" + "|".join(choices) + ")$"
