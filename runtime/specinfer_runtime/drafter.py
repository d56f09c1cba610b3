"""The drafter of the methods that run one: its checkpoint, its tensor parallelism, its batch and parallel
drafting."""

from __future__ import annotations

from pydantic import Field

from specinfer_runtime.celrules import Rule, cel_in, cel_list
from specinfer_runtime.methods import (
    ALWAYS_PARALLEL_METHODS,
    DRAFT_MODEL_METHODS,
    DRAFTER_METHODS,
    EAGLE_HEAD_METHODS,
    METHOD_SWITCHING_NAMES,
    MTP_NAMES,
    PADDED_BATCH_ONLY_METHODS,
    PARALLEL_DRAFTING_METHODS,
)
from specinfer_runtime.sources import ModelReference


class DraftModel(ModelReference):
    """The draft checkpoint (vLLM: `speculative_config.model`) and how vLLM loads it."""

    quantization: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9_][a-z0-9_-]*$",
        description="Weight quantization of the draft (vLLM: `speculative_config.quantization`). vLLM-Ascend "
        "drafts with the target's quantization and ignores this (a warning says so).",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        le=10_485_760,
        description="Context length of the drafter (vLLM: `speculative_config.max_model_len`), at most "
        "model.maxModelLen; the smaller of the two models' lengths when unset. Past it, the drafter stops "
        "proposing and the target decodes alone.",
    )


def parallel_drafting(section: str = "self") -> str:
    """CEL: the speculative section at `section` sets parallelDrafting (unset is false)."""
    return f"(has({section}.parallelDrafting) && {section}.parallelDrafting)"


PARALLEL_DRAFTING = parallel_drafting()

SPECULATIVE_RULES = (
    Rule(
        id="R4",
        rule=f"has(self.draftModel) || !({cel_in('self.method', DRAFT_MODEL_METHODS)})",
        message="method %s needs a draft model: set draftModel.name to the draft checkpoint "
        "(vLLM speculative_config.model)",
        args=("self.method",),
        field_path=".draftModel",
        reason="FieldValueRequired",
    ),
    Rule(
        id="R4",
        rule=f"!has(self.draftModel) || {cel_in('self.method', DRAFTER_METHODS)}",
        message=f"method %s takes no draft model (only {', '.join(DRAFTER_METHODS)} do; mtp reuses the "
        "target model): remove draftModel",
        args=("self.method",),
        field_path=".draftModel",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R5",
        rule="!has(self.draftTensorParallelSize) || self.draftTensorParallelSize == 1 "
        f"|| !({cel_in('self.method', EAGLE_HEAD_METHODS)})",
        message="draftTensorParallelSize %d given, but %s draft heads run without tensor parallelism: "
        "set 1 or leave it unset",
        args=("self.draftTensorParallelSize", "self.method"),
        field_path=".draftTensorParallelSize",
    ),
    Rule(
        id="R5",
        rule=f"!has(self.draftTensorParallelSize) || {cel_in('self.method', (*DRAFTER_METHODS, *MTP_NAMES))}",
        message="method %s runs no draft model: remove draftTensorParallelSize",
        args=("self.method",),
        field_path=".draftTensorParallelSize",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R12",
        rule=f"!self.disablePaddedDrafterBatch || !({cel_in('self.method', PADDED_BATCH_ONLY_METHODS)})",
        message="vLLM runs method %s only with a padded drafter batch (draft models and parallel drafting "
        "need it, extract_hidden_states drafts nothing): remove disablePaddedDrafterBatch",
        args=("self.method",),
        field_path=".disablePaddedDrafterBatch",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R20",
        rule=f"!has(self.draftModel) || !({cel_in('self.method', ('draft_model', 'medusa'))}) || "
        f"!{cel_list(tuple(METHOD_SWITCHING_NAMES))}.exists(s, self.draftModel.name.lowerAscii().contains(s))",
        message="draft model name %s makes vLLM run another method than %s (it switches on names containing "
        + ", ".join(f"'{k}' ({v})" for k, v in METHOD_SWITCHING_NAMES.items())
        + "): set that method if the checkpoint is one, or load it under another name from a volume",
        args=("self.draftModel.name", "self.method"),
        field_path=".draftModel.name",
    ),
    Rule(
        id="R23",
        rule=f"!{PARALLEL_DRAFTING} || {cel_in('self.method', PARALLEL_DRAFTING_METHODS + ALWAYS_PARALLEL_METHODS)}",
        message="parallelDrafting drafts all K tokens in one pass of a drafter trained for it: P-EAGLE heads "
        "(eagle, eagle3) or PARD drafts (draft_model); method %s has no such drafter: remove parallelDrafting",
        args=("self.method",),
        field_path=".parallelDrafting",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R23",
        rule=f"!({PARALLEL_DRAFTING} && self.disablePaddedDrafterBatch)",
        message="vLLM runs parallel drafting only with a padded drafter batch: remove disablePaddedDrafterBatch "
        "or parallelDrafting",
        field_path=".disablePaddedDrafterBatch",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="R27",
        rule=f"!has(self.enforceEager) || {cel_in('self.method', (*DRAFTER_METHODS, *MTP_NAMES))}",
        message="method %s runs no drafter model, so there is no drafter graph to turn off: remove enforceEager",
        args=("self.method",),
        field_path=".enforceEager",
        reason="FieldValueForbidden",
    ),
)

# On the engine spec: the drafter against the target's parallelism.
ENGINE_RULES = (
    Rule(
        id="R5",
        rule="!has(self.speculative.draftTensorParallelSize) || self.speculative.draftTensorParallelSize == 1 "
        "|| self.speculative.draftTensorParallelSize == self.parallelism.tensor "
        "|| self.speculative.method == 'draft_model'",
        message="draftTensorParallelSize %d given; it must be 1 or parallelism.tensor (%d)",
        args=("self.speculative.draftTensorParallelSize", "self.parallelism.tensor"),
        field_path=".speculative.draftTensorParallelSize",
    ),
    Rule(
        id="R5",
        rule="self.speculative.method != 'draft_model' || !has(self.speculative.draftTensorParallelSize) "
        "|| self.speculative.draftTensorParallelSize == self.parallelism.tensor",
        message="draftTensorParallelSize %d given, but vLLM runs a draft_model drafter with the target's tensor "
        "parallel size: set %d (parallelism.tensor) or leave it unset",
        args=("self.speculative.draftTensorParallelSize", "self.parallelism.tensor"),
        field_path=".speculative.draftTensorParallelSize",
    ),
    Rule(
        id="R27",
        rule="!has(self.speculative.draftModel) || !has(self.speculative.draftModel.maxModelLen) "
        "|| !has(self.model.maxModelLen) || self.speculative.draftModel.maxModelLen <= self.model.maxModelLen",
        message="draftModel.maxModelLen %d exceeds model.maxModelLen %d, which vLLM refuses: a draft cannot "
        "look further back than the target; lower it, or leave it unset for the smaller of the two models' lengths",
        args=("self.speculative.draftModel.maxModelLen", "self.model.maxModelLen"),
        field_path=".speculative.draftModel.maxModelLen",
    ),
)
