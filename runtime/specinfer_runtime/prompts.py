"""What of a served request becomes a sample (pure): the prompt only, of the chat roles the resource records,
with what its redaction patterns match masked before anything is written.

Prompts are the tenant's data. The recorder keeps the least a draft learns from: by default the user's turns
only (sampling.roles), never the answer, and a platform or tenant can mask what must never reach the claim (a
credential pattern, an account number) with sampling.redact. The patterns are checked at admission
(`pattern_problem`) to the subset of regular expressions RE2 shares with Python's engine (no lookaround, no
backreference), so a pattern means the same wherever it is read, and without a repeated group that repeats
within, the common shape of patterns that backtrack without bound; they run in the engine's writer thread, off
the request's path, on bodies of at most 256 KiB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MASK = "[redacted]"
MAX_ANSWER_TOKENS = 1 << 20  # a larger max_tokens is recorded as this (the Job caps answers far lower)
MAX_PATTERNS = 16
MAX_PATTERN_LENGTH = 256
# What a redaction pattern may not use: the constructs Python's engine has and RE2 lacks (lookahead and lookbehind,
# backreferences, conditionals, possessive and atomic groups), and a repeated group that repeats within, as in
# (a+)+, which backtracks exponentially in Python's engine (it holds the engine server's GIL while it matches). The
# CRD's rule on each pattern (api/learning.py) is this expression too, so kubectl apply refuses what the operator
# would.
_NOT_RE2 = r"\(\?(?:[=!]|<[=!]|P=|\(|>)|\\[1-9]|\\g<|[*+?}]\+"
_NESTED = r"\((?:\\.|[^()\\])*(?:[*+]|\{[0-9,]*\})(?:\\.|[^()\\])*\)(?:[*+]|\{)"
REFUSED = f"{_NOT_RE2}|{_NESTED}"
_REFUSED = re.compile(REFUSED)


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a redaction pattern (None when it can): it must compile, and stay within RE2."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"is {len(pattern)} characters long, more than {MAX_PATTERN_LENGTH}"
    found = _REFUSED.search(pattern)
    if found is not None:
        return (
            f"uses {found.group()!r}: lookaround, backreferences and atomic groups (which RE2 does not support) and "
            "repeated groups that repeat within (which backtrack without bound) are refused"
        )
    try:
        re.compile(pattern)
    except re.error as error:
        return f"is not a regular expression: {error}"
    return None


@dataclass(frozen=True)
class Filter:
    """What a sample keeps: the messages of `roles`, with what `patterns` match replaced by MASK."""

    roles: frozenset[str] = frozenset({"user"})
    patterns: Sequence[str] = ()
    compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        good = [p for p in self.patterns if pattern_problem(p) is None]
        object.__setattr__(self, "compiled", tuple(re.compile(p) for p in good[:MAX_PATTERNS]))

    def masked(self, text: str) -> str:
        for pattern in self.compiled:
            text = pattern.sub(MASK, text)
        return text


def prompt_of(kind: str, body: bytes, keep: Filter) -> dict[str, Any] | None:
    """The sample a request body holds: chat messages of the recorded roles as role and text, or a completion
    prompt (a user's text), masked, and the answer's length the client asked for (the training Job has the
    target answer as it was asked to); None for anything else (the body is the client's: any shape, any
    depth) and for a request with nothing of the recorded roles."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(request, dict):
        return None
    found = _prompt(kind, request, keep)
    if found is None:
        return None
    limit = next((request[k] for k in ("max_completion_tokens", "max_tokens") if request.get(k) is not None), None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        found["maxTokens"] = min(limit, MAX_ANSWER_TOKENS)
    return found


def _prompt(kind: str, request: dict[str, Any], keep: Filter) -> dict[str, Any] | None:
    if kind == "chat":
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        read = [_message(m) for m in messages]
        if any(m is None for m in read):
            return None
        kept = [{**m, "content": keep.masked(m["content"])} for m in read if m is not None and m["role"] in keep.roles]
        return {"messages": kept} if kept else None
    if "user" not in keep.roles:
        return None
    prompt = request.get("prompt")
    if isinstance(prompt, str) and prompt:
        return {"prompt": keep.masked(prompt)}
    tokens = isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    # Token ids cannot be scanned for what the patterns mask: with patterns, such a prompt is not recorded.
    return {"promptTokenIds": prompt} if tokens and not keep.compiled else None


def _message(message: Any) -> dict[str, str] | None:
    """A chat message as role and text: text parts joined, a message with other parts (images) refused."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return None
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
            return None
        content = "".join(t for t in texts if isinstance(t, str))
    if not isinstance(content, str):
        return None
    return {"role": message["role"], "content": content}
