"""Engine releases as a spec declares them, and "this release or a later one" as a regular expression.

The API server's CEL has no version type, and the CEL the operator runs in-process has no string library
beyond `matches`: a floor becomes a pattern that matches exactly the releases at or above it, so that
`kubectl apply`, the operator and `specinfer validate` compare versions with one expression.
"""

from __future__ import annotations

import re

# X.Y.Z, optionally a release candidate (vllm-ascend's 0.28.0rc1) and a post-release (0.23.0.post1), as the
# package indexes write them (PEP 440's normal form): the releases the floors and the declarations are written in.
RELEASE = (
    r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})(rc(0|[1-9][0-9]{0,3}))?"
    r"(\.post(0|[1-9][0-9]{0,3}))?$"
)
RELEASE_LENGTH = 32  # the longest RELEASE matches: 9999.9999.9999rc9999.post9999 is 29 characters
_PARTS = re.compile(RELEASE)
_NUMBER = r"(0|[1-9][0-9]*)"
_ANY_RC, _ANY_POST = rf"(rc{_NUMBER})?", rf"(\.post{_NUMBER})?"


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


def _at_least(n: int) -> str:
    """A pattern of the decimal numbers at or above `n`."""
    return f"({n}|{_greater(n)})"


def at_least(floor: str) -> str:
    """An anchored pattern matching every release (as RELEASE spells it) at or above `floor`, in PEP 440 order:
    0.25.0rc1 < 0.25.0rc1.post1 < 0.25.0rc2 < 0.25.0 < 0.25.0.post1 < 0.25.1rc1."""
    parts = _PARTS.match(floor)
    if parts is None:
        raise ValueError(f"not a release: {floor!r}")
    major, minor, patch = (int(parts.group(i)) for i in (1, 2, 3))
    candidate = int(parts.group(5)) if parts.group(4) else None
    post = rf"\.post{_at_least(int(parts.group(7)))}" if parts.group(6) else _ANY_POST
    suffix = _ANY_RC + _ANY_POST
    same = rf"{major}\.{minor}\.{patch}"
    choices = [
        rf"{_greater(major)}\.{_NUMBER}\.{_NUMBER}{suffix}",
        rf"{major}\.{_greater(minor)}\.{_NUMBER}{suffix}",
        rf"{major}\.{minor}\.{_greater(patch)}{suffix}",
    ]
    if candidate is None:  # a final release: its post-releases at or above the floor's
        choices.append(same + post)
    else:  # a candidate: the final release and its post-releases, later candidates, this one's post-releases
        choices += [same + _ANY_POST, rf"{same}rc{_greater(candidate)}{_ANY_POST}", rf"{same}rc{candidate}{post}"]
    return "^(" + "|".join(choices) + ")$"
