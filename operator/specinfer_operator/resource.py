"""The SpeculativeInference custom resource: the engine spec plus how to run it on Kubernetes."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from specinfer_runtime.base import Section, section_field
from specinfer_runtime.celrules import Rule
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.sources import DNS_SUBDOMAIN

GROUP = "specinfer.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeInference"
PLURAL = "speculativeinferences"
SINGULAR = "speculativeinference"
SHORT_NAMES = ("specinference", "specinf")

QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# Extended resource names are qualified names with a domain prefix, like huawei.com/Ascend910.
RESOURCE_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"

Quantity = Annotated[str, Field(max_length=64, pattern=QUANTITY)]


class RuntimeSettings(Section):
    """The container image that runs specinfer-runtime and vLLM-Ascend."""

    image: str | None = Field(
        default=None,
        max_length=512,
        description="Runtime image (vllm-ascend + arctic-inference + specinfer-runtime); the operator's "
        "--runtime-image when unset.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Kubernetes imagePullPolicy of the engine container."
    )
    image_pull_secrets: list[Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]] | None = Field(
        default=None, max_length=16, description="Names of Secrets used to pull the image."
    )
    env: dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        max_length=64,
        description="Extra environment variables of the engine, e.g. VLLM_* or ASCEND_* tuning knobs.",
    )


class ResourceSettings(Section):
    """What each pod requests from the node."""

    npu_resource_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=RESOURCE_NAME,
        description="Extended resource the Ascend device plugin advertises; the operator's "
        "--npu-resource-name (huawei.com/Ascend910) when unset.",
    )
    npus_per_pod: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="NPUs each pod requests; parallelism.tensor x pipeline x data when unset, and never fewer.",
    )
    cpu: Quantity | None = Field(default=None, description="CPU request and limit of the engine container.")
    memory: Quantity | None = Field(default=None, description="Memory request and limit of the engine container.")
    shared_memory: Quantity = Field(
        default="16Gi",
        description="Size of the in-memory /dev/shm volume (used by the engine's worker processes).",
    )


class Toleration(Section):
    """A Kubernetes toleration (core/v1 Toleration)."""

    key: str | None = Field(default=None, max_length=317, description="Taint key; empty matches all keys.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal (default).")
    value: str | None = Field(default=None, max_length=63, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None, description="How long a NoExecute taint is tolerated; forever when unset."
    )


class PlacementSettings(Section):
    """Where the pods may run."""

    node_selector: dict[Annotated[str, Field(max_length=317)], Annotated[str, Field(max_length=63)]] | None = Field(
        default=None, max_length=32, description="Node labels the pods require."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=32, description="Taints the pods tolerate (NPU nodes are often tainted)."
    )
    affinity: dict[str, Any] | None = Field(
        default=None,
        description="A core/v1 Affinity, passed to the pod template as is.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    scheduler_name: str | None = Field(
        default=None, max_length=253, description="Scheduler for the pods, e.g. volcano for gang scheduling."
    )
    priority_class_name: str | None = Field(default=None, max_length=253, description="PriorityClass of the pods.")


class RolloutSettings(Section):
    """How configuration changes roll out. NPUs are scarce: by default one pod is replaced at a time and
    no extra pod is created (a surge pod could never schedule on a full cluster)."""

    max_unavailable: int = Field(default=1, ge=0, le=1000, description="Deployment maxUnavailable (pods).")
    max_surge: int = Field(default=0, ge=0, le=1000, description="Deployment maxSurge (pods).")
    progress_deadline_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="A rollout that makes no progress for this long marks the resource Degraded; model "
        "loading takes minutes, so keep it generous.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="rollout",
            rule="self.maxUnavailable > 0 || self.maxSurge > 0",
            message="maxUnavailable and maxSurge cannot both be 0: no pod could ever be replaced",
            field_path=".maxUnavailable",
        ),
    )


class ServiceSettings(Section):
    """The Service in front of the pods (OpenAI-compatible API)."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(default="ClusterIP", description="Service type.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the Service and of vLLM (vLLM: `--port`).")


_ENGINE_NPUS = "self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.data"


class SpeculativeInferenceSpec(EngineSpec):
    """Desired state of a SpeculativeInference."""

    replicas: int = Field(default=1, ge=0, le=1000, description="Number of engine pods.")
    runtime: RuntimeSettings = section_field(RuntimeSettings, "Runtime image.")
    resources: ResourceSettings = section_field(ResourceSettings, "Per-pod resources.")
    placement: PlacementSettings = section_field(PlacementSettings, "Scheduling constraints.")
    rollout: RolloutSettings = section_field(RolloutSettings, "Rolling update behaviour.")
    service: ServiceSettings = section_field(ServiceSettings, "The Service.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        *EngineSpec.cel_rules,
        Rule(
            id="npus",
            rule=f"!has(self.resources.npusPerPod) || self.resources.npusPerPod >= {_ENGINE_NPUS}",
            message="npusPerPod %d given, but the engine needs tensor x pipeline x data = %d NPUs: "
            "raise it or leave it unset",
            args=("self.resources.npusPerPod", _ENGINE_NPUS),
            field_path=".resources.npusPerPod",
        ),
    )

    def engine(self) -> EngineSpec:
        """The engine part, as the pod's runtime reads it."""
        return EngineSpec.model_validate(self.model_dump(include=set(EngineSpec.model_fields)))

    def npus_per_pod(self) -> int:
        return self.resources.npus_per_pod or self.parallelism.npus()


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; the API server owns the rest."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    namespace: str | None = Field(default=None, max_length=63)
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Condition(Section):
    """A kstatus-style condition."""

    type: str = Field(
        max_length=64,
        description="Ready, Progressing, Degraded, ConfigValid, and their kstatus mirrors Reconciling and Stalled.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", max_length=128, description="CamelCase reason.")
    message: str = Field(default="", max_length=4096, description="Human-readable explanation.")
    observed_generation: int | None = Field(default=None, description="Generation the condition is based on.")
    last_transition_time: str | None = Field(default=None, max_length=64, description="When status last changed.")


class SpeculationStatus(Section):
    """The speculation actually rendered, and how well it works."""

    method: str | None = Field(default=None, max_length=64, description="Method vLLM runs (aliases resolved).")
    num_speculative_tokens: int | None = Field(default=None, description="K as rendered.")
    capture_sizes: list[int] | None = Field(default=None, max_length=64, description="Capture sizes rendered.")
    acceptance_rate: float | None = Field(default=None, description="Accepted / drafted tokens.")
    mean_acceptance_length: float | None = Field(default=None, description="1 + accepted / drafts.")


class SpeculativeInferenceStatus(Section):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        description="Ready, Progressing, Degraded, ConfigValid; Reconciling and Stalled mirror Progressing and "
        "Degraded for kstatus (Flux).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int | None = Field(default=None, description="Pods of the current Deployment.")
    ready_replicas: int | None = Field(default=None, description="Pods that are Ready.")
    updated_replicas: int | None = Field(default=None, description="Pods running the current configuration.")
    ready: str | None = Field(default=None, max_length=32, description="Ready pods out of desired, as `2/2`.")
    speculation: SpeculationStatus | None = Field(default=None, description="Effective speculation.")
    endpoint: str | None = Field(default=None, max_length=512, description="In-cluster URL of the API.")
    config_hash: str | None = Field(default=None, max_length=64, description="Hash of the engine config served.")
    selector: str | None = Field(
        default=None, max_length=1024, description="Label selector of the pods, for the scale subresource."
    )


class SpeculativeInference(Section):
    """Serve an LLM on Ascend NPUs with vLLM-Ascend and speculative decoding."""

    api_version: Literal["specinfer.io/v1alpha1"] = Field(description="specinfer.io/v1alpha1")
    kind: Literal["SpeculativeInference"] = Field(description="SpeculativeInference")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: SpeculativeInferenceSpec = Field(description="Desired state.")
    status: SpeculativeInferenceStatus | None = Field(default=None, description="Observed state.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="name",
            rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            message="metadata.name must be a DNS label of at most 63 characters (lowercase letters, digits "
            "and '-', starting with a letter), because it names the Service",
        ),
    )
