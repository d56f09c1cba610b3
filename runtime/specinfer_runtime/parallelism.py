"""How one engine spreads over NPUs: within a pod, or over a group of pods on several nodes."""

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
    nodes: int | None = Field(
        default=None,
        ge=1,
        le=32,
        description=(
            "Nodes one engine spans, one pod on each, for models larger than a node (e.g. tensor 16 on 8-NPU "
            "nodes: nodes 2). Each replica then runs as a LeaderWorkerSet group: the leader serves the API, the "
            "other pods join it headless (vLLM: `--nnodes`, `--node-rank`, `--master-addr`, `--headless`, set "
            "per pod by specinfer-runtime), and each pod holds tensor x pipeline x data / nodes NPUs. Needs "
            "LeaderWorkerSet in the cluster. 1 when unset."
        ),
    )

    def npus(self) -> int:
        """NPUs of one engine, over all its nodes."""
        return self.tensor * self.pipeline * self.data

    def group_size(self) -> int:
        """Pods (nodes) per engine."""
        return self.nodes or 1

    def npus_per_node(self) -> int:
        return self.npus() // self.group_size()


NPUS = "self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.data"

ENGINE_RULES = (
    Rule(
        id="R28",
        rule=f"!has(self.parallelism.nodes) || ({NPUS}) % self.parallelism.nodes == 0",
        message="nodes %d given, but the engine's tensor x pipeline x data = %d NPUs do not split evenly over "
        "them (vLLM: --nnodes must divide the world size): choose nodes that divide it",
        args=("self.parallelism.nodes", NPUS),
        field_path=".parallelism.nodes",
    ),
    Rule(
        id="R28",
        rule="!has(self.parallelism.nodes) || self.parallelism.nodes == 1 || self.parallelism.data == 1 "
        "|| !has(self.speculative.hiddenStates) || !has(self.speculative.hiddenStates.storage.hostPath)",
        message="with data parallelism across nodes, the first tensor rank of each data-parallel engine writes "
        "the hidden states on its own node, so a hostPath would split them between nodes: use a "
        "ReadWriteMany persistentVolumeClaim, or data 1",
        field_path=".speculative.hiddenStates.storage.hostPath",
    ),
    Rule(
        id="R13",
        rule="self.parallelism.pipeline == 1",
        message="pipeline %d given, but vLLM does not compose pipeline parallelism with speculative decoding: "
        "set 1 and use tensor or data parallelism",
        args=("self.parallelism.pipeline",),
        field_path=".parallelism.pipeline",
    ),
)
