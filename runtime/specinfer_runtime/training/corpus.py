"""The recorded prompts a training run learns from (pure, no torch): read from the claim, newest first, within
the retention age and the run's token cap.

The files are written by the engines' recorder (samples.py), in pods the tenant controls: each line is
checked for shape, and a file or line past its bound is skipped, not trusted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specinfer_runtime.samples import MAX_REQUEST_BYTES, files

MAX_FILE_BYTES = 64 << 20  # a larger file is not one the recorder wrote
Tokenize = Callable[[dict[str, Any]], list[int] | None]  # a sample's prompt as token ids (None: cannot be)


@dataclass(frozen=True)
class Prompt:
    """A recorded prompt as token ids, and how many tokens of answer the target writes for it."""

    token_ids: list[int]
    answer_tokens: int
    time: int  # when it was recorded (Unix seconds): a generation's window of samples is made of these


def _lines(path: str) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as handle:
        for raw in handle:
            if len(raw) > 2 * MAX_REQUEST_BYTES:
                continue
            try:
                sample = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(sample, dict) and sample.get("kind") in ("chat", "completion"):
                yield sample


Window = Sequence[int]  # oldest and newest, Unix seconds, both ends included


def quarantined(sample: dict[str, Any], windows: Sequence[Window]) -> bool:
    """Whether a sample was recorded within a quarantined window (or says no time: not trusted either)."""
    when = sample.get("time")
    if isinstance(when, bool) or not isinstance(when, int | float):
        return True
    return any(oldest <= when <= newest for oldest, newest in windows)


def recorded(
    directory: Path, now: float, retention_seconds: float, exclude: Sequence[Window] = ()
) -> Iterator[dict[str, Any]]:
    """The samples of the files within the retention age, newest file first, but those of quarantined windows
    (`exclude`: what rolled-back generations trained on): complete files, and those an engine is still writing
    (their lines are whole samples, but perhaps the last, which does not parse and is skipped)."""
    found = []
    for entry in files(directory):
        try:
            stat = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if now - stat.st_mtime <= retention_seconds and stat.st_size <= MAX_FILE_BYTES:
            found.append((stat.st_mtime, entry.path))
    for _, path in sorted(found, reverse=True):
        try:
            yield from (s for s in reversed(list(_lines(path))) if not quarantined(s, exclude))
        except OSError:
            continue


def select(samples: Iterator[dict[str, Any]], tokenize: Tokenize, max_tokens: int, max_answer: int) -> list[Prompt]:
    """Prompts in the order given until their tokens, answers included, would pass `max_tokens`. A sample's
    answer is as long as its client asked for, up to `max_answer`."""
    chosen: list[Prompt] = []
    total = 0
    for sample in samples:
        ids = tokenize(sample)
        if not ids:
            continue
        asked = sample.get("maxTokens")
        answer = min(asked, max_answer) if isinstance(asked, int) and not isinstance(asked, bool) else max_answer
        answer = max(1, answer)
        if total + len(ids) + answer > max_tokens:
            break
        when = sample.get("time")
        chosen.append(Prompt(ids, answer, int(when) if isinstance(when, int | float) and when >= 0 else 0))
        total += len(ids) + answer
    return chosen


def tokenizer_of(tokenizer: Any) -> Tokenize:
    """A Hugging Face tokenizer as a Tokenize, encoding prompts as vLLM's server does: a completion prompt with
    the tokenizer's special tokens, chat messages through the chat template (None without one)."""

    def tokenize(sample: dict[str, Any]) -> list[int] | None:
        if isinstance(sample.get("promptTokenIds"), list):
            ids = sample["promptTokenIds"]
            ok = all(isinstance(t, int) and 0 <= t < len(tokenizer) for t in ids)
            return list(ids) if ok else None
        if isinstance(sample.get("prompt"), str):
            return list(tokenizer(sample["prompt"])["input_ids"])
        messages = sample.get("messages")
        if isinstance(messages, list) and getattr(tokenizer, "chat_template", None):
            return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        return None

    return tokenize
