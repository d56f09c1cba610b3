"""The scheduler: batch limits, and async scheduling, which only padded drafter batches allow."""

from __future__ import annotations

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule, cel_in
from specinfer_runtime.drafter import parallel_drafting
from specinfer_runtime.methods import ALWAYS_PARALLEL_METHODS, ASYNC_SCHEDULING_METHODS
from specinfer_runtime.tokens import K


class SchedulingConfig(Section):
    """Scheduler settings."""

    async_scheduling: bool = Field(
        default=False,
        description="Overlap scheduling with execution (vLLM: `--async-scheduling`); only with eagle, "
        "eagle3, mtp, dflash, dspark, draft_model and ngram_gpu, and not with disablePaddedDrafterBatch.",
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


# Token slots vLLM reserves for drafting in every step (SpeculativeConfig.max_num_new_slots_for_drafting): K for
# dflash and PARD, K-1 for the other parallel drafters (P-EAGLE, dspark), 1 for a draft model, else none.
_PARALLEL = f"({parallel_drafting('self.speculative')} || {cel_in('self.speculative.method', ALWAYS_PARALLEL_METHODS)})"
DRAFT_SLOTS = (
    f"(self.speculative.method == 'dflash' ? {K} : {_PARALLEL} ? "
    f"(self.speculative.method == 'draft_model' ? {K} : {K} - 1) : "
    "self.speculative.method == 'draft_model' ? 1 : 0)"
)

# On the engine spec: the scheduler against the method.
ENGINE_RULES = (
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
        "slots per step (1 for draft_model, K for dflash and PARD, K-1 for dspark and P-EAGLE): give more than %d",
        args=("self.scheduling.maxNumBatchedTokens", "self.speculative.method", DRAFT_SLOTS, DRAFT_SLOTS),
        field_path=".scheduling.maxNumBatchedTokens",
    ),
    Rule(
        id="R11",
        rule=f"!self.scheduling.asyncScheduling || {cel_in('self.speculative.method', ASYNC_SCHEDULING_METHODS)}",
        message="asyncScheduling is only supported with eagle, eagle3, mtp, dflash, dspark, draft_model and "
        "ngram_gpu, not %s: set it to false",
        args=("self.speculative.method",),
        field_path=".scheduling.asyncScheduling",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R11",
        rule="!(self.scheduling.asyncScheduling && self.speculative.disablePaddedDrafterBatch)",
        message="asyncScheduling cannot be combined with speculative.disablePaddedDrafterBatch: turn one of them off",
        field_path=".scheduling.asyncScheduling",
        reason="FieldValueForbidden",
    ),
)
