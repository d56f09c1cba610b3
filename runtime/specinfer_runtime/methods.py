"""The speculative decoding methods, and the groups of them that vLLM's checks single out."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from specinfer_runtime.base import ValueRules
from specinfer_runtime.celrules import Rule, cel_in, cel_list

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
# Every name the schema takes: the methods, vLLM's MTP aliases, and arctic, which R1 refuses saying what to use.
METHOD_NAMES: tuple[str, ...] = (*METHODS, *MTP_ALIASES, *get_args(RefusedMethod))
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


# For "did you mean": each method with the names that suggest it (mtp's aliases suggest mtp).
_NAMES = {m: [m, *(MTP_ALIASES if m == "mtp" else ())] for m in METHODS}


def _suggestion(alike: str) -> str:
    """CEL: ': did you mean M?' for the first method M one of whose names is `alike` (a CEL condition on the name,
    written NAME, and its first three letters, PREFIX), else '.'. Only literals come out: the API server refuses a
    message it cannot bound, as one built by join() or concatenation would be."""
    chain = "".join(
        "("
        + " || ".join(alike.replace("NAME", f"'{n}'").replace("PREFIX", f"'{n[:3]}'") for n in names)
        + f") ? ': did you mean {m}?' : "
        for m, names in _NAMES.items()
    )
    return chain + "'.'"


# The method the name is like: one inside the other (eagle in eagle4, suffix in suffix_decoding, deepseek_mtp in
# deepseek_mtp_v2) or the same first three letters (sufix, medussa), compared with the method's own prefix: a
# substring of the given name would fail on one shorter than three characters (and evaluators count them apart).
_SUGGESTION = _suggestion(
    "(size(self) >= 3 && (NAME.contains(self) || self.contains(NAME))) || self.startsWith(PREFIX)"
)
UNKNOWN_METHOD = Rule(
    id="R1",
    rule=f"self in {cel_list(METHOD_NAMES)}",
    message='method "%s" is unknown%s Set it to one of: '
    + ", ".join(METHODS)
    + " (vLLM's model-specific MTP names, such as deepseek_mtp, are taken as mtp).",
    args=("self", _SUGGESTION),
)
# A method name: the CRD has no enum of them, whose refusal would list every alias and arctic, and skip the rules
# that say more; UNKNOWN_METHOD says which method was probably meant, at kubectl apply as in Python.
Method = Annotated[str, Field(min_length=1, max_length=32), ValueRules((UNKNOWN_METHOD,))]


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
