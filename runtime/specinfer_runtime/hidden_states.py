"""extract_hidden_states: no drafting; each step saves the target's hidden states to train EAGLE drafters."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.methods import section_only_for
from specinfer_runtime.sources import StorageVolume


class HiddenStatesConfig(Section):
    """Hidden-state extraction (training data for EAGLE drafters)."""

    layer_ids: Annotated[
        list[Annotated[int, Field(ge=0, le=1024)]],
        Field(
            min_length=1,
            max_length=64,
            description="Layers whose hidden states are saved "
            "(vLLM: `draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids`).",
        ),
    ]
    storage: StorageVolume = Field(
        description="Volume the `.safetensors` files are written to "
        "(vLLM: `kv_connector_extra_config.shared_storage_path` of the ExampleHiddenStatesConnector)."
    )


SPECULATIVE_RULES = (
    section_only_for("hiddenStates", ("extract_hidden_states",), "extract_hidden_states"),
    Rule(
        id="R9",
        rule="has(self.hiddenStates) || self.method != 'extract_hidden_states'",
        message="extract_hidden_states needs hiddenStates.layerIds and hiddenStates.storage",
        field_path=".hiddenStates",
        reason="FieldValueRequired",
    ),
    Rule(
        id="R9",
        rule="!has(self.numSpeculativeTokens) || self.numSpeculativeTokens == 1 "
        "|| self.method != 'extract_hidden_states'",
        message="numSpeculativeTokens %d given, but extract_hidden_states drafts nothing: set 1 or leave it unset",
        args=("self.numSpeculativeTokens",),
        field_path=".numSpeculativeTokens",
    ),
)
