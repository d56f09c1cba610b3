"""How drafts are verified: vLLM-Ascend's rejection sampler options."""

from __future__ import annotations

from pydantic import Field

from specinfer_runtime.base import Section


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
