"""The engine configuration: what vLLM and vLLM-Ascend accept, and the rules they impose.

These models are the `spec` of a SpeculativeInference minus its Kubernetes parts. The operator
renders them into the pod's engine config; the runtime reads that config back with the same models.
Each section and its rules live in a module of their own; this one puts them together.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from specinfer_runtime import (
    drafter,
    dspark,
    flags,
    graph,
    k_by_batch,
    parallelism,
    passthrough,
    sampling,
    scheduler,
    tuning,
)
from specinfer_runtime.base import CelRules, Section, section_field
from specinfer_runtime.celrules import Rule, evaluate
from specinfer_runtime.graph import GraphConfig
from specinfer_runtime.k_by_batch import COMPUTED_CAPTURE_SIZES
from specinfer_runtime.parallelism import Parallelism
from specinfer_runtime.scheduler import SchedulingConfig
from specinfer_runtime.sources import TargetModel
from specinfer_runtime.speculative import SpeculativeConfig
from specinfer_runtime.tokens import K

# vLLM listens here inside the pod; spec.service.port is the Service's port.
ENGINE_PORT = 8000
# The address vLLM listens on instead of every interface: the pod's own IP where several engines share a
# network namespace (hostNetwork pods on one node, a local cluster with simulated pods).
LISTEN_ADDRESS_ENV = "SPECINFER_LISTEN_ADDRESS"


EngineArg = Annotated[
    str,
    Field(min_length=1, max_length=256),
    CelRules(
        (
            Rule(
                id="R15",
                rule=f"!{flags.SHADOWS_OWNED}",
                message="%s: remove it from engineArgs (vLLM reads --a_b as --a-b, --flag=value and --flag.key as "
                "--flag, and a prefix of a flag as the flag)",
                args=(flags.DESCRIBE,),
                reason="FieldValueForbidden",
            ),
        )
    ),
]


# The rules that span sections, each kept with the section it is about (the fields below shadow the modules).
_RULES = (
    *drafter.ENGINE_RULES,
    *graph.ENGINE_RULES,
    *k_by_batch.ENGINE_RULES,
    *tuning.ENGINE_RULES,
    *scheduler.ENGINE_RULES,
    *parallelism.ENGINE_RULES,
    *sampling.ENGINE_RULES,
    *dspark.ENGINE_RULES,
)


class EngineSpec(Section):
    """Everything the vLLM engine in each pod is started with."""

    model: TargetModel = Field(description="The served (target) model.")
    parallelism: Parallelism = section_field(Parallelism, "Parallelism of each engine (one pod).")
    speculative: SpeculativeConfig = Field(description="Speculative decoding (vLLM: `--speculative-config`).")
    graph: GraphConfig = section_field(GraphConfig, "Graph capture (vLLM: `--compilation-config`).")
    scheduling: SchedulingConfig = section_field(SchedulingConfig, "Scheduler settings.")
    engine_args: list[EngineArg] | None = Field(
        default=None,
        max_length=64,
        description=(
            'Extra `vllm serve` arguments, appended verbatim (e.g. ["--seed", "1024"]). Flags the '
            "operator renders from the spec (model, port, parallelism, --speculative-config, "
            "--compilation-config, --additional-config, ...) are refused here: their other keys go in "
            "compilationConfig and additionalConfig."
        ),
    )
    compilation_config: passthrough.Options | None = passthrough.options_field(
        "vLLM's `--compilation-config`", "e.g. custom_ops, pass_config, compile_sizes"
    )
    additional_config: passthrough.Options | None = passthrough.options_field(
        "vLLM-Ascend's `--additional-config`", "e.g. ascend_compilation_config, eplb_config, enable_cpu_binding"
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = _RULES
    admission_rules: ClassVar[tuple[Rule, ...]] = passthrough.admission_rules("object")

    def effective_k(self) -> int:
        """K as rendered, by the same expression the CRD rules use."""
        return int(evaluate(K, self.dump()))

    def capture_sizes(self) -> list[int]:
        """The capture sizes to render: given, or one decode step per batch size up to maxBatchSize (n x (K+1),
        K being that of batch size n under a schedule)."""
        if self.graph.capture_sizes:
            return list(self.graph.capture_sizes)
        if self.graph.max_batch_size:
            return sorted({int(size) for size in evaluate(COMPUTED_CAPTURE_SIZES, self.dump())})
        return []
