"""What a training run reads from the claim: complete files within the retention age, newest first, each line
checked, until the token cap; and the one line it leaves in the termination log when its run is invalid."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specinfer_runtime.training.corpus import Prompt, recorded, select
from specinfer_runtime.training.job import RunError, failure_line, main

NOW = 1_000_000.0


def write(directory: Path, pod: str, name: str, lines: list[Any], age: float) -> None:
    (directory / pod).mkdir(parents=True, exist_ok=True)
    path = directory / pod / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    os.utime(path, (NOW - age, NOW - age))


def completion(text: str, **more: Any) -> dict[str, Any]:
    return {"kind": "completion", "time": 0, "prompt": text, **more}


def by_words(sample: dict[str, Any]) -> list[int] | None:
    """A tokenizer for the tests: one token a word."""
    text = sample.get("prompt")
    return [len(w) for w in text.split()] if isinstance(text, str) else None


def test_newest_first_within_the_retention_age_a_line_being_written_skipped(tmp_path: Path) -> None:
    write(tmp_path, "a", "1-1.jsonl", [completion("old one"), completion("old two")], age=300)
    write(tmp_path, "b", "2-1.jsonl", [completion("new one"), completion("new two")], age=10)
    write(tmp_path, "b", "3-1.part", [completion("still being written"), '{"kind": "completion", "pro'], age=1)
    write(tmp_path, "c", "0-1.jsonl", [completion("expired")], age=7200)
    found = [s["prompt"] for s in recorded(tmp_path, NOW, 3600)]
    assert found == ["still being written", "new two", "new one", "old two", "old one"]


def test_lines_that_are_not_samples_are_skipped(tmp_path: Path) -> None:
    junk = ["not json", "[" * 10_000, '"a string"', json.dumps({"kind": "other", "prompt": "x"}), "\x00\xff"]
    write(tmp_path, "a", "1-1.jsonl", [completion("kept"), *junk], age=1)
    assert [s["prompt"] for s in recorded(tmp_path, NOW, 3600)] == ["kept"]


def test_samples_of_a_quarantined_window_are_never_read_again(tmp_path: Path) -> None:
    # gen-1 trained on what was recorded from 100 to 200 and was rolled back: the next run reads the rest.
    lines = [{**completion(f"at {t}"), "time": t} for t in (50, 100, 150, 200, 250)]
    write(tmp_path, "a", "1-1.jsonl", lines, age=1)
    write(tmp_path, "b", "1-1.jsonl", [completion("no time", time=None), {**completion("at 120"), "time": 120}], age=1)
    found = [s["prompt"] for s in recorded(tmp_path, NOW, 3600, exclude=[(100, 200)])]
    assert found == ["at 250", "at 50"]
    everything = [s["prompt"] for s in recorded(tmp_path, NOW, 3600)]
    assert "at 150" in everything
    assert "at 120" in everything
    chosen = select(iter([{**completion("a b"), "time": 7}]), by_words, 100, 1)
    assert [p.time for p in chosen] == [7]  # what the generation's window is made of


def test_prompts_are_taken_until_the_token_cap_answers_included() -> None:
    samples = [completion("a b c", maxTokens=2), completion("d e", maxTokens=500), completion("f g h i")]
    chosen = select(iter(samples), by_words, max_tokens=12, max_answer=4)
    assert chosen == [Prompt([1, 1, 1], 2, 0), Prompt([1, 1], 4, 0)]  # 5 + 6 tokens; the third would pass 12
    assert select(iter([{"kind": "chat", "messages": []}]), by_words, 100, 4) == []


def test_an_invalid_run_is_one_line_in_the_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    with pytest.raises(SystemExit) as exited:
        main(["--config", json.dumps({"generation": 0}), "--termination-log", str(log)])
    assert exited.value.code == 1
    said = log.read_text()
    assert said.startswith("invalid run: ")
    assert "generation: Invalid value: 0" in said
    assert said.count("\n") == 1


def test_a_library_error_quoting_a_prompt_never_reaches_the_termination_log() -> None:
    prompt = "my card is 4111 1111 1111 1111"
    said = failure_line(ValueError(f"Input {prompt!r} is not valid"))
    assert prompt not in said
    assert said == "ValueError while training: see the training pod's log"
    assert (
        failure_line(RunError("no prompt recorded since the last run\nmore")) == "no prompt recorded since the last run"
    )
    assert failure_line(OSError(28, "No space left on device")) == "[Errno 28] No space left on device"
