"""The speculative decoding section (vLLM: `--speculative-config`): the method, K, and each method's own
settings. The rules of a method live in its module (ngram, suffix, hidden_states, drafter); the ones that
span sections are on the engine spec."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specinfer_runtime import drafter, hidden_states, ngram, schedule, suffix, tokens, tuning_settings
from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.hidden_states import HiddenStatesConfig
from specinfer_runtime.methods import MTP_ALIASES, MethodName, MtpAlias
from specinfer_runtime.ngram import NgramConfig
from specinfer_runtime.sampling import RejectionSamplerConfig
from specinfer_runtime.schedule import Schedule
from specinfer_runtime.sources import ModelReference
from specinfer_runtime.suffix import SuffixConfig
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS
from specinfer_runtime.tuning_settings import TuningSettings

# Each method's rules are kept with its settings (the fields below shadow the modules).
_RULES = (
    *tokens.SPECULATIVE_RULES,
    *drafter.SPECULATIVE_RULES,
    *schedule.SPECULATIVE_RULES,
    *tuning_settings.SPECULATIVE_RULES,
    *ngram.SPECULATIVE_RULES,
    *suffix.SPECULATIVE_RULES,
    *hidden_states.SPECULATIVE_RULES,
)


class SpeculativeConfig(Section):
    """The speculative decoding method and its parameters (vLLM: `--speculative-config`)."""

    method: Literal[MethodName, MtpAlias] = Field(
        description=(
            "Proposer (vLLM: `method`): ngram, suffix (Arctic Inference), medusa, eagle, eagle3, mtp, "
            "dflash, draft_model or extract_hidden_states. vLLM's model-specific MTP names "
            "(deepseek_mtp, ...) are accepted and rendered as mtp."
        )
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description=(
            "Tokens drafted per step, K (vLLM: `num_speculative_tokens`). At most 14 on Ascend, where a "
            "decode round verifies at most K+1 = 15 tokens. Required except for suffix (defaults to "
            "min(suffix.maxTreeDepth, 14)), mtp and extract_hidden_states (default 1)."
        ),
    )
    draft_model: ModelReference | None = Field(
        default=None,
        description="The draft checkpoint (vLLM: `model`); required for eagle, eagle3, dflash, medusa and "
        "draft_model, refused for the others.",
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
    rejection_sampler: RejectionSamplerConfig | None = Field(
        default=None,
        description="Block Verify / Entropy Verify (vLLM-Ascend: `--additional-config` `rejection_sampler_config`).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = _RULES

    def effective_method(self) -> str:
        """The method vLLM runs: model-specific MTP names are its aliases of mtp."""
        return "mtp" if self.method in MTP_ALIASES else self.method
