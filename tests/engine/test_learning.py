"""spec.learning on a real engine, without Kubernetes: the recorder inside vLLM's server records what it serves,
specinfer-train turns those prompts into a trained EAGLE-3 head through vLLM's extract_hidden_states path and
speculators, and vLLM serves the head as eagle3: more tokens per step on prompts it never saw, the same greedy
output as without speculation.

The target is hack/learnmodel's (trained on the corpus: a head has something to learn from it); the engine
starts with its untrained head, as a resource with a weak draft would. Traffic is the corpus' first 70 %,
held-out prompts its last 30 %.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hack.engine import (
    SERVED_NAME,
    EngineRun,
    checked,
    engine_python,
    environment,
    run_engine,
    without_speculation,
)
from hack.learnmodel import TRAFFIC, LearningModels, engine_config, prompts
from specinfer_operator.measure.acceptance import acceptance
from specinfer_runtime import samples
from specinfer_runtime.argv import vllm_argv


@pytest.fixture(scope="module")
def learning_models(engine_venv: Path) -> LearningModels:
    """The structured target and its untrained head, built once per cache (hack/learnmodel)."""
    return LearningModels.from_json(engine_python(engine_venv, "-m", "hack.learnmodel", timeout=900))


@pytest.fixture(scope="module")
def env(engine_venv: Path, learning_models: LearningModels, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return environment(engine_venv, learning_models.hf_home, tmp_path_factory.mktemp("learning"))


def serve(
    name: str,
    draft: str | None,
    engine_venv: Path,
    env: dict[str, str],
    texts: list[str],
    directory: Path,
    **more: str,
) -> EngineRun:
    """The structured target through the launcher, with `draft` (a Hub id in the test cache, or a directory) as
    its eagle3 head; without one, no speculation."""
    config = engine_config(draft)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "engine.json"
    path.write_text(json.dumps(config))
    argv = [str(engine_venv / "bin" / "specinfer-runtime"), "--config", str(path)]
    if draft is None:  # the command the launcher would exec, without --speculative-config
        argv = without_speculation(vllm_argv(checked(config)))
    return run_engine(name, argv, {**env, **more}, texts, directory / "engine.log")


@pytest.fixture(scope="module")
def learned(
    engine_venv: Path, learning_models: LearningModels, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Serve the traffic with the untrained head and the recorder on, train on what it recorded, and serve
    the held-out prompts three ways: no speculation, the untrained head, the trained one."""
    traffic, held_out = prompts()
    root = tmp_path_factory.mktemp("claim")
    recorder = {
        samples.DIR_ENV: str(root / "samples" / "engine-0"),  # the pod's own directory, as its mount shows it
        samples.PERCENT_ENV: "100",
        samples.MAX_BYTES_ENV: "64Mi",
        samples.POD_ENV: "engine-0",
    }
    weak = learning_models.head
    recording = serve("recording", weak, engine_venv, env, traffic, root / "recording", **recorder)
    run = {
        "generation": 1,
        "target": str(learning_models.target_dir),
        "start": weak,
        "samples": str(root / "samples"),
        "output": str(root / "drafts" / "gen-1"),
        "scratch": str(root / "scratch" / "gen-1"),
        "maxTokens": 100_000,
        "maxOutputTokens": 256,
        "epochs": 20,
        "learningRate": 0.001,
        "speculativeTokens": 3,
        "retentionSeconds": 3600,
    }
    said = engine_python(
        engine_venv, "-m", "specinfer_runtime.training.job", "--config", json.dumps(run), env=env, timeout=1800
    )
    trained = root / "drafts" / "gen-1"
    return {
        "recording": recording,
        "result": json.loads(said.strip().splitlines()[-1]),
        "trained": trained,
        "baseline": serve("held-out, no speculation", None, engine_venv, env, held_out, root / "baseline"),
        "before": serve("held-out, untrained head", weak, engine_venv, env, held_out, root / "before"),
        "after": serve("held-out, trained head", str(trained), engine_venv, env, held_out, root / "after"),
        "claim": root,
    }


def test_the_recorder_records_every_prompt_it_is_asked_to(learned: dict[str, Any]) -> None:
    lines = [json.loads(line) for path in (learned["claim"] / "samples").glob("*/*.jsonl") for line in path.open()]
    assert len(lines) == TRAFFIC
    assert {line["kind"] for line in lines} == {"completion"}
    assert sorted(line["prompt"] for line in lines) == sorted(prompts()[0])
    # vLLM's own /metrics carries the recorder's counter (read right after the last answer: its write may follow)
    last = learned["recording"].metrics
    counted = [
        float(line.split()[-1]) for line in last.splitlines() if line.startswith("specinfer_samples_recorded_total")
    ]
    assert counted, "no specinfer_samples_recorded_total in vLLM's /metrics"
    assert TRAFFIC - 1 <= counted[0] <= TRAFFIC


def test_the_run_trains_on_what_was_recorded(learned: dict[str, Any]) -> None:
    result = learned["result"]
    assert result["samples"] == TRAFFIC
    assert result["from"] == "draft in force"
    config = json.loads((learned["trained"] / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert not (learned["claim"] / "scratch" / "gen-1").exists()  # the hidden states go with the run


def test_the_trained_head_accepts_half_again_as_much_on_prompts_it_never_saw(learned: dict[str, Any]) -> None:
    before = acceptance(learned["before"].metrics, SERVED_NAME)
    after = acceptance(learned["after"].metrics, SERVED_NAME)
    assert before is not None
    assert after is not None
    assert before.mean_acceptance_length is not None
    assert after.mean_acceptance_length is not None
    assert after.mean_acceptance_length >= 1.5 * before.mean_acceptance_length, (before, after)


def test_greedy_output_is_the_targets_with_either_head(learned: dict[str, Any]) -> None:
    expected = [c.token_ids for c in learned["baseline"].completions]
    assert [c.token_ids for c in learned["before"].completions] == expected
    assert [c.token_ids for c in learned["after"].completions] == expected
