"""DSpark: block drafting (DFlash-style parallel drafts refined by a sequential head), for Qwen3 drafts
and DeepSeek-V4 checkpoints that carry the drafter."""

from __future__ import annotations

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.graph import FULL_MODE
from specinfer_runtime.methods import section_only_for


class DSparkConfig(Section):
    """Settings of method dspark."""

    draft_top_k: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Candidates the Markov head keeps per position (vLLM: `dspark_draft_topk`); Qwen3 DSpark "
        "drafts only, at most the draft's vocabulary size.",
    )
    adaptive_verification: bool = Field(
        default=False,
        description="Verify only as many drafts per request as their confidence warrants (vLLM: "
        "`enable_adaptive_verification`); needs a full graph mode, vLLM's V2 model runner (vLLM >= 0.28) and "
        "vllm-ascend >= 0.28.0rc1. On older vLLM-Ascend, dynamicVerification is the equivalent.",
    )


SPECULATIVE_RULES = (section_only_for("dspark", ("dspark",), "dspark"),)

ENGINE_RULES = (
    Rule(
        id="R25",
        rule=f"!has(self.speculative.dspark) || !self.speculative.dspark.adaptiveVerification || ({FULL_MODE})",
        message="dspark.adaptiveVerification replays full graphs with a varying number of drafts per request, "
        "so vLLM needs a full graph mode: set graph.mode to FULL, FULL_DECODE_ONLY or FULL_AND_PIECEWISE, or "
        "turn adaptiveVerification off",
        field_path=".speculative.dspark.adaptiveVerification",
    ),
    Rule(
        id="R25",
        rule="!has(self.speculative.dspark) || !self.speculative.dspark.adaptiveVerification "
        "|| !has(self.engineArgs) "
        "|| !self.engineArgs.exists(a, a == '--enable-lora' || a.startsWith('--enable-lora='))",
        message="dspark.adaptiveVerification does not run with LoRA adapters (vLLM's adaptive verification "
        "refuses --enable-lora): remove --enable-lora from engineArgs, or turn adaptiveVerification off",
        field_path=".speculative.dspark.adaptiveVerification",
    ),
)
