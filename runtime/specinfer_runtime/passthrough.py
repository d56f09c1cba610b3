"""vLLM and vLLM-Ascend options the spec does not model, passed through as vLLM spells them.

`compilationConfig` holds more keys of vLLM's `--compilation-config`, `additionalConfig` more keys of
vLLM-Ascend's `--additional-config`. The keys the operator renders from typed fields are refused there:
one field sets each key, so a typed rule (capture sizes against K, the verify budget against the method)
cannot be sidestepped. vLLM's CompilationConfig refuses unknown keys at engine start, so they are refused
here first; vLLM-Ascend ignores unknown `additional_config` keys, so those get a warning.

A CRD rule cannot see the keys of a free-form map, so these checks run in the admission policy next to
the CRD (as the label-key checks do), and in-process from the same expressions.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from specinfer_runtime import flags
from specinfer_runtime.celrules import Reason, Rule, cel_list, map_keys

# vLLM's CompilationConfig fields, from the table `make vllm-flags` derives from the installed vLLM (the engine
# suite fails when it is stale).
COMPILATION_KEYS: tuple[str, ...] = tuple(flags.TABLE["compilation_config_keys"])
# Compilation keys rendered from spec.graph; max_cudagraph_capture_size must agree with the sizes.
OWNED_COMPILATION_KEYS = {
    "cudagraph_mode": "graph.mode",
    "cudagraph_capture_sizes": "graph.captureSizes or graph.maxBatchSize",
    "max_cudagraph_capture_size": "graph.captureSizes or graph.maxBatchSize",
}
# additional_config keys rendered from spec.speculative.
OWNED_ADDITIONAL_KEYS = {
    "rejection_sampler_config": "speculative.rejectionSampler",
    "dynamic_spec_config": "speculative.dynamicVerification",
}
# Top-level additional_config keys vLLM-Ascend reads (v0.25.1 and main); others are ignored by it.
ASCEND_ADDITIONAL_KEYS = (
    "ascend_compilation_config",
    "ascend_fusion_config",
    "ascend_log_path",
    "batch_job_sched_config",
    "c8_enable_reshape_optim",
    "draft_window_size",
    "dump_config",
    "dump_config_path",
    "dynamic_spec_config",
    "enable_context_parallel",
    "enable_cpu_binding",
    "enable_dsa_cp",
    "enable_flashcomm1",
    "enable_fused_mc2",
    "enable_kv_nz",
    "enable_mc2_hierarchy_comm",
    "enable_mlapo",
    "enable_prefill_mc2",
    "enable_reduce_sample",
    "enable_shared_expert_dp",
    "enable_sleep_mode_extra_cleanup",
    "enable_sparse_c8",
    "enable_sparse_li_c8",
    "enable_sparse_sfa_c8",
    "enable_transpose_kv_cache_by_block",
    "eplb_config",
    "finegrained_tp_config",
    "mega_moe_max_tokens",
    "mix_placement",
    "msmonitor_use_daemon",
    "multistream_dsv4_dsa_overlap",
    "multistream_overlap_shared_expert",
    "pa_shape_list",
    "profiling_chunk_config",
    "recompute_scheduler_enable",
    "refresh",
    "rejection_sampler_config",
    "rl_config",
    "scheduler_config",
    "short_request_first_config",
    "sparse_kv_offload_config",
    "weight_nz_mode",
    "xlite_graph_config",
)


def options_field(flag: str, what: str) -> Any:
    """A map of vLLM keys to JSON values; the CRD keeps the values as they are (no schema to prune them)."""
    return Field(
        default=None,
        max_length=32,
        description=f"More keys of {flag} ({what}), spelled as vLLM spells them (snake_case), with JSON values. "
        "Keys the operator renders from typed fields are refused here.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-preserve-unknown-fields": True}},
    )


# What one value may hold. The CRD keeps the values as they are, so only these bounds keep a value from
# filling a request: every stage that reads it (admission, the operator's check and render, the runtime)
# would pay its size, and a deep one overflows recursive readers (the operator's JSON parser among them).
# vLLM's options are scalars, lists of sizes and maps of settings: a map of lists is as deep as they go.
MAX_VALUE_ENTRIES = 256
SHAPE_MESSAGE = (
    f"each value holds at most {MAX_VALUE_ENTRIES} entries in all, in lists and maps nested at most two deep "
    "(a map of lists, not a list of maps of lists): set only the options that differ from vLLM's defaults"
)


def _entries(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else value


def within_bounds(value: Any) -> bool:
    """A passthrough value within MAX_VALUE_ENTRIES entries, lists and maps at most two deep (as
    `within_bounds_cel`); measured from the outside in, so that a value far over costs no more than one
    at the bound."""
    if not isinstance(value, dict | list):
        return True
    entries = _entries(value)
    if len(entries) > MAX_VALUE_ENTRIES:
        return False
    inner = [_entries(x) for x in entries if isinstance(x, dict | list)]
    if len(entries) + sum(map(len, inner)) > MAX_VALUE_ENTRIES:
        return False
    return not any(isinstance(y, dict | list) for x in inner for y in x)


def within_bounds_cel(v: str) -> str:
    """CEL of `within_bounds` for the admission policy: sizes first, so that no value costs more than its
    bound to check."""

    def container(x: str) -> str:
        return f"(type({x}) == list || type({x}) == map)"

    def entries(x: str) -> str:
        return f"(type({x}) == map ? {x}.map(e, {x}[e]) : {x})"

    total = f"size({v}) + {entries(v)}.map(x, {container('x')} ? size(x) : 0).sum()"
    flat = f"{entries(v)}.all(x, !{container('x')} || {entries('x')}.all(y, !{container('y')}))"
    return f"!{container(v)} || (size({v}) <= {MAX_VALUE_ENTRIES} && {total} <= {MAX_VALUE_ENTRIES} && {flat})"


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _json(value: Any) -> bool:
    """A JSON value (of at most two levels: within_bounds holds)."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return False
        value = list(value.values())
    if isinstance(value, list):
        return _SCALARS.issuperset(map(type, value)) or all(map(_json, value))
    return isinstance(value, str | int | float | bool) or value is None


def _bounded(options: Any) -> Any:
    """Refuse values over the bounds before anything reads them whole, then what JSON cannot hold. The
    values are kept as they are (JsonValue would call back into Python for every entry, at every dump)."""
    if isinstance(options, dict):
        over = [key for key, value in options.items() if not within_bounds(value)]
        if over:
            raise ValueError(f"{json.dumps(over)}: {SHAPE_MESSAGE}")
        odd = [key for key, value in options.items() if not _json(value)]
        if odd:
            raise ValueError(f"{json.dumps(odd)}: not JSON: values are numbers, strings, booleans, nulls, lists, maps")
    return options


Options = Annotated[dict[str, Any], BeforeValidator(_bounded)]


def _keys(target: str, keys: str, message: str, field: str, reason: Reason = "FieldValueForbidden") -> Rule:
    return map_keys("passthrough", target, keys, "%s: " + message, field, reason)


def admission_rules(root: str) -> tuple[Rule, ...]:
    """Key checks of both maps in the object at `root` (`object` for an engine spec, `object.spec` in a
    SpeculativeInference)."""
    field = root.removeprefix("object").removeprefix(".")
    at = f"{field}." if field else ""
    owned_compilation = ", ".join(f"{k} ({v})" for k, v in OWNED_COMPILATION_KEYS.items())
    owned_additional = ", ".join(f"{k} ({v})" for k, v in OWNED_ADDITIONAL_KEYS.items())
    allowed = [k for k in COMPILATION_KEYS if k not in OWNED_COMPILATION_KEYS]
    return (
        _keys(
            f"{root}.compilationConfig",
            f"!(k in {cel_list(OWNED_COMPILATION_KEYS)})",
            f"rendered by the operator from typed fields: {owned_compilation}: set those instead",
            f"{at}compilationConfig",
        ),
        _keys(
            f"{root}.compilationConfig",
            f"k in {cel_list(COMPILATION_KEYS)}",
            "not a key of vLLM's compilation_config, which refuses unknown keys; the keys are: " + ", ".join(allowed),
            f"{at}compilationConfig",
            "FieldValueInvalid",
        ),
        _keys(
            f"{root}.additionalConfig",
            f"!(k in {cel_list(OWNED_ADDITIONAL_KEYS)})",
            f"rendered by the operator from typed fields: {owned_additional}: set those instead",
            f"{at}additionalConfig",
        ),
    )


def shape_rules(root: str) -> tuple[Rule, ...]:
    """`within_bounds` of both maps' values in the object at `root`, for the admission policy (the schema cannot
    bound a free-form value; in-process the models check it, before reading the value)."""
    field = root.removeprefix("object").removeprefix(".")
    at = f"{field}." if field else ""
    return tuple(
        map_keys(
            "passthrough",
            f"{root}.{name}",
            within_bounds_cel(f"{root}.{name}[k]"),
            "%s: " + SHAPE_MESSAGE,
            f"{at}{name}",
        )
        for name in ("compilationConfig", "additionalConfig")
    )


def merged(rendered: dict[str, Any] | None, extra: Options | None) -> dict[str, Any] | None:
    """The operator's keys over the passed-through ones (admission refuses a clash; this keeps it so)."""
    if not extra:
        return rendered
    return {**extra, **(rendered or {})}
