"""The in-pod launcher: config and argv checks, preflight, termination log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.launcher import Environment, PreflightError, check, listening, main, prepare
from tests.support.builders import engine

EAGLE = {
    "model": {"name": "m", "source": {"pvc": {"claimName": "models"}}},
    "parallelism": {"tensor": 4},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "d"}},
}
IMAGE = {"vllm": "0.23.0", "vllm-ascend": "0.23.0"}  # what the runtime image's base carries
HEALTHY = Environment(env={"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, shared_memory=16 << 30, versions=IMAGE)


def configs(by_path: dict[str, dict[str, object]] | None = None) -> Callable[[str], dict[str, object]]:
    """config.json contents by model directory, as the pod's volumes would hold them."""
    return lambda path: (by_path or {}).get(path, {})


def write(tmp_path: Path, spec: dict[str, object]) -> str:
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_a_healthy_pod_passes() -> None:
    assert check(engine(EAGLE), HEALTHY, configs({"/models/target": {"vocab_size": 8}})) == []


def test_too_few_visible_npus() -> None:
    env = Environment(env={"ASCEND_VISIBLE_DEVICES": "0,1"}, shared_memory=16 << 30, versions=IMAGE)
    (problem,) = check(engine(EAGLE), env, configs({"/models/target": {"a": 1}}))
    assert problem.startswith("2 NPUs visible, tensor x pipeline x data needs 4")
    by_device = Environment(env={}, devices=["/dev/davinci0"] * 4, shared_memory=16 << 30, versions=IMAGE)
    assert check(engine(EAGLE), by_device, configs({"/models/target": {"a": 1}})) == []


def test_missing_checkpoint_small_shm_and_missing_arctic() -> None:
    suffix = engine(
        {"model": {"name": "m", "source": {"hostPath": {"path": "/data"}}}, "speculative": {"method": "suffix"}}
    )
    env = Environment(env={"ASCEND_RT_VISIBLE_DEVICES": "0"}, shared_memory=64 << 20, versions=IMAGE)
    problems = check(suffix, env, configs())
    assert [p.split(":")[0] for p in problems] == [
        "method suffix needs arctic-inference, which this image lacks",
        "no config.json in /models/target",
        "/dev/shm has 64 MiB, vLLM needs at least 1024 MiB",
    ]


def test_draft_vocabulary_mismatch() -> None:
    spec = engine(
        {
            "model": {"name": "t", "source": {"pvc": {"claimName": "m"}}},
            "speculative": {
                "method": "draft_model",
                "numSpeculativeTokens": 3,
                "draftModel": {"name": "d", "source": {"pvc": {"claimName": "m", "subPath": "d"}}},
            },
        }
    )
    volumes = configs({"/models/target": {"vocab_size": 151936}, "/models/draft": {"vocab_size": 32000}})
    found = check(spec, Environment(env={"ASCEND_RT_VISIBLE_DEVICES": "0"}, versions=IMAGE), volumes)
    assert len(found) == 1
    assert "32000 tokens, the target's 151936" in found[0]


def test_prepare_refuses_arguments_that_differ_from_the_config(tmp_path: Path) -> None:
    path = write(tmp_path, EAGLE)
    assert prepare(path, vllm_argv(engine(EAGLE)), None).argv == vllm_argv(engine(EAGLE))
    assert prepare(path, [], None).argv == vllm_argv(engine(EAGLE))
    with pytest.raises(PreflightError, match="arguments differ from the engine config"):
        prepare(path, ["vllm", "serve", "other"], None)


def test_invalid_config_is_one_line_in_the_termination_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**EAGLE, "speculative": {**EAGLE["speculative"], "numSpeculativeTokens": 15}}  # type: ignore[dict-item]
    log = tmp_path / "termination-log"
    with pytest.raises(SystemExit) as exited:
        main(["--config", write(tmp_path, bad), "--termination-log", str(log), "--dry-run"])
    assert exited.value.code == 1
    assert log.read_text() == (
        "invalid engine config: speculative.numSpeculativeTokens: Invalid value: 15: "
        "should be less than or equal to 14; allowed: [1, 14]\n"
    )


def test_dry_run_prints_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--config", write(tmp_path, EAGLE), "--dry-run"])
    assert capsys.readouterr().out.split() == vllm_argv(engine(EAGLE))


def test_the_listen_address_replaces_every_interface() -> None:
    command = ["vllm", "serve", "m", "--host", "0.0.0.0", "--port", "8000"]
    assert listening(command, "127.100.0.7") == ["vllm", "serve", "m", "--host", "127.100.0.7", "--port", "8000"]
    assert listening(command, "") == command


def test_the_sample_recorder_joins_vllm_when_the_operator_sets_its_directory(tmp_path: Path) -> None:
    path = write(
        tmp_path, {**EAGLE, "model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}
    )
    recording = Environment(
        env={**HEALTHY.env, "SPECINFER_SAMPLES_DIR": "/var/lib/specinfer/learning/samples"},
        shared_memory=HEALTHY.shared_memory,
        versions=IMAGE,
    )
    found = prepare(path, [], recording).argv
    assert found[-2:] == ["--middleware", "specinfer_runtime.samples.SampleRecorder"]
    assert "--middleware" not in prepare(path, [], HEALTHY).argv
