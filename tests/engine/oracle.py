"""vLLM's own verdict on a `vllm serve` command line, as far as it goes before loading weights.

    python -m tests.engine.oracle OUT   # stdin: JSON list of {"name", "args"}; OUT: a verdict per entry

Run with the engine venv's interpreter. Each command line goes through vLLM's argument parser, its
configuration classes (`EngineArgs.create_engine_config`: ModelConfig, ParallelConfig, SchedulerConfig,
SpeculativeConfig, VllmConfig and their cross-checks), then the model runner vLLM builds when an
engine starts, which creates the drafter (where vLLM refuses, for instance, a draft model whose tensor
parallel size differs from the target's), and the scheduler's reading of a per-batch-size schedule. The
runner is built in this process on a one-rank gloo group, so cases with tensor parallelism above 1 are
judged on the same code path without one process per rank.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from typing import Any

from hack.vllm_flags import serve_parser


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or repr(error)
    return f"{type(error).__name__}: {text[:400]}"


def judge(top: Any, args: list[str]) -> dict[str, str]:
    """{"stage": where vLLM refused it ("" if it did not), "message": vLLM's words}."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    stage = "arguments"
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                parsed = top.parse_args(["serve", *args])
            except SystemExit:
                return {"stage": stage, "message": err.getvalue().strip().splitlines()[-1]}
        parsed.model = parsed.model_tag  # what `vllm serve` does with the positional model
        stage = "configuration"
        config = AsyncEngineArgs.from_cli_args(parsed).create_engine_config()
        stage = "engine start"
        with set_current_vllm_config(config):
            if not parallel_state.model_parallel_is_initialized():
                parallel_state.init_distributed_environment(
                    world_size=1,
                    rank=0,
                    local_rank=0,
                    distributed_init_method=f"file://{tempfile.mktemp(prefix='oracle-')}",
                    backend="gloo",
                )
                parallel_state.ensure_model_parallel_initialized(1, 1)
            CPUModelRunner(config, torch.device("cpu"))
            speculative = config.speculative_config
            if speculative is not None and speculative.num_speculative_tokens_per_batch_size is not None:
                from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

                # What the scheduler does with the schedule when it starts (vllm/v1/core/sched/scheduler.py).
                build_dynamic_sd_schedule_lookup(
                    speculative.num_speculative_tokens_per_batch_size,
                    vllm_max_batch_size=config.scheduler_config.max_num_seqs,
                    vllm_num_speculative_tokens=speculative.num_speculative_tokens,
                )
    except Exception as error:  # vLLM's checks raise ValueError, NotImplementedError, pydantic errors...
        return {"stage": stage, "message": _first_line(error)}
    return {"stage": "", "message": ""}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    top, _ = serve_parser()
    verdicts = {entry["name"]: judge(top, entry["args"]) for entry in json.load(sys.stdin)}
    with open(sys.argv[1], "w") as out:
        json.dump(verdicts, out, indent=1, sort_keys=True)
