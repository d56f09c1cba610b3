"""The SpeculativeInference custom resource: the engine spec plus how to run it on Kubernetes."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from specinfer_operator.metadata import ObjectMeta
from specinfer_operator.resource_status import SpeculativeInferenceStatus
from specinfer_operator.scheduling import AFFINITY_LABEL_MAPS, Affinity, LabelMap, Toleration
from specinfer_runtime.base import Section, section_field
from specinfer_runtime.celrules import Rule, along, cel_list
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.names import DNS_SUBDOMAIN, ENV_NAME, QUALIFIED_NAME_FORMAT, qualified_name
from specinfer_runtime.sources import DRAFT_TOKEN_ENV, HF_HOME_ENV, HF_TOKEN_ENV

GROUP = "specinfer.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeInference"
PLURAL = "speculativeinferences"
SINGULAR = "speculativeinference"
SHORT_NAMES = ("specinference", "specinf")

QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# Extended resource names are qualified names with a domain prefix, like huawei.com/Ascend910.
RESOURCE_NAME = DNS_SUBDOMAIN.removesuffix("$") + "/" + "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
# Environment variables the operator sets itself, and where their values come from.
RESERVED_ENV = {
    HF_TOKEN_ENV: "from model.source.huggingFace.tokenSecretRef",
    DRAFT_TOKEN_ENV: "from speculative.draftModel.source.huggingFace.tokenSecretRef",
    HF_HOME_ENV: "its model cache",
}


class EnvVar(Section):
    """An environment variable of the engine container (core/v1 EnvVar)."""

    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=ENV_NAME,
        description="Name: printable ASCII characters other than '='.",
    )
    value: str = Field(default="", max_length=4096, description="Value.")


def _distinct_names(env: list[EnvVar]) -> list[EnvVar]:
    """Refuse a repeated name, as the API server does for a list keyed by name."""
    seen: set[str] = set()
    for var in env:
        if var.name in seen:
            raise ValueError(f'Duplicate value: {{"name":"{var.name}"}}')
        seen.add(var.name)
    return env


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
    env: Annotated[list[EnvVar], AfterValidator(_distinct_names)] | None = Field(
        default=None,
        max_length=64,
        description="Extra environment variables of the engine, e.g. VLLM_* or ASCEND_* tuning knobs, as "
        f"[{{name, value}}]; {', '.join(RESERVED_ENV)} are set by the operator.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R18",
            rule=f"!has(self.env) || !self.env.exists(e, e.name in {cel_list(RESERVED_ENV)})",
            message="%s: the operator sets "
            + ", ".join(f"{name} ({source})" for name, source in RESERVED_ENV.items())
            + ": remove them from env",
            args=(f"self.env.filter(e, e.name in {cel_list(RESERVED_ENV)}).map(e, e.name)",),
            field_path=".env",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="kubernetes",
            rule="!has(self.image) || self.image == self.image.trim()",
            message="image %s has leading or trailing whitespace, which Kubernetes refuses: remove it",
            args=("self.image",),
            field_path=".image",
        ),
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

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="kubernetes",
            rule="!has(self.npuResourceName) || (!self.npuResourceName.startsWith('requests.') "
            "&& size(self.npuResourceName.split('/')[0]) <= 244)",
            message="npuResourceName %s is not an extended resource name Kubernetes accepts (a domain of at most "
            "244 characters not starting with requests., '/', a name): use the device plugin's name, e.g. "
            "huawei.com/Ascend910",
            args=("self.npuResourceName",),
            field_path=".npuResourceName",
        ),
    )


class PlacementSettings(Section):
    """Where the pods may run."""

    node_selector: LabelMap | None = Field(default=None, max_length=32, description="Node labels the pods require.")
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=32, description="Taints the pods tolerate (NPU nodes are often tainted)."
    )
    affinity: Affinity | None = Field(default=None, description="Node and pod affinity of the pods (core/v1 Affinity).")
    scheduler_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Scheduler for the pods, e.g. volcano for gang scheduling.",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="PriorityClass of the pods."
    )


class CanarySettings(Section):
    """The canary of `strategy: Canary`: how many pods try a new configuration first, and the acceptance
    it must show before it reaches the others."""

    replicas: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Pods that run the new configuration first (at most spec.replicas); 1 unless percent is set.",
    )
    percent: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="The canary as a share of spec.replicas, rounded up to whole pods; instead of replicas.",
    )
    min_draft_tokens: int = Field(
        default=2000,
        ge=1,
        le=1_000_000_000,
        description="Draft tokens the canary (and the stable pods it is compared with) must have proposed in "
        "the telemetry window before it is judged: a few drafts are no evidence.",
    )
    max_mean_acceptance_length_drop: float = Field(
        default=0.25,
        ge=0,
        le=15,
        description="Tolerance: the canary is promoted when its mean acceptance length (tokens per "
        "verification step) is at most this much below the stable pods', and rolled back otherwise.",
    )
    max_speed_drop_percent: int = Field(
        default=2,
        ge=0,
        le=100,
        description="A canary that changes K alone (tuning, or numSpeculativeTokens edited) drafts fewer or more "
        "tokens by design, so it is judged on speed instead: promoted when its requests decode at most this "
        "many percent slower (tokens per step over step time) than the stable pods', rolled back otherwise.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="canary",
            rule="!has(self.replicas) || !has(self.percent)",
            message="replicas %d and percent %d both size the canary: set one of them",
            args=("self.replicas", "self.percent"),
            field_path=".percent",
        ),
    )

    def size(self, replicas: int) -> int:
        """Pods of the canary out of `replicas`: at least one, at most all of them."""
        wanted = -(-replicas * self.percent // 100) if self.percent is not None else self.replicas or 1
        return max(1, min(wanted, replicas))


class RolloutSettings(Section):
    """How configuration changes roll out. NPUs are scarce: by default one pod is replaced at a time and
    no extra pod is created (a surge pod could never schedule on a full cluster)."""

    max_unavailable: int = Field(default=1, ge=0, le=1000, description="Deployment maxUnavailable (pods).")
    max_surge: int = Field(default=0, ge=0, le=1000, description="Deployment maxSurge (pods).")
    progress_deadline_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="A rollout that makes no progress for this long has failed (see onFailure); model "
        "loading takes minutes, so keep it generous.",
    )
    on_failure: Literal["Rollback", "Halt"] = Field(
        default="Rollback",
        description="When a new configuration's pods fail (crash-loop, refused by the runtime's preflight, "
        "image or config errors) or its rollout misses progressDeadlineSeconds: Rollback restores the last "
        "configuration that served on every replica and does not try this spec again until it changes; Halt "
        "leaves the failed pods in place for a person to look at. Either way the resource is Degraded.",
    )
    strategy: Literal["RollingUpdate", "Canary"] = Field(
        default="RollingUpdate",
        description="RollingUpdate replaces the pods in place. Canary first moves canary.replicas pods to the "
        "new configuration behind the same Service, compares their acceptance with the stable pods' (or, "
        "when every pod is in the canary, with the last good configuration's figures) and promotes it or "
        "rolls it back. A first rollout, and a change of replicas alone, roll out directly.",
    )
    canary: CanarySettings = section_field(CanarySettings, "The canary of strategy Canary.")

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


class TelemetrySettings(Section):
    """How the operator measures speculation from the engines' own `/metrics` (vLLM's spec-decode counters)."""

    enabled: bool = Field(default=True, description="Scrape the engines and report status.speculation.observed.")
    interval_seconds: int | None = Field(
        default=None,
        ge=5,
        le=3600,
        description="Seconds between scrapes of each pod; the operator's --scrape-interval (30) when unset.",
    )
    window_seconds: int = Field(
        default=300,
        ge=60,
        le=86400,
        description="The figures are increases over this many seconds, not lifetime totals: a collapse shows "
        "within one window.",
    )
    min_mean_acceptance_length: float = Field(
        default=1.5,
        ge=1,
        le=15,
        description="LowAcceptance is True while the window's mean acceptance length (tokens per verification "
        "step, 1 + accepted / drafts) is below this: speculation then costs more than it gives.",
    )
    min_drafts: int = Field(
        default=100,
        ge=1,
        le=1_000_000_000,
        description="Drafts the window must hold before LowAcceptance is judged: a few drafts are no evidence.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="telemetry",
            rule="!has(self.intervalSeconds) || self.intervalSeconds * 2 <= self.windowSeconds",
            message="windowSeconds %d holds fewer than two scrapes every intervalSeconds %d: raise windowSeconds "
            "or lower intervalSeconds",
            args=("self.windowSeconds", "self.intervalSeconds"),
            field_path=".windowSeconds",
        ),
    )


_ENGINE_NPUS = "self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.data"


class SpeculativeInferenceSpec(EngineSpec):
    """Desired state of a SpeculativeInference."""

    replicas: int = Field(default=1, ge=0, le=1000, description="Number of engine pods.")
    runtime: RuntimeSettings = section_field(RuntimeSettings, "Runtime image.")
    resources: ResourceSettings = section_field(ResourceSettings, "Per-pod resources.")
    placement: PlacementSettings = section_field(PlacementSettings, "Scheduling constraints.")
    rollout: RolloutSettings = section_field(RolloutSettings, "Rolling update behaviour.")
    service: ServiceSettings = section_field(ServiceSettings, "The Service.")
    telemetry: TelemetrySettings = section_field(TelemetrySettings, "Acceptance measured from the engines.")

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

    def npus_per_pod(self) -> int:
        return self.resources.npus_per_pod or self.parallelism.npus()


def label_map_keys(path: str) -> Rule:
    """Keys of the label map at `path` are qualified names. A CRD schema cannot bound the size of map keys,
    so CEL in the CRD could not afford this check: the admission policy makes it (see crd.py)."""
    listed = "[]" in path
    target = f"object.{path}"
    return Rule(
        id="kubernetes",
        rule=along(target, lambda m: f"{m}.all(k, {qualified_name('k')})"),
        message=("" if listed else "Invalid value: %s: ") + f"keys must be qualified names: {QUALIFIED_NAME_FORMAT}",
        args=() if listed else (f"{target}.filter(k, !{qualified_name('k')})",),
        field_path=path.replace("[]", "[*]"),
    )


ADMISSION_RULES = (
    label_map_keys("spec.placement.nodeSelector"),
    *(label_map_keys(f"spec.placement.affinity.{p}") for p in AFFINITY_LABEL_MAPS),
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
    )
