"""Render the exact `vllm serve` command line of an engine spec (pure: no I/O)."""

from __future__ import annotations

import json
from typing import Any

from specinfer_runtime import passthrough
from specinfer_runtime.engine import ENGINE_PORT, EngineSpec
from specinfer_runtime.methods import DRAFTER_METHODS, EAGLE_HEAD_METHODS
from specinfer_runtime.sources import HIDDEN_STATES_PATH
from specinfer_runtime.speculative import SpeculativeConfig
from specinfer_runtime.suffix import SuffixConfig


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def speculative_config(spec: EngineSpec) -> dict[str, Any]:
    """vLLM's `speculative_config`, snake_case keys, K always explicit (R3)."""
    sc: SpeculativeConfig = spec.speculative
    method = sc.effective_method()
    out: dict[str, Any] = {"method": method, "num_speculative_tokens": spec.effective_k()}
    draft = sc.draft_model
    if draft is not None and method in DRAFTER_METHODS:
        out["model"] = draft.load_path("draft")
        source = draft.source
        # A draft vLLM downloads itself takes the revision; one already in its directory was fetched at it.
        if out["model"] == draft.name and source and source.hugging_face and source.hugging_face.revision:
            out["revision"] = source.hugging_face.revision
        if draft.quantization:
            out["quantization"] = draft.quantization
        if draft.max_model_len is not None:
            out["max_model_len"] = draft.max_model_len
    draft_tp = sc.draft_tensor_parallel_size
    if draft_tp is None and method in EAGLE_HEAD_METHODS:
        draft_tp = 1
    if draft_tp is not None:
        out["draft_tensor_parallel_size"] = draft_tp
    if sc.disable_padded_drafter_batch:
        out["disable_padded_drafter_batch"] = True
    if sc.parallel_drafting:
        out["parallel_drafting"] = True
    if sc.enforce_eager is not None:
        out["enforce_eager"] = sc.enforce_eager
    if sc.rejection_sample_method is not None:
        out["rejection_sample_method"] = sc.rejection_sample_method
    if sc.draft_sample_method is not None:
        out["draft_sample_method"] = sc.draft_sample_method
    if sc.synthetic_acceptance_rates is not None:
        out["synthetic_acceptance_rates"] = list(sc.synthetic_acceptance_rates)
    if sc.synthetic_acceptance_length is not None:
        out["synthetic_acceptance_length"] = sc.synthetic_acceptance_length
    if sc.dspark is not None:
        if sc.dspark.draft_top_k is not None:
            out["dspark_draft_topk"] = sc.dspark.draft_top_k
        if sc.dspark.adaptive_verification:
            out["enable_adaptive_verification"] = True
    if sc.num_speculative_tokens_per_batch_size is not None:
        out["num_speculative_tokens_per_batch_size"] = [
            [r.min_batch_size, r.max_batch_size, r.num_speculative_tokens]
            for r in sc.num_speculative_tokens_per_batch_size
        ]
    if sc.ngram is not None:
        if sc.ngram.prompt_lookup_min is not None:
            out["prompt_lookup_min"] = sc.ngram.prompt_lookup_min
        if sc.ngram.prompt_lookup_max is not None:
            out["prompt_lookup_max"] = sc.ngram.prompt_lookup_max
    if method == "suffix":
        suffix = sc.suffix or SuffixConfig()
        out.update(
            suffix_decoding_max_tree_depth=suffix.max_tree_depth,
            suffix_decoding_max_cached_requests=suffix.max_cached_requests,
            suffix_decoding_max_spec_factor=suffix.max_spec_factor,
            suffix_decoding_min_token_prob=suffix.min_token_prob,
        )
    if sc.hidden_states is not None:
        out["draft_model_config"] = {
            "hf_config": {"eagle_aux_hidden_state_layer_ids": list(sc.hidden_states.layer_ids)}
        }
    return out


def compilation_config(spec: EngineSpec) -> dict[str, Any] | None:
    mode = spec.graph.mode
    out: dict[str, Any] = {}
    if mode is not None and mode != "NONE":
        out["cudagraph_mode"] = mode
        sizes = spec.capture_sizes()
        if sizes:
            out["cudagraph_capture_sizes"] = sizes
    return passthrough.merged(out or None, spec.compilation_config)


def additional_config(spec: EngineSpec) -> dict[str, Any] | None:
    """vLLM-Ascend's `additional_config`: its rejection sampler and its dynamic verify budget."""
    out: dict[str, Any] = {}
    rs = spec.speculative.rejection_sampler
    if rs is not None:
        out["rejection_sampler_config"] = {
            "enable_block_verify": rs.block_verify,
            "enable_entropy_verify": rs.entropy_verify,
            "posterior_threshold": rs.posterior_threshold,
            "posterior_alpha": rs.posterior_alpha,
        }
    dv = spec.speculative.dynamic_verification
    if dv is not None:
        out["dynamic_spec_config"] = {
            "method": spec.speculative.method,
            "method_params": {
                "initial_verify_budget_per_req": dv.initial_verify_budget_per_request,
                "budget_update_interval": dv.budget_update_interval,
                "budget_threshold": dv.budget_threshold,
                "min_verify_tokens": dv.min_verify_tokens,
            },
        }
    return passthrough.merged(out or None, spec.additional_config)


def kv_transfer_config(spec: EngineSpec) -> dict[str, Any] | None:
    if spec.speculative.hidden_states is None:
        return None
    return {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": HIDDEN_STATES_PATH},
    }


def vllm_argv(spec: EngineSpec) -> list[str]:
    """`vllm serve ...` for this spec; every flag the operator owns comes from here."""
    model, par, sched = spec.model, spec.parallelism, spec.scheduling
    argv = ["vllm", "serve", model.load_path("target"), "--served-model-name", model.served_name()]
    argv += ["--host", "0.0.0.0", "--port", str(ENGINE_PORT)]
    argv += ["--tensor-parallel-size", str(par.tensor)]
    if par.data > 1:
        argv += ["--data-parallel-size", str(par.data)]
    if par.expert:
        argv.append("--enable-expert-parallel")
    if model.max_model_len is not None:
        argv += ["--max-model-len", str(model.max_model_len)]
    if model.quantization:
        argv += ["--quantization", model.quantization]
    if model.trust_remote_code:
        argv.append("--trust-remote-code")
    if model.source and model.source.hugging_face and model.source.hugging_face.revision:
        argv += ["--revision", model.source.hugging_face.revision]
    argv += ["--speculative-config", _json(speculative_config(spec))]
    if spec.graph.mode == "NONE":
        argv.append("--enforce-eager")
    for flag, config in (
        ("--compilation-config", compilation_config(spec)),
        ("--additional-config", additional_config(spec)),
        ("--kv-transfer-config", kv_transfer_config(spec)),
    ):
        if config is not None:
            argv += [flag, _json(config)]
    if sched.async_scheduling:
        argv.append("--async-scheduling")
    if sched.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(sched.max_num_seqs)]
    if sched.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(sched.max_num_batched_tokens)]
    argv += spec.engine_args or []
    return argv
