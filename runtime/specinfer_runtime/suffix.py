"""Suffix decoding (Arctic Inference): drafts from suffix trees of this request's and earlier outputs."""

from __future__ import annotations

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.methods import section_only_for
from specinfer_runtime.tokens import SUFFIX_DEFAULT_TREE_DEPTH


class SuffixConfig(Section):
    """Suffix decoding (Arctic Inference) settings; the runtime image must carry arctic-inference."""

    max_tree_depth: int = Field(
        default=SUFFIX_DEFAULT_TREE_DEPTH,
        ge=1,
        le=1024,
        description=(
            "Depth of the suffix trees, which caps the tokens drafted per step "
            "(vLLM: `suffix_decoding_max_tree_depth`). When numSpeculativeTokens is unset the "
            "operator renders min(maxTreeDepth, 14)."
        ),
    )
    max_cached_requests: int = Field(
        default=10000,
        ge=0,
        le=10_000_000,
        description="Requests whose outputs stay in the global suffix cache; 0 disables it "
        "(vLLM: `suffix_decoding_max_cached_requests`).",
    )
    max_spec_factor: float = Field(
        default=1.0,
        ge=0,
        le=1000,
        description="Drafts at most max_spec_factor x the matched prefix length "
        "(vLLM: `suffix_decoding_max_spec_factor`).",
    )
    min_token_prob: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Drafted tokens need at least this estimated probability (vLLM: `suffix_decoding_min_token_prob`).",
    )


SPECULATIVE_RULES = (section_only_for("suffix", ("suffix",), "suffix"),)
