"""How one engine spreads over a pod's NPUs."""

from __future__ import annotations

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule


class Parallelism(Section):
    """How the engine spreads over NPUs; a pod requests tensor x pipeline x data NPUs."""

    tensor: int = Field(default=1, ge=1, le=64, description="Tensor parallel size (vLLM: `--tensor-parallel-size`).")
    pipeline: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Pipeline parallel size (vLLM: `--pipeline-parallel-size`). Must stay 1: vLLM does not "
            "compose pipeline parallelism with speculative decoding."
        ),
    )
    data: int = Field(default=1, ge=1, le=64, description="Data parallel size (vLLM: `--data-parallel-size`).")
    expert: bool = Field(
        default=False, description="Expert parallelism for MoE models (vLLM: `--enable-expert-parallel`)."
    )

    def npus(self) -> int:
        return self.tensor * self.pipeline * self.data


ENGINE_RULES = (
    Rule(
        id="R13",
        rule="self.parallelism.pipeline == 1",
        message="pipeline %d given, but vLLM does not compose pipeline parallelism with speculative decoding: "
        "set 1 and use tensor or data parallelism",
        args=("self.parallelism.pipeline",),
        field_path=".parallelism.pipeline",
    ),
)
