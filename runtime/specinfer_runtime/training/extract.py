"""What the target computes for the recorded prompts: its own greedy answer, and the hidden states on the way.

vLLM's extract_hidden_states method runs the target and keeps the chosen layers' hidden states in its KV
cache; the connector (hidden_states_connector.py) writes them out per request, prompt and answer together.
This runs in a process of its own (`python -m specinfer_runtime.training.extract CONFIG`), so that the
target's memory is the device's again before the head trains.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specinfer_runtime.hidden_states_connector import CONNECTOR, MODULE


def engine_options(
    target: str, aux_and_last: Sequence[int], scratch: Path, max_model_len: int, loading: dict[str, Any]
) -> dict[str, Any]:
    """The vLLM engine that extracts: method extract_hidden_states (one token a step: it drafts nothing), the
    target loaded as the engines load it (`loading`: tensor parallelism, quantization, remote code)."""
    return {
        **loading,
        "model": target,
        "speculative_config": {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(aux_and_last)}},
        },
        "kv_transfer_config": {
            "kv_connector": CONNECTOR,
            "kv_connector_module_path": MODULE,
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": str(scratch)},
        },
        "max_model_len": max_model_len,
        "enforce_eager": True,
        "seed": 0,
    }


MAX_FLUSH_STEPS = 10_000
# On a CPU, vLLM takes most of the machine's memory for its KV cache unless told (20.5 of 24 GiB here), beside
# the engines and the training that share it; the prompts of one run need far less. NPUs ignore it.
CPU_KV_CACHE_GIB = "4"


def _locked(path: Path) -> bool:
    """Whether the connector still holds the file's lock (its hidden states are not written yet)."""
    lock = Path(f"{path}.lock")
    try:
        with lock.open("rb") as held:
            fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except FileNotFoundError:
        return False
    except BlockingIOError:
        return True
    return False


def _flush(llm: Any, paths: Sequence[Path]) -> None:
    """Step the engine until every file is written. The connector writes a request's file in the engine step
    after it finished, and generate() stops stepping once every answer is out: the last ones would wait
    for a step that never comes."""
    for _ in range(MAX_FLUSH_STEPS):
        if not any(_locked(p) for p in paths):
            break
        llm.llm_engine.step()
    else:
        raise RuntimeError(f"the engine did not write the hidden states of {sum(map(_locked, paths))} answers")
    for path in paths:
        Path(f"{path}.lock").unlink(missing_ok=True)


def extract(
    target: str,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[int],
    aux_and_last: Sequence[int],
    scratch: Path,
    loading: dict[str, Any],
) -> list[Path]:
    """Each prompt answered greedily by the target, in as many tokens as `answers` says; the files of hidden
    states, in the prompts' order. The
    engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so that _flush can step it."""
    from vllm import LLM, SamplingParams

    longest = max(len(p) + a for p, a in zip(prompts, answers, strict=True))
    llm = LLM(**engine_options(target, aux_and_last, scratch, longest + 1, loading))
    outputs = llm.generate(
        [{"prompt_token_ids": list(p)} for p in prompts],
        [SamplingParams(temperature=0.0, max_tokens=a) for a in answers],
        use_tqdm=False,
    )
    found = []
    for output in outputs:
        params = getattr(output, "kv_transfer_params", None) or {}
        path = params.get("hidden_states_path")
        if isinstance(path, str):
            found.append(Path(path))
    _flush(llm, found)
    return found


def main(argv: Sequence[str]) -> None:
    """`extract CONFIG`: CONFIG names target, prompts (token ids), answers (their lengths), layers, scratch and
    the engine's loading options; the list of files written goes to CONFIG's `output`."""
    config = json.loads(Path(argv[0]).read_text())
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # _flush steps the engine core in this process
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB)
    files = extract(
        config["target"],
        config["prompts"],
        config["answers"],
        config["layers"],
        Path(config["scratch"]),
        config["engine"],
    )
    Path(config["output"]).write_text(json.dumps([str(f) for f in files]))


if __name__ == "__main__":
    main(sys.argv[1:])
