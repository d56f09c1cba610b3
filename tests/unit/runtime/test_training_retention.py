"""Retention, the first step of every training run (`specinfer-train --prune`, its init container): every pod's
samples past the retention age and beyond the store's byte cap, the drafts the operator no longer keeps, and every
run's scratch go; what is kept stays byte for byte."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from specinfer_runtime.training.job import main
from specinfer_runtime.training.retention import prune_drafts, prune_samples

NOW = 1_000_000.0


def sample_file(root: Path, pod: str, name: str, size: int, age: float, now: float = NOW) -> Path:
    path = root / pod / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (now - age, now - age))
    return path


def left(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_every_pods_old_samples_go_those_of_pods_that_are_gone_included(tmp_path: Path) -> None:
    sample_file(tmp_path, "engine-a", "1.jsonl", 100, age=10)
    sample_file(tmp_path, "engine-a", "0.part", 100, age=7200)  # left by a pod that died writing
    sample_file(tmp_path, "engine-gone", "0.jsonl", 100, age=7200)
    removed, kept = prune_samples(tmp_path, 3600, 1 << 20, NOW)
    assert (removed, kept) == (2, 100)
    assert left(tmp_path) == ["engine-a/1.jsonl"]
    assert (tmp_path / "engine-gone").is_dir()  # a live engine's mount is its directory: never removed


def test_the_store_as_a_whole_is_brought_under_its_byte_cap_oldest_first(tmp_path: Path) -> None:
    for pod, age in (("a", 30), ("b", 20), ("c", 10)):
        sample_file(tmp_path, pod, "1.jsonl", 400, age)
    removed, kept = prune_samples(tmp_path, 3600, 900, NOW)
    assert (removed, kept) == (1, 800)
    assert left(tmp_path) == ["b/1.jsonl", "c/1.jsonl"]


def test_drafts_not_kept_and_half_written_ones_go(tmp_path: Path) -> None:
    for name in ("gen-1", "gen-2", "gen-3", "gen-4", ".gen-5.partial", "notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"w")
    gone = prune_drafts(tmp_path, {1, 3, 5})
    assert gone == [".gen-5.partial", "gen-2", "gen-4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen-1", "gen-3", "notes"]


def run_config(claim: Path, **more: Any) -> dict[str, Any]:
    return {
        "generation": 5,
        "target": "/models/target",
        "samples": str(claim / "samples"),
        "output": str(claim / "drafts" / "gen-5"),
        "scratch": str(claim / "scratch" / "gen-5"),
        "maxTokens": 1000,
        "maxOutputTokens": 16,
        "epochs": 1,
        "learningRate": 0.001,
        "speculativeTokens": 3,
        "retentionSeconds": 3600,
        **more,
    }


def test_the_first_step_of_a_run_applies_retention_to_the_whole_claim(tmp_path: Path) -> None:
    """A run stopped at its deadline left its hidden states (prompt token ids among them) in scratch/; a rolled-back
    gen-4 and an old promoted gen-1 are no longer kept; the samples of a pod long gone are past the age."""
    claim = tmp_path / "claim"
    now = time.time()  # what the run reads the ages against
    sample_file(claim / "samples", "engine-a", "new.jsonl", 10, age=10, now=now)
    sample_file(claim / "samples", "engine-gone", "old.jsonl", 10, age=2 * 3600, now=now)
    for directory in ("drafts/gen-1", "drafts/gen-3", "drafts/gen-4", "scratch/gen-4/hidden-states"):
        (claim / directory).mkdir(parents=True)
        (claim / directory / "data").write_bytes(b"d")
    log = tmp_path / "termination-log"
    main(
        [
            "--config",
            json.dumps(run_config(claim, keep=[3], maxBytes=1 << 20)),
            "--termination-log",
            str(log),
            "--prune",
        ]
    )
    assert left(claim) == ["drafts/gen-3/data", "samples/engine-a/new.jsonl"]
    said = json.loads(log.read_text())
    assert said == {"samplesRemoved": 1, "samplesBytes": 10, "draftsRemoved": ["gen-1", "gen-4"], "scratchRemoved": 1}
