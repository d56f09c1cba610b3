"""Graph capture (ACL graphs on Ascend): in the full modes a decode step of n sequences verifying K+1 tokens
each has a fixed shape, so the capture sizes depend on K."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from specinfer_runtime.base import Section, unique
from specinfer_runtime.celrules import Rule, cel_in, cel_list
from specinfer_runtime.tokens import SCHEDULE, K

GraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
FULL_GRAPH_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


# Distinct token counts; in the CRD `x-kubernetes-list-type: set` refuses duplicates the same way.
CaptureSizes = Annotated[
    list[Annotated[int, Field(ge=1, le=16384)]],
    AfterValidator(unique),
    Field(json_schema_extra={"x-kubernetes-list-type": "set"}),
]


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


# Batch sizes whose capture sizes the rules and the renderer enumerate (CEL has no range): graph.maxBatchSize
# stops here, and an explicit list of at most 64 sizes cannot cover more batch sizes than that.
MAX_GRAPH_BATCH = 64
BATCHES = cel_list(range(1, MAX_GRAPH_BATCH + 1))
FULL_MODE = f"has(self.graph.mode) && {cel_in('self.graph.mode', FULL_GRAPH_MODES)}"

# On the engine spec: capture sizes against K and the scheduler's batch (R22 checks them under a schedule).
ENGINE_RULES = (
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
        id="R6",
        rule=f"!has(self.scheduling.maxNumBatchedTokens) || !({FULL_MODE}) "
        f"|| self.scheduling.maxNumBatchedTokens >= {K} + 1",
        message="scheduling.maxNumBatchedTokens %d is below K+1 = %d, the tokens of one sequence's decode step in "
        "graph mode %s (numSpeculativeTokens %d), so no capture size fits in it and vLLM refuses to start (No valid "
        "cudagraph sizes after rounding to multiple of K+1): raise maxNumBatchedTokens to %d or more, lower "
        "numSpeculativeTokens, or set graph.mode PIECEWISE",
        args=("self.scheduling.maxNumBatchedTokens", f"{K} + 1", "self.graph.mode", K, f"{K} + 1"),
        field_path=".scheduling.maxNumBatchedTokens",
    ),
    Rule(
        id="R6",
        rule="!has(self.graph.maxBatchSize) || !has(self.scheduling.maxNumSeqs) "
        "|| self.graph.maxBatchSize <= self.scheduling.maxNumSeqs",
        message="maxBatchSize %d exceeds scheduling.maxNumSeqs %d; lower it or raise maxNumSeqs",
        args=("self.graph.maxBatchSize", "self.scheduling.maxNumSeqs"),
        field_path=".graph.maxBatchSize",
    ),
)
