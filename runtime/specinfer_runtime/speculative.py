"""The speculative decoding section (vLLM: `--speculative-config`): the method, K, and each method's own
settings. The rules of a method live in its module (ngram, suffix, hidden_states, drafter); the ones that
span sections are on the engine spec."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from specinfer_runtime import (
    drafter,
    dspark,
    hidden_states,
    k_by_batch,
    methods,
    ngram,
    sampling,
    suffix,
    tokens,
    tuning,
)
from specinfer_runtime.base import EDITOR_ENUM, Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.drafter import DraftModel
from specinfer_runtime.dspark import DSparkConfig
from specinfer_runtime.hidden_states import HiddenStatesConfig
from specinfer_runtime.k_by_batch import Schedule
from specinfer_runtime.methods import METHOD_NAMES, MTP_ALIASES, Method
from specinfer_runtime.ngram import NgramConfig
from specinfer_runtime.sampling import DynamicVerification, RejectionSampleMethod, RejectionSamplerConfig
from specinfer_runtime.suffix import SuffixConfig
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS
from specinfer_runtime.tuning import TuningSettings

AcceptanceRates = Annotated[
    list[Annotated[float, Field(ge=0, le=1)]], Field(min_length=1, max_length=ASCEND_MAX_SPECULATIVE_TOKENS)
]

# Each method's rules are kept with its settings (the fields below shadow the modules).
_RULES = (
    *methods.SPECULATIVE_RULES,
    *tokens.SPECULATIVE_RULES,
    *drafter.SPECULATIVE_RULES,
    *k_by_batch.SPECULATIVE_RULES,
    *tuning.SPECULATIVE_RULES,
    *ngram.SPECULATIVE_RULES,
    *suffix.SPECULATIVE_RULES,
    *hidden_states.SPECULATIVE_RULES,
    *dspark.SPECULATIVE_RULES,
    *sampling.SPECULATIVE_RULES,
)


class SpeculativeConfig(Section):
    """The speculative decoding method and its parameters (vLLM: `--speculative-config`)."""

    method: Method = Field(
        description=(
            "Proposer (vLLM: `method`): ngram, ngram_gpu (prompt lookup on the device), suffix (Arctic "
            "Inference), medusa, eagle, eagle3, mtp, dflash, dspark, draft_model or extract_hidden_states. "
            "vLLM's model-specific MTP names (deepseek_mtp, ...) are accepted and rendered as mtp; arctic is "
            "refused (vLLM-Ascend does not load it: use suffix)."
        ),
        json_schema_extra={EDITOR_ENUM: list(METHOD_NAMES)},
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description=(
            "Tokens drafted per step, K (vLLM: `num_speculative_tokens`). At most 14: vLLM-Ascend's attention "
            "verifies K+1 tokens per decode round, up to 16 on current releases and 15 on those up to v0.24.0rc1, "
            "so 14 runs on every release the operator supports. Required except for suffix (defaults to "
            "min(suffix.maxTreeDepth, 14)), mtp and extract_hidden_states (default 1)."
        ),
    )
    draft_model: DraftModel | None = Field(
        default=None,
        description="The draft checkpoint (vLLM: `model`); required for eagle, eagle3, dflash, medusa and "
        "draft_model, optional for dspark (DeepSeek-V4 checkpoints carry their drafter), refused for the others.",
    )
    draft_tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description=(
            "Tensor parallel size of the drafter (vLLM: `draft_tensor_parallel_size`): 1 or "
            "parallelism.tensor. EAGLE heads run with 1, which is rendered when unset."
        ),
    )
    disable_padded_drafter_batch: bool = Field(
        default=False,
        description="Let drafter batches hold sequences of different lengths (vLLM: "
        "`disable_padded_drafter_batch`); only eagle, eagle3, mtp, dflash, draft_model and "
        "extract_hidden_states use it.",
    )
    parallel_drafting: bool | None = Field(
        default=None,
        description="Draft all K tokens in one forward pass (vLLM: `parallel_drafting`): P-EAGLE heads for eagle "
        "and eagle3, PARD drafts for draft_model; the checkpoint must be trained for it (a mask token in its "
        "config). dflash and dspark always draft in parallel.",
    )
    enforce_eager: bool | None = Field(
        default=None,
        description="Run the drafter without graphs (vLLM: `speculative_config.enforce_eager`); the target's "
        "graph settings (graph.mode) otherwise apply to it.",
    )
    rejection_sample_method: RejectionSampleMethod | None = Field(
        default=None,
        description="How vLLM verifies drafts (vLLM: `rejection_sample_method`): standard (lossless rejection "
        "sampling), block (block verification; vLLM-Ascend ignores it and has its own, rejectionSampler."
        "blockVerify) or synthetic (accepts drafts at set rates without checking them: output quality is lost, "
        "for benchmarking the speed of an acceptance profile). fly (vLLM's FLy) is refused: vLLM-Ascend does not "
        "run it. Standard when unset.",
    )
    draft_sample_method: Literal["greedy", "probabilistic"] | None = Field(
        default=None,
        description="How a draft model samples its tokens (vLLM: `draft_sample_method`): greedy (the argmax, "
        "treated as one-hot by the rejection sampler) or probabilistic (from the draft's distribution, whose full "
        "logits the sampler then uses: more acceptance at temperature > 0, more memory). vLLM's greedy when unset. "
        "For methods with a drafter model; vLLM-Ascend's dspark drafts greedily only.",
    )
    synthetic_acceptance_rates: (
        Annotated[
            list[Annotated[float, Field(ge=0, le=1)]], Field(min_length=1, max_length=ASCEND_MAX_SPECULATIVE_TOKENS)
        ]
        | None
    ) = Field(
        default=None,
        description="With rejectionSampleMethod synthetic: for each draft position, the chance that the drafts "
        "up to it are all accepted (vLLM: `synthetic_acceptance_rates`); K values, not increasing.",
    )
    synthetic_acceptance_length: float | None = Field(
        default=None,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS + 1,
        description="With rejectionSampleMethod synthetic, instead of the rates: the mean tokens per step, from "
        "1 to K+1 (vLLM: `synthetic_acceptance_length`; vLLM spreads it over the positions).",
    )
    num_speculative_tokens_per_batch_size: Schedule | None = Field(
        default=None,
        description=(
            "K by batch size (vLLM: `num_speculative_tokens_per_batch_size`, rendered as [[min, max, K], ...]): "
            "verifying K+1 tokens per sequence costs more as batches grow, so large batches often do best with "
            "a smaller K, or none. Ranges are inclusive, listed in order without overlap, the first starting "
            "at batch size 1; a batch size between two ranges, or beyond the last, keeps the K before it. "
            "numSpeculativeTokens stays the largest K."
        ),
    )
    tuning: TuningSettings | None = Field(
        default=None,
        description="Tuning K from measured acceptance and step time (operator only, not rendered for vLLM).",
    )
    ngram: NgramConfig | None = Field(default=None, description="Settings of method ngram.")
    suffix: SuffixConfig | None = Field(default=None, description="Settings of method suffix.")
    hidden_states: HiddenStatesConfig | None = Field(
        default=None, description="Settings of method extract_hidden_states (required there)."
    )
    dspark: DSparkConfig | None = Field(default=None, description="Settings of method dspark.")
    dynamic_verification: DynamicVerification | None = Field(
        default=None,
        description="vLLM-Ascend's dynamic verify budget for dspark and dflash (`--additional-config` "
        "`dynamic_spec_config`).",
    )
    rejection_sampler: RejectionSamplerConfig | None = Field(
        default=None,
        description="Block Verify / Entropy Verify (vLLM-Ascend: `--additional-config` `rejection_sampler_config`).",
    )
    allow_lossy_verification: bool | None = Field(
        default=None,
        description="Consent to verification whose output is no longer exactly the target model's: "
        "rejectionSampleMethod synthetic (accepts drafts at set rates, for benchmarks) and rejectionSampler's "
        "blockVerify or entropyVerify (vLLM-Ascend: they trade a little precision for throughput). Refused without "
        "it (unset is false); not passed to vLLM.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = _RULES

    def effective_method(self) -> str:
        """The method vLLM runs: model-specific MTP names are its aliases of mtp."""
        return "mtp" if self.method in MTP_ALIASES else self.method
