"""The speculative decoding methods, and the groups of them that vLLM's checks single out."""

from __future__ import annotations

from typing import Literal, get_args

from specinfer_runtime.celrules import Rule, cel_in

MethodName = Literal[
    "ngram",
    "suffix",
    "medusa",
    "eagle",
    "eagle3",
    "mtp",
    "dflash",
    "draft_model",
    "extract_hidden_states",
]
METHODS: tuple[str, ...] = get_args(MethodName)

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
EAGLE_HEAD_METHODS = ("eagle", "eagle3")
# Methods that run a drafter whose batch vLLM pads, and so can use async scheduling.
ASYNC_SCHEDULING_METHODS = ("eagle", "eagle3", *MTP_NAMES, "dflash", "draft_model")
# disablePaddedDrafterBatch changes something only for these; vLLM refuses it for the next ones (a draft
# model and parallel drafting need the padded batch; extract_hidden_states has no drafter).
PADDED_BATCH_METHODS = ("eagle", "eagle3", *MTP_NAMES)
PADDED_BATCH_ONLY_METHODS = ("draft_model", "dflash", "extract_hidden_states")
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
