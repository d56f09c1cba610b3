"""The engine container: its image, environment, extra mounts, resources and probe timings.

The operator owns the container's command, arguments, ports, its own volumes and the probe endpoints;
what is set here is merged under them. Mounts may not land on or around the operator's paths (the
engine config, the models, the caches), so no mount can replace what the operator validated.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import AfterValidator, Field, model_validator

from specinfer_operator.api.engine import EngineVersions
from specinfer_operator.api.quantities import Bytes, Cores, not_below
from specinfer_runtime import multinode, samples
from specinfer_runtime.base import Section, list_map
from specinfer_runtime.celrules import Rule, cel_list
from specinfer_runtime.names import DNS_LABEL, DNS_SUBDOMAIN, ENV_NAME
from specinfer_runtime.samples import SAMPLES_PATH
from specinfer_runtime.sources import (
    DRAFT_TOKEN_ENV,
    HF_HOME_ENV,
    HF_TOKEN_ENV,
    HIDDEN_STATES_PATH,
    MODEL_ROOT,
    exactly_one,
)

ENGINE_CONTAINER = "engine"  # the container of the engine pods that runs specinfer-runtime and vLLM
CONFIG_DIR = "/etc/specinfer"
HF_HOME = "/var/cache/huggingface"
# The operator's volumes: no volume of the pod template may take these names.
OPERATOR_VOLUMES = ("engine-config", "shm", "model-target", "model-draft", "hf-cache", "hidden-states", "learning")
# Where the operator mounts them in the engine container: no other mount may land on, in or above these.
OPERATOR_PATHS = (CONFIG_DIR, "/dev/shm", MODEL_ROOT, HF_HOME, HIDDEN_STATES_PATH, SAMPLES_PATH)
# Environment variables the operator sets itself, and where their values come from.
RESERVED_ENV = {
    HF_TOKEN_ENV: "from model.source.huggingFace.tokenSecretRef",
    DRAFT_TOKEN_ENV: "from speculative.draftModel.source.huggingFace.tokenSecretRef",
    HF_HOME_ENV: "its model cache",
    multinode.POD_IP_ENV: "the pod's IP, in a group over several nodes",
    **dict.fromkeys(
        (multinode.LEADER_ADDRESS_ENV, multinode.GROUP_SIZE_ENV, multinode.WORKER_INDEX_ENV), "by LeaderWorkerSet"
    ),
    **dict.fromkeys(
        (samples.DIR_ENV, samples.PERCENT_ENV, samples.MAX_BYTES_ENV, samples.RETENTION_ENV, samples.POD_ENV),
        "from spec.learning",
    ),
}
MAX_MOUNTS = 16
PullPolicy = Literal["Always", "IfNotPresent", "Never"]  # a container's imagePullPolicy


def _by_source() -> dict[str, list[str]]:
    """The reserved variables grouped by where their values come from, as R18's message lists them."""
    grouped: dict[str, list[str]] = {}
    for name, source in RESERVED_ENV.items():
        grouped.setdefault(source, []).append(name)
    return grouped


ObjectName = Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]
# A path inside a volume: relative, no '..' (Kubernetes refuses both).
RELATIVE_PATH = r"^[^/\x00][^\x00]*$"
ABSOLUTE_PATH = r"^(/[^/\x00]+)+$"


def no_parent(field: str) -> Rule:
    return Rule(
        id="kubernetes",
        rule=f"!has(self.{field}) || !self.{field}.matches('(^|/)[.][.](/|$)')",
        message=f"{field} may not contain '..' (Kubernetes refuses it)",
        field_path=f".{field}",
    )


IMAGE_TRIMMED = Rule(
    id="kubernetes",
    rule="!has(self.image) || self.image == self.image.trim()",
    message="image %s has leading or trailing whitespace, which Kubernetes refuses: remove it",
    args=("self.image",),
    field_path=".image",
)


class KeySelector(Section):
    """A key of a Secret or ConfigMap in the namespace (core/v1 SecretKeySelector, ConfigMapKeySelector)."""

    name: ObjectName = Field(description="Name of the Secret or ConfigMap.")
    key: str = Field(max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="The key.")
    optional: bool | None = Field(default=None, description="Start the pod even when the key is missing.")


class FieldSelector(Section):
    """A field of the pod (core/v1 ObjectFieldSelector): the ones the downward API offers to env."""

    field_path: str = Field(
        max_length=317,
        pattern=r"^(metadata\.(name|namespace|uid|labels\['[^']+'\]|annotations\['[^']+'\])|"
        r"spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$",
        description="e.g. status.podIP, metadata.name, metadata.labels['app'].",
    )


class EnvVarSource(Section):
    """Where an environment variable's value comes from (core/v1 EnvVarSource)."""

    secret_key_ref: KeySelector | None = Field(default=None, description="A key of a Secret, e.g. VLLM_API_KEY.")
    config_map_key_ref: KeySelector | None = Field(default=None, description="A key of a ConfigMap.")
    field_ref: FieldSelector | None = Field(default=None, description="A field of the pod.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        exactly_one(("secretKeyRef", "configMapKeyRef", "fieldRef"), "value source"),
    )


class EnvVar(Section):
    """An environment variable (core/v1 EnvVar)."""

    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=ENV_NAME,
        description="Name: printable ASCII characters other than '='.",
    )
    value: str = Field(default="", max_length=4096, description="Value.")
    value_from: EnvVarSource | None = Field(
        default=None, description="Instead of value: a Secret, ConfigMap or pod field."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="kubernetes",
            rule="self.value == '' || !has(self.valueFrom)",
            message="value and valueFrom both set %s: keep one",
            args=("self.name",),
            field_path=".valueFrom",
        ),
    )

    def render(self) -> dict[str, object]:
        out = self.dump()
        if self.value_from is not None:
            del out["value"]
        return out


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def _distinct_names(items: list[_N]) -> list[_N]:
    """Refuse a repeated name, as the API server does for a list keyed by name."""
    seen: set[str] = set()
    for item in items:
        if item.name in seen:
            raise ValueError(f'Duplicate value: {{"name":"{item.name}"}}')
        seen.add(item.name)
    return items


EnvList = Annotated[list[EnvVar], AfterValidator(_distinct_names)]


class PullSecret(Section):
    """A Secret of registry credentials, as a Pod's imagePullSecrets names one (LocalObjectReference)."""

    name: ObjectName = Field(description="Name of the Secret (type kubernetes.io/dockerconfigjson).")

    @model_validator(mode="before")
    @classmethod
    def _not_a_bare_name(cls, data: Any) -> Any:
        """The field once took bare names: say how to write one now, rather than only that an object was due."""
        if isinstance(data, str):
            raise ValueError(
                f'Invalid value: "{data}": must be of type object, as in a Pod\'s imagePullSecrets: write '
                f"[{{name: {data}}}] instead of [{data}]"
            )
        return data


MAX_PULL_SECRETS = 16
PullSecretList = Annotated[list[PullSecret], AfterValidator(_distinct_names)]


class NamedReference(Section):
    """A Secret or ConfigMap in the namespace."""

    name: ObjectName = Field(description="Its name.")
    optional: bool | None = Field(default=None, description="Start the pod even when it is missing.")


class EnvFromSource(Section):
    """Every key of a Secret or ConfigMap as environment variables (core/v1 EnvFromSource)."""

    prefix: str | None = Field(default=None, max_length=128, pattern=ENV_NAME, description="Prepended to each key.")
    config_map_ref: NamedReference | None = Field(default=None, description="The ConfigMap.")
    secret_ref: NamedReference | None = Field(default=None, description="The Secret.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (exactly_one(("configMapRef", "secretRef"), "environment source"),)


class VolumeMount(Section):
    """A volume of spec.podTemplate.spec.volumes mounted into a container (core/v1 VolumeMount)."""

    name: str = Field(max_length=63, pattern=DNS_LABEL, description="The volume's name.")
    mount_path: str = Field(
        max_length=512, pattern=ABSOLUTE_PATH, description="Absolute path in the container, without a trailing /."
    )
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    sub_path: str | None = Field(
        default=None, max_length=512, pattern=RELATIVE_PATH, description="Relative path inside the volume."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (no_parent("mountPath"), no_parent("subPath"))


# A mount at, inside or above one of the operator's paths would hide or replace what it mounts there.
_CLEAR = " && ".join(
    f"m.mountPath != '{p}' && !m.mountPath.startsWith('{p}/') && !'{p}'.startsWith(m.mountPath + '/')"
    for p in OPERATOR_PATHS
)


class RuntimeSettings(Section):
    """The engine container: the image that runs specinfer-runtime and vLLM-Ascend, and what it gets from
    the pod."""

    image: str | None = Field(
        default=None,
        max_length=512,
        description="Runtime image (vllm-ascend + arctic-inference + specinfer-runtime); the operator's "
        "--runtime-image when unset.",
    )
    engine_versions: EngineVersions | None = Field(
        default=None,
        description="The vLLM and vllm-ascend releases in image (its io.specinfer.engine.* labels): with them, a spec "
        "whose features need later releases is refused at kubectl apply instead of failing in its pods.",
    )
    image_pull_policy: PullPolicy = Field(
        default="IfNotPresent",
        description="Kubernetes imagePullPolicy of image, and of spec.learning.training.image; without an image of "
        "its own the engine runs the operator's default one, pulled by the operator's --runtime-pull-policy.",
    )
    image_pull_secrets: PullSecretList | None = list_map(
        "name",
        MAX_PULL_SECRETS,
        "Secrets of the namespace with the credentials of a private registry (`[{name: regcred}]`, as in a Pod), "
        "used to pull spec.runtime.image, the sidecars' images and spec.learning's training image; the operator's own "
        "(its chart's imagePullSecrets) follow them. The tenant policy's allowedImagePullSecrets lists those "
        "a resource may name.",
    )
    env: EnvList | None = list_map(
        "name",
        64,
        "Extra environment variables of the engine, e.g. VLLM_* or ASCEND_* tuning knobs or VLLM_API_KEY from a "
        f"Secret (valueFrom.secretKeyRef); {', '.join(RESERVED_ENV)} are set by the operator.",
    )
    env_from: list[EnvFromSource] | None = Field(
        default=None,
        max_length=16,
        description="Secrets and ConfigMaps whose keys become environment variables of the engine; env and the "
        "operator's own variables win over them.",
    )
    volume_mounts: list[VolumeMount] | None = list_map(
        "mountPath",
        MAX_MOUNTS,
        "Volumes of spec.podTemplate.spec.volumes mounted into the engine container, e.g. the Ascend driver "
        f"(/usr/local/Ascend/driver), LoRA adapters, chat templates. Not on, in or above {', '.join(OPERATOR_PATHS)}, "
        "where the operator mounts the engine config, the models and the caches.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R18",
            rule=f"!has(self.env) || !self.env.exists(e, e.name in {cel_list(RESERVED_ENV)})",
            message="%s: the operator sets "
            + ", ".join(f"{', '.join(names)} ({source})" for source, names in _by_source().items())
            + ": remove them from env",
            args=(f"self.env.filter(e, e.name in {cel_list(RESERVED_ENV)}).map(e, e.name)",),
            field_path=".env",
            reason="FieldValueForbidden",
        ),
        IMAGE_TRIMMED,
        Rule(
            id="pod",
            rule=f"!has(self.volumeMounts) || self.volumeMounts.all(m, {_CLEAR})",
            message="%s: the operator mounts the engine config, the models and the caches at "
            f"{', '.join(OPERATOR_PATHS)}; mount elsewhere",
            args=(f"self.volumeMounts.filter(m, !({_CLEAR})).map(m, m.mountPath)",),
            field_path=".volumeMounts",
            reason="FieldValueForbidden",
        ),
    )


def _limit_rule(limit: str, request: str) -> Rule:
    return Rule(
        id="kubernetes",
        rule=f"!has(self.{limit}) || !has(self.{request}) || {not_below(f'self.{limit}', f'self.{request}')}",
        message=f"{limit} %s is below the request {request} %s, which Kubernetes refuses: raise {limit}",
        args=(f"self.{limit}", f"self.{request}"),
        field_path=f".{limit}",
    )


class ProbeTiming(Section):
    """Timings of one probe of the engine's /health; the operator's default for each unset one."""

    period_seconds: int | None = Field(default=None, ge=1, le=3600, description="Seconds between probes.")
    timeout_seconds: int | None = Field(default=None, ge=1, le=3600, description="Seconds a probe may take (5).")
    failure_threshold: int | None = Field(default=None, ge=1, le=100000, description="Failures in a row that count.")


class ProbeSettings(Section):
    """How the kubelet checks the engine (its /health endpoint). Model loading takes minutes: the startup
    probe allows an hour by default (360 probes 10 s apart) before liveness takes over."""

    startup: ProbeTiming | None = Field(
        default=None, description="Startup probe; periodSeconds 10, failureThreshold 360 when unset."
    )
    readiness: ProbeTiming | None = Field(
        default=None, description="Readiness probe; periodSeconds 5, failureThreshold 3 when unset."
    )
    liveness: ProbeTiming | None = Field(
        default=None, description="Liveness probe; periodSeconds 15, failureThreshold 4 when unset."
    )


# Extended resource names are qualified names with a domain prefix, like huawei.com/Ascend910.
RESOURCE_NAME = DNS_SUBDOMAIN.removesuffix("$") + "/" + "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class ResourceSettings(Section):
    """What each pod requests from its node. Unset cpu and memory are a share of an Ascend node for each of the
    pod's NPUs (16 CPUs, 64Gi of memory and sharedMemory besides), with limits equal to requests: a Guaranteed
    pod. An unset request is its limit, when that is set. The pod requests the node disk of its downloads as
    ephemeral-storage."""

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
        description="NPUs each pod requests; parallelism.tensor x pipeline x data (divided by parallelism.nodes "
        "when an engine spans nodes) when unset, and never fewer.",
    )
    cpu: Cores | None = Field(
        default=None, description="CPU request of the engine container, and its limit unless cpuLimit is set."
    )
    memory: Bytes | None = Field(
        default=None, description="Memory request of the engine container, and its limit unless memoryLimit is set."
    )
    cpu_limit: Cores | None = Field(default=None, description="CPU limit, when it differs from the request.")
    memory_limit: Bytes | None = Field(default=None, description="Memory limit, when it differs from the request.")
    shared_memory: Bytes = Field(
        default="16Gi",
        description="Size of the in-memory /dev/shm volume (used by the engine's worker processes), counted "
        "against the memory limit.",
    )
    model_cache: Bytes | None = Field(
        default=None,
        description="Size limit of each emptyDir that models are downloaded into from the Hub (the Hub cache, and a "
        "draft's own download directory), whose sum the pods request as ephemeral-storage. When unset: 64Gi per "
        "NPU holding one copy of the weights (tensor x pipeline, x data with expert parallelism). Instead, "
        "modelCacheClaim keeps downloads across restarts.",
    )
    model_cache_claim: ObjectName | None = Field(
        default=None,
        description="A PersistentVolumeClaim that holds the Hub model cache (HF_HOME), so that a restarted pod "
        "does not download the model again. ReadWriteMany when several pods share it, as the pods of an engine "
        "over several nodes (parallelism.nodes) do.",
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
        _limit_rule("cpuLimit", "cpu"),
        _limit_rule("memoryLimit", "memory"),
        Rule(
            id="pod",
            rule="!has(self.modelCache) || !has(self.modelCacheClaim)",
            message="modelCache sizes an emptyDir, modelCacheClaim replaces it with a claim: set one of them",
            field_path=".modelCacheClaim",
        ),
    )
