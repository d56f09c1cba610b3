"""The drafter of the methods that run one: its checkpoint, its tensor parallelism and its batch."""

from __future__ import annotations

from specinfer_runtime.celrules import Rule, cel_in, cel_list
from specinfer_runtime.methods import (
    DRAFT_MODEL_METHODS,
    EAGLE_HEAD_METHODS,
    METHOD_SWITCHING_NAMES,
    MTP_NAMES,
    PADDED_BATCH_ONLY_METHODS,
)

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
        rule=f"!has(self.draftModel) || {cel_in('self.method', DRAFT_MODEL_METHODS)}",
        message=f"method %s takes no draft model (only {', '.join(DRAFT_MODEL_METHODS)} do; mtp reuses the "
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
        rule=f"!has(self.draftTensorParallelSize) || {cel_in('self.method', (*DRAFT_MODEL_METHODS, *MTP_NAMES))}",
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
)
