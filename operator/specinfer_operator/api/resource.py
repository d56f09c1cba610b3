"""The SpeculativeInference custom resource: the engine spec plus how to run it on Kubernetes.

Each Kubernetes section lives in a module of its own: container (the engine container and its
resources), podtemplate (the pod overlay), scheduling (placement), rollout_settings, service_settings.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specinfer_operator.api.autoscaling import AutoscalingSettings
from specinfer_operator.api.container import ProbeSettings, ResourceSettings, RuntimeSettings
from specinfer_operator.api.engine import DECLARED_RULES
from specinfer_operator.api.learning import SPEC_RULES as LEARNING_RULES
from specinfer_operator.api.learning import LearningSettings
from specinfer_operator.api.metadata import ObjectMeta
from specinfer_operator.api.overlay import POD_TEMPLATE_KEY_MAPS, PodTemplate
from specinfer_operator.api.placement import PLACEMENT_LABEL_MAPS, PlacementSettings
from specinfer_operator.api.rollout import DisruptionBudget, RolloutSettings
from specinfer_operator.api.service import InferencePoolSettings, ServiceSettings, TelemetrySettings
from specinfer_operator.api.status import SpeculativeInferenceStatus
from specinfer_runtime import passthrough
from specinfer_runtime.base import Section, section_field
from specinfer_runtime.celrules import Rule, map_keys
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.names import QUALIFIED_NAME_FORMAT, qualified_name
from specinfer_runtime.parallelism import NPUS

GROUP = "specinfer.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeInference"
PLURAL = "speculativeinferences"
SHORT_NAMES = ("specinference", "specinf")


# An engine over several nodes runs as the LeaderWorkerSet `<name>-group` (workload.object_name). The longest
# resource name whose LeaderWorkerSet names stay within Kubernetes' limits: the canary's `<name>-group-canary`,
# then its StatefulSets' `-<group>` (up to 4 characters), whose revision label adds `-<hash>` (11), in 63.
GROUP_SUFFIX = "-group"
MAX_GROUP_NAME = 63 - len(f"{GROUP_SUFFIX}-canary") - 4 - 11
_POD_NPUS = f"({NPUS}) / (has(self.parallelism.nodes) ? self.parallelism.nodes : 1)"


class SpeculativeInferenceSpec(EngineSpec):
    """Desired state of a SpeculativeInference."""

    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Number of engines: pods, or groups of parallelism.nodes pods when an engine spans nodes. With "
        "autoscaling, the autoscaler writes it (leave it out of what GitOps applies).",
    )
    autoscaling: AutoscalingSettings | None = Field(
        default=None,
        description="A HorizontalPodAutoscaler that sets replicas from the engines' queue, KV-cache use and the "
        "decode speed requests get; none when unset, and replicas is then yours to set.",
    )
    runtime: RuntimeSettings = section_field(RuntimeSettings, "Runtime image.")
    resources: ResourceSettings = section_field(ResourceSettings, "Per-pod resources.")
    placement: PlacementSettings = section_field(PlacementSettings, "Scheduling constraints.")
    rollout: RolloutSettings = section_field(RolloutSettings, "Rolling update behaviour.")
    service: ServiceSettings = section_field(ServiceSettings, "The Service.")
    telemetry: TelemetrySettings = section_field(TelemetrySettings, "Acceptance measured from the engines.")
    probes: ProbeSettings | None = Field(default=None, description="Timings of the engine's health probes.")
    pod_template: PodTemplate | None = Field(
        default=None,
        description="Volumes, sidecars, labels, annotations and pod settings merged under the operator's pod "
        "template; the operator's own fields win.",
    )
    disruption_budget: DisruptionBudget | None = Field(
        default=None,
        description="A PodDisruptionBudget over the engine pods. Unset, one of maxUnavailable 1 once the resource "
        "may run two engines or more (replicas, or autoscaling.maxReplicas); `enabled: false` turns it off.",
    )
    inference_pool: InferencePoolSettings | None = Field(
        default=None,
        description="An InferencePool named like this resource (Gateway API Inference Extension) over its serving "
        "pods, stable and canary, on the engine port; none when unset, `inferencePool: {}` takes every default. "
        "Without the extension's CRD the engines serve through the Service and the InferencePool condition says so.",
    )

    learning: LearningSettings | None = Field(
        default=None,
        description="Drafts that learn from the traffic they serve: the engines record a share of the prompts on "
        "a claim of the namespace, a Job trains the draft in force on them, and the trained draft serves once its "
        "canary is not slower. Off when unset.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        *EngineSpec.cel_rules,
        *DECLARED_RULES,
        *LEARNING_RULES,
        Rule(
            id="npus",
            rule=f"!has(self.resources.npusPerPod) || self.resources.npusPerPod >= {_POD_NPUS}",
            message="npusPerPod %d given, but each pod of the engine needs tensor x pipeline x data / nodes = %d "
            "NPUs: raise it or leave it unset",
            args=("self.resources.npusPerPod", _POD_NPUS),
            field_path=".resources.npusPerPod",
        ),
        Rule(
            id="tuning",
            rule="!has(self.speculative.tuning) || self.speculative.tuning.mode != 'Auto' "
            "|| self.rollout.strategy == 'Canary'",
            message="tuning.mode Auto tries each new K on a canary and reverts it when slower: set "
            "rollout.strategy Canary, or use mode Recommend",
            field_path=".speculative.tuning.mode",
        ),
        Rule(
            id="tuning",
            rule="!has(self.speculative.tuning) || self.speculative.tuning.mode == 'Off' || self.telemetry.enabled",
            message="tuning.mode %s works from the figures telemetry measures, which telemetry.enabled false turns "
            "off: enable telemetry or set mode Off",
            args=("self.speculative.tuning.mode",),
            field_path=".speculative.tuning.mode",
        ),
        Rule(
            id="pod",
            rule="!has(self.runtime.volumeMounts) || self.runtime.volumeMounts.all(m, has(self.podTemplate) "
            "&& has(self.podTemplate.spec) && has(self.podTemplate.spec.volumes) "
            "&& self.podTemplate.spec.volumes.exists(v, v.name == m.name))",
            message="a volumeMount names a volume that is not in podTemplate.spec.volumes: add it there",
            field_path=".runtime.volumeMounts",
        ),
        Rule(
            id="canary",
            rule="self.rollout.strategy != 'Canary' || self.telemetry.enabled",
            message="rollout.strategy Canary judges the canary by the acceptance telemetry measures, which "
            "telemetry.enabled false turns off: enable telemetry or use strategy RollingUpdate",
            field_path=".rollout.strategy",
        ),
    )

    def engine(self) -> EngineSpec:
        """The engine part, as the pod's runtime reads it."""
        engine = self.model_dump(include=set(EngineSpec.model_fields), exclude={"speculative": {"tuning"}})
        return EngineSpec.model_validate(engine)

    def several(self) -> bool:
        """Whether the resource may run two engines or more: now (replicas), or once the autoscaler scales it."""
        return self.replicas >= 2 or (self.autoscaling is not None and self.autoscaling.max_replicas >= 2)

    def npus_per_pod(self) -> int:
        return self.resources.npus_per_pod or self.parallelism.npus_per_node()


def label_map_keys(path: str) -> Rule:
    """Keys of the label or annotation map at `path` are qualified names (inside a list, `[]`, no single
    map can be named in the message)."""
    lead = "" if "[]" in path else "Invalid value: %s: "
    return map_keys(
        "kubernetes",
        f"object.{path}",
        qualified_name("k"),
        f"{lead}keys must be qualified names: {QUALIFIED_NAME_FORMAT}",
        path.replace("[]", "[*]"),
    )


ADMISSION_RULES = (
    *(label_map_keys(f"spec.placement.{p}") for p in PLACEMENT_LABEL_MAPS),
    *(label_map_keys(f"spec.podTemplate.{p}") for p in POD_TEMPLATE_KEY_MAPS),
    label_map_keys("spec.service.annotations"),
    *passthrough.admission_rules("object.spec"),
)


class SpeculativeInference(Section):
    """Serve an LLM on Ascend NPUs with vLLM-Ascend and speculative decoding."""

    api_version: Literal["specinfer.io/v1alpha1"] = Field(description="specinfer.io/v1alpha1")
    kind: Literal["SpeculativeInference"] = Field(description="SpeculativeInference")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: SpeculativeInferenceSpec = Field(description="Desired state.")
    status: SpeculativeInferenceStatus | None = Field(default=None, description="Observed state.")

    admission_rules: ClassVar[tuple[Rule, ...]] = ADMISSION_RULES
    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="name",
            rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            message="metadata.name must be a DNS label of at most 63 characters (lowercase letters, digits "
            "and '-', starting with a letter), because it names the Service",
        ),
        Rule(
            id="name",
            rule="!has(self.spec.parallelism) || !has(self.spec.parallelism.nodes) || self.spec.parallelism.nodes == 1 "
            f"|| size(self.metadata.name) <= {MAX_GROUP_NAME}",
            message=f"metadata.name must be at most {MAX_GROUP_NAME} characters when parallelism.nodes is above 1: "
            "LeaderWorkerSet names its StatefulSets and pods after it (<name>-group-canary-<group>-<rank>)",
        ),
    )
