"""Keep Hub tokens out of every message: termination messages, logs, and the status and events they reach.

An HTTP library that refuses a header quotes it ("Illegal header value b'Bearer hf_...\\n'"), and a pod's
last log lines become its termination message, which the operator copies into the resource's status. So a
token is checked before any library sees it (a value no header can carry is refused without being
quoted), and any text that may hold one is scrubbed of it: of the token as it is, as the library escapes
it, and of each run of its printable characters; the operator, which never sees the tokens, scrubs what
looks like one (`Bearer ...`, `hf_...`, the user and password of a URL: `postgres://***@db/x`) from what pods
report.
"""

from __future__ import annotations

import re

MASK = "***"
FRAGMENT = 4  # runs of a token at least this long are masked wherever they appear
# What a token looks like in text the operator reads from pods, where the token itself is unknown.
_LOOKS_LIKE_TOKEN = re.compile(
    r"(?i)(bearer\s+|authorization:\s*|token=)\S+|hf_[A-Za-z0-9]{8,}"
    r"|(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^\s/?#]*@"  # a URL's userinfo, up to its host
)
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")  # visible ASCII, as Hub tokens are


def token_problem(name: str, value: str) -> str | None:
    """Why the token in the environment variable `name` cannot be sent in an HTTP header, without quoting
    it; None when it can. Leading and trailing whitespace is not a problem: callers strip it."""
    token = value.strip()
    if not token:
        return f"{name} is empty"
    bad = next((i for i, c in enumerate(token) if not _HEADER_SAFE.fullmatch(c)), None)
    if bad is None:
        return None
    kind = "a control character" if ord(token[bad]) < 0x20 or token[bad] == "\x7f" else "a character outside ASCII"
    return (
        f"{name} holds {kind} at position {bad + 1} of {len(token)}, which an HTTP header cannot carry: check the "
        "Secret's value (it is not shown here)"
    )


def _fragments(secret: str) -> list[str]:
    forms = {secret, secret.strip(), secret.encode("unicode_escape").decode(), repr(secret)[1:-1]}
    runs = re.split(r"[^\x21-\x7e]+|\\[a-z0-9]", secret)
    found = {f for f in (*forms, *runs) if len(f) >= FRAGMENT}
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """`text` without the `secrets` (in any of the forms a library prints them in) and without anything that
    looks like a token."""
    for secret in secrets:
        for fragment in _fragments(secret):
            text = text.replace(fragment, MASK)
    return _LOOKS_LIKE_TOKEN.sub(_masked, text)


def _masked(match: re.Match[str]) -> str:
    """A match of _LOOKS_LIKE_TOKEN with its secret part masked: what names it (`Bearer `, `postgres://`) stays."""
    if match.group("scheme"):
        return f"{match.group('scheme')}{MASK}@"
    return (match.group(1) or "") + MASK
