"""How drafts are verified: vLLM's rejection sampling method (and its synthetic mode, for benchmarks),
vLLM-Ascend's Block / Entropy Verify and its dynamic verify budget."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule, cel_in
from specinfer_runtime.methods import DRAFTER_METHODS, MTP_NAMES
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS, K


class RejectionSamplerConfig(Section):
    """vLLM-Ascend rejection sampler options; both trade a little precision for throughput."""

    block_verify: bool = Field(
        default=False,
        description="Verify the drafts as one block by cumulative probability (vLLM-Ascend: "
        "`rejection_sampler_config.enable_block_verify`); useful from numSpeculativeTokens 3 on.",
    )
    entropy_verify: bool = Field(
        default=False,
        description="Entropy-adjusted acceptance threshold (vLLM-Ascend: "
        "`rejection_sampler_config.enable_entropy_verify`).",
    )
    posterior_threshold: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="Upper bound of the entropy-adjusted threshold, in (0, 1] (vLLM-Ascend: `posterior_threshold`).",
    )
    posterior_alpha: float = Field(
        default=0.4,
        ge=0,
        le=100,
        description="How strongly entropy lowers the threshold; 0 disables the effect "
        "(vLLM-Ascend: `posterior_alpha`).",
    )


RejectionSampleMethod = Literal["standard", "block", "synthetic", "fly"]


class DynamicVerification(Section):
    """vLLM-Ascend's confidence-scheduled verification for dspark and dflash (`additional_config`
    `dynamic_spec_config`): each request verifies a budget of draft tokens that follows the drafts' measured
    survival, instead of all K."""

    initial_verify_budget_per_request: int = Field(
        default=5,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description="Draft tokens a new request verifies, at most K (vLLM-Ascend: `initial_verify_budget_per_req`).",
    )
    budget_update_interval: int = Field(
        default=16,
        ge=1,
        le=1_000_000,
        description="Steps between two updates of the budgets (vLLM-Ascend: `budget_update_interval`).",
    )
    budget_threshold: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="Positions are verified while the drafts' cumulative survival probability stays above "
        "this, in (0, 1] (vLLM-Ascend: `budget_threshold`).",
    )
    min_verify_tokens: int = Field(
        default=1,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description="Fewest draft tokens a request verifies (vLLM-Ascend: `min_verify_tokens`).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R26",
            rule="self.minVerifyTokens <= self.initialVerifyBudgetPerRequest",
            message="minVerifyTokens %d exceeds initialVerifyBudgetPerRequest %d: the budget starts at least at "
            "the minimum; lower minVerifyTokens or raise the initial budget",
            args=("self.minVerifyTokens", "self.initialVerifyBudgetPerRequest"),
            field_path=".minVerifyTokens",
        ),
    )


_SYNTHETIC = "(has(self.rejectionSampleMethod) && self.rejectionSampleMethod == 'synthetic')"
_RATES = "self.syntheticAcceptanceRates"
_LENGTH = "self.syntheticAcceptanceLength"

_LOSSY_SAMPLER = (
    "(has(self.rejectionSampler) && (self.rejectionSampler.blockVerify || self.rejectionSampler.entropyVerify))"
)

_CONSENT = "(has(self.allowLossyVerification) && self.allowLossyVerification)"

SPECULATIVE_RULES = (
    Rule(
        id="R31",
        rule="!has(self.rejectionSampleMethod) || self.rejectionSampleMethod != 'fly'",
        message="rejectionSampleMethod fly is vLLM's FLy (lossy, entropy-gated, from vLLM 0.33), which vLLM-Ascend "
        "does not run: it verifies with its own rejection sampler. For entropy-gated lossy verification on Ascend "
        "set rejectionSampler.entropyVerify true with allowLossyVerification true, or remove rejectionSampleMethod",
        field_path=".rejectionSampleMethod",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R30",
        rule=f"!has(self.draftSampleMethod) || {cel_in('self.method', (*DRAFTER_METHODS, *MTP_NAMES))}",
        message="draftSampleMethod is how a drafter model samples its drafts, and method %s has none: remove it",
        args=("self.method",),
        field_path=".draftSampleMethod",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R30",
        rule="!has(self.draftSampleMethod) || self.draftSampleMethod == 'greedy' || self.method != 'dspark'",
        message="vLLM-Ascend's dspark drafter samples greedily only (it refuses probabilistic): set "
        "draftSampleMethod greedy, or remove it",
        field_path=".draftSampleMethod",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R29",
        rule=f"!({_SYNTHETIC} || {_LOSSY_SAMPLER}) || {_CONSENT}",
        message="%s: the output is then no longer exactly the target model's: set allowLossyVerification true to "
        "accept that, or verify with the standard rejection sampler",
        args=(
            f"{_SYNTHETIC} ? 'rejectionSampleMethod synthetic accepts drafts at set rates without checking them' : "
            "'rejectionSampler blockVerify and entropyVerify accept drafts the standard sampler would reject'",
        ),
        field_path=".allowLossyVerification",
        reason="FieldValueRequired",
    ),
    Rule(
        id="R24",
        rule=f"!{_SYNTHETIC} || has({_RATES}) != has({_LENGTH})",
        message="rejectionSampleMethod synthetic accepts drafts at set rates instead of checking them: give "
        "exactly one of syntheticAcceptanceRates (per draft position) or syntheticAcceptanceLength (the mean "
        "tokens per step)",
        field_path=".rejectionSampleMethod",
    ),
    Rule(
        id="R24",
        rule=f"!(has({_RATES}) || has({_LENGTH})) || {_SYNTHETIC}",
        message="syntheticAcceptanceRates and syntheticAcceptanceLength only apply with rejectionSampleMethod "
        "synthetic (rejectionSampleMethod is %s): set it to synthetic, or remove them",
        args=("has(self.rejectionSampleMethod) ? self.rejectionSampleMethod : 'standard'",),
        field_path=".rejectionSampleMethod",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R24",
        rule=f"!has({_RATES}) || {_RATES}.map(r, 0.0 - r).isSorted()",
        message="syntheticAcceptanceRates %s rise from one position to a later one: each is the chance that "
        "the drafts up to that position are all accepted, so they cannot increase",
        args=(_RATES,),
        field_path=".syntheticAcceptanceRates",
    ),
    Rule(
        id="R26",
        rule="!has(self.dynamicVerification) || self.method in ['dspark', 'dflash']",
        message="dynamicVerification is vLLM-Ascend's verify budget for dspark and dflash drafts, not for method "
        "%s: remove dynamicVerification",
        args=("self.method",),
        field_path=".dynamicVerification",
        reason="FieldValueForbidden",
    ),
)

# On the engine spec: the synthetic rates and the verify budget against K.
ENGINE_RULES = (
    Rule(
        id="R24",
        rule=f"!has(self.speculative.syntheticAcceptanceRates) || self.speculative.syntheticAcceptanceRates.size() "
        f"== {K}",
        message="syntheticAcceptanceRates has %d entries; it takes one per draft position, K = %d",
        args=("self.speculative.syntheticAcceptanceRates.size()", K),
        field_path=".speculative.syntheticAcceptanceRates",
    ),
    Rule(
        id="R24",
        rule=f"!has(self.speculative.syntheticAcceptanceLength) || self.speculative.syntheticAcceptanceLength "
        f"<= double({K} + 1)",
        message="syntheticAcceptanceLength %s exceeds K+1 = %d, the most tokens a step can yield: set a value "
        "from 1 to %d",
        args=("self.speculative.syntheticAcceptanceLength", f"{K} + 1", f"{K} + 1"),
        field_path=".speculative.syntheticAcceptanceLength",
    ),
    Rule(
        id="R26",
        rule=f"!has(self.speculative.dynamicVerification) "
        f"|| self.speculative.dynamicVerification.initialVerifyBudgetPerRequest <= {K}",
        message="dynamicVerification.initialVerifyBudgetPerRequest %d exceeds numSpeculativeTokens %d: a request "
        "cannot verify more drafts than are proposed; lower it",
        args=("self.speculative.dynamicVerification.initialVerifyBudgetPerRequest", K),
        field_path=".speculative.dynamicVerification.initialVerifyBudgetPerRequest",
    ),
)
