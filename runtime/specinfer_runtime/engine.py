"""The engine configuration: what vLLM and vLLM-Ascend accept, and the rules they impose.

These models are the `spec` of a SpeculativeInference minus its Kubernetes parts. The operator
renders them into the pod's engine config; the runtime reads that config back with the same models.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from specinfer_runtime import flags
from specinfer_runtime.base import CelRules, Section, section_field, unique
from specinfer_runtime.celrules import Rule, cel_in, cel_list, evaluate
from specinfer_runtime.sources import TargetModel
from specinfer_runtime.speculative import (
    ASCEND_MAX_SPECULATIVE_TOKENS,
    ASYNC_SCHEDULING_METHODS,
    SCHEDULE_FIELD,
    SUFFIX_DEFAULT_TREE_DEPTH,
    SpeculativeConfig,
)

# vLLM listens here inside the pod; spec.service.port is the Service's port.
ENGINE_PORT = 8000

GraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
FULL_GRAPH_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


# Distinct token counts; in the CRD `x-kubernetes-list-type: set` refuses duplicates the same way.
CaptureSizes = Annotated[
    list[Annotated[int, Field(ge=1, le=16384)]],
    AfterValidator(unique),
    Field(json_schema_extra={"x-kubernetes-list-type": "set"}),
]


class Parallelism(Section):
    """How the engine spreads over NPUs; a pod requests tensor x pipeline x data NPUs."""

    tensor: int = Field(default=1, ge=1, le=64, description="Tensor parallel size (vLLM: `--tensor-parallel-size`).")
    pipeline: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Pipeline parallel size (vLLM: `--pipeline-parallel-size`). Must stay 1: vLLM does not "
            "compose pipeline parallelism with speculative decoding."
        ),
    )
    data: int = Field(default=1, ge=1, le=64, description="Data parallel size (vLLM: `--data-parallel-size`).")
    expert: bool = Field(
        default=False, description="Expert parallelism for MoE models (vLLM: `--enable-expert-parallel`)."
    )

    def npus(self) -> int:
        return self.tensor * self.pipeline * self.data


class GraphConfig(Section):
    """Graph capture (ACL graphs on Ascend; vLLM: `--compilation-config`)."""

    mode: GraphMode | None = Field(
        default=None,
        description=(
            "Graph mode (vLLM: `cudagraph_mode`): NONE (eager), PIECEWISE, FULL, FULL_DECODE_ONLY or "
            "FULL_AND_PIECEWISE. In the full modes the verification step has a fixed shape, so every "
            "capture size must be a multiple of K+1. vLLM-Ascend's default when unset."
        ),
    )
    capture_sizes: CaptureSizes | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description=(
            "Token counts to capture graphs for (vLLM: `cudagraph_capture_sizes`). In full modes each "
            "is n x (K+1) for a batch size n, e.g. [5, 10, 15, 20] for K = 4 and batches 1-4."
        ),
    )
    max_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Instead of captureSizes: capture n x (K+1) for every batch size n from 1 to this value.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R6",
            rule="!(has(self.captureSizes) && has(self.maxBatchSize))",
            message="set captureSizes or maxBatchSize, not both",
            field_path=".maxBatchSize",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R6",
            rule="!(has(self.captureSizes) || has(self.maxBatchSize)) || (has(self.mode) && self.mode != 'NONE')",
            message="capture sizes need a graph mode: set mode to PIECEWISE or a FULL mode",
            field_path=".mode",
            reason="FieldValueRequired",
        ),
    )


class SchedulingConfig(Section):
    """Scheduler settings."""

    async_scheduling: bool = Field(
        default=False,
        description="Overlap scheduling with execution (vLLM: `--async-scheduling`); only with eagle, "
        "eagle3, mtp, dflash and draft_model, and not with disablePaddedDrafterBatch.",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, le=65536, description="Most sequences in one batch (vLLM: `--max-num-seqs`)."
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10_485_760,
        description="Most tokens in one batch (vLLM: `--max-num-batched-tokens`).",
    )


_DEPTH = f"(has(self.speculative.suffix) ? self.speculative.suffix.maxTreeDepth : {SUFFIX_DEFAULT_TREE_DEPTH})"
_CAP = ASCEND_MAX_SPECULATIVE_TOKENS
# K as rendered (R3): given, else min(suffix depth, 14) for suffix, else 1. The CRD rules inline this
# expression and the renderer evaluates it, so the default lives in one place.
K = (
    "(has(self.speculative.numSpeculativeTokens) ? self.speculative.numSpeculativeTokens : "
    f"self.speculative.method == 'suffix' ? ({_DEPTH} < {_CAP} ? {_DEPTH} : {_CAP}) : 1)"
)
# Batch sizes whose capture sizes the rules and the renderer enumerate (CEL has no range): graph.maxBatchSize
# stops here, and an explicit list of at most 64 sizes cannot cover more batch sizes than that.
MAX_GRAPH_BATCH = 64
BATCHES = cel_list(range(1, MAX_GRAPH_BATCH + 1))
SCHEDULE = f"self.speculative.{SCHEDULE_FIELD}"


def in_force(r: str, n: str) -> str:
    """CEL: schedule range `r` sets the K of batch size `n`: the last range starting at or below it, since
    vLLM keeps a range's K through a gap after it and past the last range."""
    later = f"q.minBatchSize > {r}.minBatchSize && q.minBatchSize <= {n}"
    return f"({r}.minBatchSize <= {n} && !{SCHEDULE}.exists(q, {later}))"


def k_at(n: str) -> str:
    """CEL: the K of batch size `n` under the schedule (the range in force is unique, so its sum is its K)."""
    return f"{SCHEDULE}.filter(r, {in_force('r', n)}).map(r, r.numSpeculativeTokens).sum()"


def decode_size(n: str) -> str:
    """CEL: tokens in a decode step of `n` sequences, each verifying its drafts and one token more."""
    return f"({n} * ((has({SCHEDULE}) ? {k_at(n)} : {K}) + 1))"


# Capture sizes to render for graph.maxBatchSize: one decode step per batch size (CEL, evaluated by the
# renderer, so that the rules and the rendered sizes read the schedule the same way).
COMPUTED_CAPTURE_SIZES = f"{BATCHES}.filter(n, n <= self.graph.maxBatchSize).map(n, {decode_size('n')})"
# A batch size up to the largest capture size whose decode step has no capture size (explicit sizes, schedule).
_MISSING = (
    f"(!has(self.scheduling.maxNumSeqs) || n <= self.scheduling.maxNumSeqs) "
    f"&& self.graph.captureSizes.exists(t, t >= {decode_size('n')}) && !({decode_size('n')} in self.graph.captureSizes)"
)

# The K tuning may choose: from minK to maxK (numSpeculativeTokens when unset).
_MAX_K = f"(has(self.speculative.tuning.maxK) ? self.speculative.tuning.maxK : {K})"
_TUNABLE_KS = (
    f"{cel_list(range(1, ASCEND_MAX_SPECULATIVE_TOKENS + 1))}"
    f".filter(k, k >= self.speculative.tuning.minK && k <= {_MAX_K})"
)

# Token slots vLLM reserves for drafting in every step (SpeculativeConfig.max_num_new_slots_for_drafting).
DRAFT_SLOTS = f"(self.speculative.method == 'draft_model' ? 1 : self.speculative.method == 'dflash' ? {K} : 0)"
FULL_MODE = f"has(self.graph.mode) && {cel_in('self.graph.mode', FULL_GRAPH_MODES)}"


EngineArg = Annotated[
    str,
    Field(min_length=1, max_length=256),
    CelRules(
        (
            Rule(
                id="R15",
                rule=f"!{flags.SHADOWS_OWNED}",
                message="%s: remove it from engineArgs (vLLM reads --a_b as --a-b, --flag=value and --flag.key as "
                "--flag, and a prefix of a flag as the flag)",
                args=(flags.DESCRIBE,),
                reason="FieldValueForbidden",
            ),
        )
    ),
]


class EngineSpec(Section):
    """Everything the vLLM engine in each pod is started with."""

    model: TargetModel = Field(description="The served (target) model.")
    parallelism: Parallelism = section_field(Parallelism, "Parallelism of each engine (one pod).")
    speculative: SpeculativeConfig = Field(description="Speculative decoding (vLLM: `--speculative-config`).")
    graph: GraphConfig = section_field(GraphConfig, "Graph capture (vLLM: `--compilation-config`).")
    scheduling: SchedulingConfig = section_field(SchedulingConfig, "Scheduler settings.")
    engine_args: list[EngineArg] | None = Field(
        default=None,
        max_length=64,
        description=(
            'Extra `vllm serve` arguments, appended verbatim (e.g. ["--seed", "1024"]). Flags the '
            "operator renders from the spec (model, port, parallelism, --speculative-config, "
            "--compilation-config, --additional-config, ...) are refused here."
        ),
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R5",
            rule="!has(self.speculative.draftTensorParallelSize) || self.speculative.draftTensorParallelSize == 1 "
            "|| self.speculative.draftTensorParallelSize == self.parallelism.tensor "
            "|| self.speculative.method == 'draft_model'",
            message="draftTensorParallelSize %d given; it must be 1 or parallelism.tensor (%d)",
            args=("self.speculative.draftTensorParallelSize", "self.parallelism.tensor"),
            field_path=".speculative.draftTensorParallelSize",
        ),
        Rule(
            id="R5",
            rule="self.speculative.method != 'draft_model' || !has(self.speculative.draftTensorParallelSize) "
            "|| self.speculative.draftTensorParallelSize == self.parallelism.tensor",
            message="draftTensorParallelSize %d given, but vLLM runs a draft_model drafter with the target's tensor "
            "parallel size: set %d (parallelism.tensor) or leave it unset",
            args=("self.speculative.draftTensorParallelSize", "self.parallelism.tensor"),
            field_path=".speculative.draftTensorParallelSize",
        ),
        Rule(
            id="R6",
            rule=f"!has(self.graph.captureSizes) || !({FULL_MODE}) || has({SCHEDULE}) "
            f"|| self.graph.captureSizes.all(s, s % ({K} + 1) == 0)",
            message="every capture size must be a multiple of K+1 = %d in graph mode %s (numSpeculativeTokens %d); "
            "not multiples: %s; use n*(K+1), e.g. %s for batch sizes 1-4, or set graph.maxBatchSize",
            args=(
                f"{K} + 1",
                "self.graph.mode",
                K,
                f"self.graph.captureSizes.filter(s, s % ({K} + 1) != 0)",
                f"[1, 2, 3, 4].map(n, n * ({K} + 1))",
            ),
            field_path=".graph.captureSizes",
        ),
        Rule(
            id="R6",
            rule=f"!has(self.graph.captureSizes) || !has(self.scheduling.maxNumSeqs) || !({FULL_MODE}) "
            f"|| self.graph.captureSizes.all(s, s <= self.scheduling.maxNumSeqs * ({K} + 1))",
            message="capture sizes may not exceed scheduling.maxNumSeqs x (K+1) = %d; too large: %s; "
            "drop them or raise scheduling.maxNumSeqs",
            args=(
                f"self.scheduling.maxNumSeqs * ({K} + 1)",
                f"self.graph.captureSizes.filter(s, s > self.scheduling.maxNumSeqs * ({K} + 1))",
            ),
            field_path=".graph.captureSizes",
        ),
        Rule(
            id="R22",
            rule=f"!has({SCHEDULE}) || !has(self.graph.captureSizes) || !({FULL_MODE}) || self.graph.captureSizes.all("
            f"s, {SCHEDULE}.exists(r, s % (r.numSpeculativeTokens + 1) == 0 "
            f"&& {in_force('r', 's / (r.numSpeculativeTokens + 1)')}))",
            message="capture sizes %s are no decode step's size under numSpeculativeTokensPerBatchSize in graph mode "
            "%s: a step of n sequences verifies n x (K+1) tokens, K being that of batch size n; drop them, or set "
            "graph.maxBatchSize and let the operator compute the sizes",
            args=(
                f"self.graph.captureSizes.filter(s, !{SCHEDULE}.exists(r, s % (r.numSpeculativeTokens + 1) == 0 "
                f"&& {in_force('r', 's / (r.numSpeculativeTokens + 1)')}))",
                "self.graph.mode",
            ),
            field_path=".graph.captureSizes",
        ),
        Rule(
            id="R22",
            rule=f"!has({SCHEDULE}) || !has(self.graph.captureSizes) || !({FULL_MODE}) "
            f"|| !{BATCHES}.exists(n, {_MISSING})",
            message="capture sizes miss %s, the decode steps of batch sizes %s under numSpeculativeTokensPerBatchSize "
            "(n x (K+1), K being that of batch size n): every batch size up to the largest captured one needs its "
            "size; add them, or set graph.maxBatchSize and let the operator compute the sizes",
            args=(
                f"{BATCHES}.filter(n, {_MISSING}).map(n, {decode_size('n')})",
                f"{BATCHES}.filter(n, {_MISSING})",
            ),
            field_path=".graph.captureSizes",
        ),
        Rule(
            id="R22",
            rule=f"!has({SCHEDULE}) || {SCHEDULE}.all(r, r.numSpeculativeTokens <= {K})",
            message="ranges %s (as [minBatchSize, maxBatchSize, K]) draft more than numSpeculativeTokens %d, the "
            "largest K the engine is built for: lower their K or raise numSpeculativeTokens",
            args=(
                f"{SCHEDULE}.filter(r, r.numSpeculativeTokens > {K})"
                ".map(r, [r.minBatchSize, r.maxBatchSize, r.numSpeculativeTokens])",
                K,
            ),
            field_path=".speculative.numSpeculativeTokensPerBatchSize",
        ),
        Rule(
            id="R22",
            rule=f"!has({SCHEDULE}) || self.parallelism.data == 1",
            message="vLLM ignores numSpeculativeTokensPerBatchSize with data parallelism %d (its ranks could pick "
            "different K and wait on each other) and drafts numSpeculativeTokens at every batch size: remove the "
            "schedule or set parallelism.data to 1",
            args=("self.parallelism.data",),
            field_path=".speculative.numSpeculativeTokensPerBatchSize",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="tuning",
            rule=f"!has(self.speculative.tuning) || self.speculative.tuning.mode != 'Auto' "
            f"|| !has(self.graph.captureSizes) || !({FULL_MODE}) || {_TUNABLE_KS}.exists(k, k != {K} "
            "&& self.graph.captureSizes.all(s, s % (k + 1) == 0))",
            message="tuning.mode Auto changes K, but capture sizes %s are multiples of K+1 for no other K from "
            "minK %d to maxK %d in graph mode %s: set graph.maxBatchSize instead (the operator computes the sizes "
            "for each K), or use mode Recommend",
            args=("self.graph.captureSizes", "self.speculative.tuning.minK", _MAX_K, "self.graph.mode"),
            field_path=".speculative.tuning.mode",
        ),
        Rule(
            id="R6",
            rule="!has(self.graph.maxBatchSize) || !has(self.scheduling.maxNumSeqs) "
            "|| self.graph.maxBatchSize <= self.scheduling.maxNumSeqs",
            message="maxBatchSize %d exceeds scheduling.maxNumSeqs %d; lower it or raise maxNumSeqs",
            args=("self.graph.maxBatchSize", "self.scheduling.maxNumSeqs"),
            field_path=".graph.maxBatchSize",
        ),
        Rule(
            id="R19",
            rule="!has(self.scheduling.maxNumBatchedTokens) || !has(self.scheduling.maxNumSeqs) "
            "|| self.scheduling.maxNumBatchedTokens >= self.scheduling.maxNumSeqs",
            message="maxNumBatchedTokens %d is below maxNumSeqs %d, which vLLM refuses (every scheduled sequence "
            "needs a token): raise maxNumBatchedTokens or lower maxNumSeqs",
            args=("self.scheduling.maxNumBatchedTokens", "self.scheduling.maxNumSeqs"),
            field_path=".scheduling.maxNumBatchedTokens",
        ),
        Rule(
            id="R19",
            rule=f"!has(self.scheduling.maxNumBatchedTokens) || self.scheduling.maxNumBatchedTokens > {DRAFT_SLOTS}",
            message="maxNumBatchedTokens %d leaves no room to schedule a token: method %s reserves %d drafting "
            "slots per step (1 for draft_model, K for dflash): give more than %d",
            args=("self.scheduling.maxNumBatchedTokens", "self.speculative.method", DRAFT_SLOTS, DRAFT_SLOTS),
            field_path=".scheduling.maxNumBatchedTokens",
        ),
        Rule(
            id="R11",
            rule=f"!self.scheduling.asyncScheduling || {cel_in('self.speculative.method', ASYNC_SCHEDULING_METHODS)}",
            message="asyncScheduling is only supported with eagle, eagle3, mtp, dflash and draft_model, not %s: "
            "set it to false",
            args=("self.speculative.method",),
            field_path=".scheduling.asyncScheduling",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R11",
            rule="!(self.scheduling.asyncScheduling && self.speculative.disablePaddedDrafterBatch)",
            message="asyncScheduling cannot be combined with speculative.disablePaddedDrafterBatch: "
            "turn one of them off",
            field_path=".scheduling.asyncScheduling",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R13",
            rule="self.parallelism.pipeline == 1",
            message="pipeline %d given, but vLLM does not compose pipeline parallelism with speculative decoding: "
            "set 1 and use tensor or data parallelism",
            args=("self.parallelism.pipeline",),
            field_path=".parallelism.pipeline",
        ),
    )

    def effective_k(self) -> int:
        """K as rendered, by the same expression the CRD rules use."""
        return int(evaluate(K, self.dump()))

    def capture_sizes(self) -> list[int]:
        """The capture sizes to render: given, or one decode step per batch size up to maxBatchSize (n x (K+1),
        K being that of batch size n under a schedule)."""
        if self.graph.capture_sizes:
            return list(self.graph.capture_sizes)
        if self.graph.max_batch_size:
            return sorted({int(size) for size in evaluate(COMPUTED_CAPTURE_SIZES, self.dump())})
        return []
