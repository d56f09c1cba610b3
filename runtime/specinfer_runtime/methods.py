"""The speculative decoding methods, and the groups of them that vLLM's checks single out."""

from __future__ import annotations

from typing import Literal, get_args

from specinfer_runtime.celrules import Rule, cel_in

MethodName = Literal[
    "ngram",
    "ngram_gpu",
    "suffix",
    "medusa",
    "eagle",
    "eagle3",
    "mtp",
    "dflash",
    "dspark",
    "draft_model",
    "extract_hidden_states",
]
METHODS: tuple[str, ...] = get_args(MethodName)

# Arctic Inference's own method: vLLM only knows it with Arctic's patches of the GPU model runner, and
# vLLM-Ascend's proposer dispatcher raises "Unknown speculative decoding method: arctic". The schema takes
# the name so that a rule can say what to use instead of a bare enum error.
RefusedMethod = Literal["arctic"]

# Model-specific MTP names that vLLM still accepts and rewrites to "mtp" with a deprecation warning.
MtpAlias = Literal[
    "deepseek_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "ernie_mtp",
    "exaone_moe_mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
]
MTP_ALIASES: tuple[str, ...] = get_args(MtpAlias)
MTP_NAMES = ("mtp", *MTP_ALIASES)
DRAFT_MODEL_METHODS = ("eagle", "eagle3", "dflash", "medusa", "draft_model")
# Methods that may take a draft checkpoint: dspark's is separate for Qwen3 and inside the target for DeepSeek-V4.
DRAFTER_METHODS = (*DRAFT_MODEL_METHODS, "dspark")
EAGLE_HEAD_METHODS = ("eagle", "eagle3")
# Methods that run a drafter whose batch vLLM pads, and so can use async scheduling.
ASYNC_SCHEDULING_METHODS = ("eagle", "eagle3", *MTP_NAMES, "dflash", "dspark", "draft_model", "ngram_gpu")
# Parallel drafting (all K drafts in one forward pass): P-EAGLE for EAGLE heads, PARD for draft models; dflash
# and dspark always draft in parallel.
PARALLEL_DRAFTING_METHODS = ("eagle", "eagle3", "draft_model")
ALWAYS_PARALLEL_METHODS = ("dflash", "dspark")
# disablePaddedDrafterBatch changes something only for these; vLLM refuses it for the next ones (a draft
# model and parallel drafting need the padded batch; extract_hidden_states has no drafter).
PADDED_BATCH_METHODS = ("eagle", "eagle3", *MTP_NAMES)
PADDED_BATCH_ONLY_METHODS = ("draft_model", *ALWAYS_PARALLEL_METHODS, "extract_hidden_states")
# vLLM switches a draft_model or medusa drafter to another method when its model name contains these.
METHOD_SWITCHING_NAMES = {"eagle-": "eagle", "eagle3": "eagle3", "dflash": "dflash", "dspark": "dspark"}


def section_only_for(field: str, methods: tuple[str, ...], label: str) -> Rule:
    """The rule that a method's own settings appear only with that method."""
    return Rule(
        id="method-section",
        rule=f"!has(self.{field}) || {cel_in('self.method', methods)}",
        message=f"{field} only applies to method {label}, not %s; remove {field}",
        args=("self.method",),
        field_path=f".{field}",
        reason="FieldValueForbidden",
    )


SPECULATIVE_RULES = (
    Rule(
        id="R1",
        rule="self.method != 'arctic'",
        message="method arctic is Arctic Inference's own proposer, which vLLM only runs with Arctic's patches "
        "of its GPU model runner; vLLM-Ascend refuses it (Unknown speculative decoding method: arctic). For "
        "Arctic's suffix decoding set method suffix (vLLM-Ascend runs it with arctic-inference in the image)",
        field_path=".method",
        reason="FieldValueForbidden",
    ),
)
