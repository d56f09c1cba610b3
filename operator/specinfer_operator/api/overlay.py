"""The pod template overlay: what a cluster needs in the engine pods beyond the engine itself.

Volumes (driver host paths, LoRA adapters, chat templates), sidecars, pod labels and annotations
(Volcano queues, Prometheus), the service account, runtime class and termination grace. It is merged
under the operator's own fields, which win: the selector labels, the config-hash annotation, the
engine container (set through spec.runtime), the operator's volumes and spec.placement. Typed after
core/v1, with the checks Kubernetes applies, so that the API server refuses a bad overlay at
`kubectl apply` rather than at the operator's apply.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from specinfer_operator.api.container import (
    IMAGE_TRIMMED,
    MAX_MOUNTS,
    OPERATOR_VOLUMES,
    RELATIVE_PATH,
    EnvFromSource,
    EnvList,
    ObjectName,
    VolumeMount,
    no_parent,
)
from specinfer_operator.api.labels import JOB_POD_LABELS
from specinfer_operator.api.placement import INT_BOUND, AnnotationMap, LabelMap
from specinfer_operator.api.quantities import Bytes, Cores, not_below
from specinfer_runtime.base import Section, list_map
from specinfer_runtime.celrules import Rule, cel_list
from specinfer_runtime.engine import ENGINE_PORT
from specinfer_runtime.names import DNS_LABEL, DNS_SUBDOMAIN
from specinfer_runtime.sources import exactly_one

# Volumes every engine pod has, which sidecars may mount besides their own.
SHARED_VOLUMES = ("engine-config", "shm")
MODE = Field(default=None, ge=0, le=511, description="File mode bits (0-0777; decimal in JSON).")


class KeyToPath(Section):
    """One key projected to a file (core/v1 KeyToPath)."""

    key: str = Field(max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="The key.")
    path: str = Field(max_length=512, pattern=RELATIVE_PATH, description="Relative file path.")
    mode: int | None = MODE

    cel_rules: ClassVar[tuple[Rule, ...]] = (no_parent("path"),)


class EmptyDirSource(Section):
    """A scratch directory (core/v1 EmptyDirVolumeSource)."""

    medium: Literal["", "Memory"] | None = Field(default=None, description="'' (node disk) or Memory.")
    size_limit: Bytes | None = Field(default=None, description="Size limit.")


class HostPathSource(Section):
    """A path on the node (core/v1 HostPathVolumeSource), e.g. /usr/local/Ascend/driver."""

    path: str = Field(max_length=1024, pattern=r"^/[^\x00]*$", description="Absolute path on the node.")
    type: (
        Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"]
        | None
    ) = Field(default=None, description="What must be at the path.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (no_parent("path"),)


class ConfigMapSource(Section):
    """A ConfigMap's keys as files (core/v1 ConfigMapVolumeSource), e.g. a chat template."""

    name: ObjectName = Field(description="The ConfigMap.")
    items: list[KeyToPath] | None = Field(default=None, max_length=16, description="Keys to project; all when unset.")
    default_mode: int | None = MODE
    optional: bool | None = Field(default=None, description="Start the pod even when it is missing.")


class SecretSource(Section):
    """A Secret's keys as files (core/v1 SecretVolumeSource)."""

    secret_name: ObjectName = Field(description="The Secret.")
    items: list[KeyToPath] | None = Field(default=None, max_length=16, description="Keys to project; all when unset.")
    default_mode: int | None = MODE
    optional: bool | None = Field(default=None, description="Start the pod even when it is missing.")


class ClaimSource(Section):
    """A PersistentVolumeClaim (core/v1 PersistentVolumeClaimVolumeSource), e.g. LoRA adapters."""

    claim_name: ObjectName = Field(description="The claim.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")


class NFSSource(Section):
    """An NFS export (core/v1 NFSVolumeSource)."""

    server: str = Field(min_length=1, max_length=253, description="Host name or IP address of the server.")
    path: str = Field(max_length=1024, pattern=r"^/[^\x00]*$", description="Exported path.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")


class LocalReference(Section):
    """An object in the namespace, by name."""

    name: ObjectName = Field(description="Its name.")


class CSISource(Section):
    """A volume of a CSI driver (core/v1 CSIVolumeSource)."""

    driver: str = Field(max_length=63, pattern=DNS_SUBDOMAIN, description="The driver's name.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    fs_type: str | None = Field(default=None, max_length=63, description="Filesystem type, e.g. ext4.")
    volume_attributes: dict[str, Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=32, description="Driver-specific attributes."
    )
    node_publish_secret_ref: LocalReference | None = Field(default=None, description="Secret for the driver.")


VOLUME_SOURCES = ("emptyDir", "hostPath", "configMap", "secret", "persistentVolumeClaim", "nfs", "csi")


class Volume(Section):
    """A volume of the engine pods (core/v1 Volume; the sources listed here)."""

    name: str = Field(max_length=63, pattern=DNS_LABEL, description="Name, which mounts refer to.")
    empty_dir: EmptyDirSource | None = Field(default=None, description="A scratch directory.")
    host_path: HostPathSource | None = Field(default=None, description="A path on the node.")
    config_map: ConfigMapSource | None = Field(default=None, description="A ConfigMap.")
    secret: SecretSource | None = Field(default=None, description="A Secret.")
    persistent_volume_claim: ClaimSource | None = Field(default=None, description="A PersistentVolumeClaim.")
    nfs: NFSSource | None = Field(default=None, description="An NFS export.")
    csi: CSISource | None = Field(default=None, description="A CSI driver's volume.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        exactly_one(VOLUME_SOURCES, "volume"),
        Rule(
            id="pod",
            rule=f"!(self.name in {cel_list(OPERATOR_VOLUMES)})",
            message=f"volume name %s is the operator's (it uses {', '.join(OPERATOR_VOLUMES)}): choose another",
            args=("self.name",),
            field_path=".name",
            reason="FieldValueForbidden",
        ),
    )


class ContainerPort(Section):
    """A port a sidecar listens on (core/v1 ContainerPort)."""

    name: str | None = Field(
        default=None,
        max_length=15,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Name (an IANA service name); not http, which names the engine's.",
    )
    container_port: int = Field(ge=1, le=65535, description="Port number.")
    protocol: Literal["TCP", "UDP", "SCTP"] | None = Field(default=None, description="Protocol (TCP).")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="pod",
            rule=f"self.containerPort != {ENGINE_PORT} && (!has(self.name) || self.name != 'http')",
            message=f"the engine listens on port {ENGINE_PORT}, named http, in the same pod: use another",
            field_path=".containerPort",
            reason="FieldValueForbidden",
        ),
    )


class ResourceList(Section):
    """CPU, memory and ephemeral storage; a sidecar requests no NPU."""

    cpu: Cores | None = Field(default=None, description="CPU.")
    memory: Bytes | None = Field(default=None, description="Memory.")
    ephemeral_storage: Bytes | None = Field(default=None, alias="ephemeral-storage", description="Local storage.")


class ResourceRequirements(Section):
    """Requests and limits of a sidecar (core/v1 ResourceRequirements)."""

    requests: ResourceList | None = Field(default=None, description="Requests.")
    limits: ResourceList | None = Field(default=None, description="Limits.")

    cel_rules: ClassVar[tuple[Rule, ...]] = tuple(
        Rule(
            id="kubernetes",
            rule=f"!has(self.requests) || !has(self.limits) || !has(self.requests.{r}) || !has(self.limits.{r}) "
            f"|| {not_below(f'self.limits.{r}', f'self.requests.{r}')}",
            message=f"the {r} request %s exceeds the limit %s, which Kubernetes refuses",
            args=(f"self.requests.{r}", f"self.limits.{r}"),
            field_path=f".requests.{r}",
        )
        for r in ("cpu", "memory")
    )


class SecurityContext(Section):
    """Who a sidecar runs as (core/v1 SecurityContext, the unprivileged part)."""

    run_as_user: int | None = Field(default=None, ge=0, le=INT_BOUND, description="User ID.")
    run_as_group: int | None = Field(default=None, ge=0, le=INT_BOUND, description="Group ID.")
    run_as_non_root: bool | None = Field(default=None, description="Refuse to run as root.")
    read_only_root_filesystem: bool | None = Field(default=None, description="Read-only root filesystem.")
    allow_privilege_escalation: bool | None = Field(default=None, description="Allow setuid and the like.")


class PodSecurityContext(Section):
    """Who the pod's containers run as (core/v1 PodSecurityContext, the unprivileged part). The operator
    always adds seccompProfile RuntimeDefault; with runAsNonRoot and a runAsUser the engine pods pass Pod
    Security `restricted`."""

    run_as_user: int | None = Field(default=None, ge=0, le=INT_BOUND, description="User ID of every container.")
    run_as_group: int | None = Field(default=None, ge=0, le=INT_BOUND, description="Group ID of every container.")
    run_as_non_root: bool | None = Field(default=None, description="Refuse to start a container as root.")
    fs_group: int | None = Field(default=None, ge=0, le=INT_BOUND, description="Group that owns the volumes.")
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = Field(
        default=None, description="When volume ownership is changed to fsGroup."
    )
    supplemental_groups: list[Annotated[int, Field(ge=0, le=INT_BOUND)]] | None = Field(
        default=None,
        max_length=32,
        description="More groups of every container, e.g. the Ascend driver's HwHiAiUser group for its devices.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="kubernetes",
            rule="!has(self.runAsNonRoot) || !self.runAsNonRoot || !has(self.runAsUser) || self.runAsUser != 0",
            message="runAsNonRoot true with runAsUser 0 starts no container: set a runAsUser other than 0",
            field_path=".runAsUser",
        ),
    )


Strings = list[Annotated[str, Field(max_length=4096)]]


class Container(Section):
    """A sidecar beside the engine (core/v1 Container, without probes or privileges)."""

    name: str = Field(max_length=63, pattern=DNS_LABEL, description="Name; not engine, which is the operator's.")
    image: str = Field(min_length=1, max_length=512, description="Image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Pull policy."
    )
    command: Strings | None = Field(default=None, max_length=64, description="Entrypoint.")
    args: Strings | None = Field(default=None, max_length=64, description="Arguments.")
    working_dir: str | None = Field(default=None, max_length=1024, description="Working directory.")
    env: EnvList | None = list_map("name", 64, "Environment variables.")
    env_from: list[EnvFromSource] | None = Field(default=None, max_length=16, description="Secrets and ConfigMaps.")
    ports: list[ContainerPort] | None = Field(default=None, max_length=8, description="Ports.")
    volume_mounts: list[VolumeMount] | None = list_map(
        "mountPath",
        MAX_MOUNTS,
        f"Volumes of spec.podTemplate.spec.volumes (or the operator's {', '.join(SHARED_VOLUMES)}) to mount.",
    )
    resources: ResourceRequirements | None = Field(default=None, description="Requests and limits.")
    security_context: SecurityContext | None = Field(default=None, description="Who it runs as.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="pod",
            rule="self.name != 'engine'",
            message="the engine container is the operator's: set its environment and mounts in spec.runtime",
            field_path=".name",
            reason="FieldValueForbidden",
        ),
        IMAGE_TRIMMED,
    )


class InitContainer(Container):
    """A container that runs before the engine, or beside it as a native sidecar (restartPolicy Always)."""

    restart_policy: Literal["Always"] | None = Field(
        default=None, description="Always: a sidecar started before the engine and kept running beside it."
    )


def _mounts_resolve(containers: str) -> Rule:
    names = f"{cel_list(SHARED_VOLUMES)}"
    resolves = f"m.name in {names} || (has(self.volumes) && self.volumes.exists(v, v.name == m.name))"
    return Rule(
        id="pod",
        rule=f"!has(self.{containers}) || self.{containers}.all(c, !has(c.volumeMounts) "
        f"|| c.volumeMounts.all(m, {resolves}))",
        message="a volumeMount names a volume the pod does not have: add it to volumes",
        field_path=f".{containers}",
    )


class PodSpecOverlay(Section):
    """Pod settings merged into the engine pods (core/v1 PodSpec, the fields listed)."""

    service_account_name: ObjectName | None = Field(default=None, description="Service account of the pods.")
    runtime_class_name: ObjectName | None = Field(
        default=None, description="RuntimeClass, e.g. the Ascend container runtime's."
    )
    termination_grace_period_seconds: int | None = Field(
        default=None,
        ge=0,
        le=INT_BOUND,
        description="Seconds a stopping engine gets to finish its requests; 60 when unset.",
    )
    security_context: PodSecurityContext | None = Field(
        default=None, description="Who the containers run as; seccompProfile RuntimeDefault is always set."
    )
    volumes: list[Volume] | None = list_map("name", 16, "Volumes, for spec.runtime.volumeMounts and the sidecars.")
    containers: list[Container] | None = list_map("name", 4, "Sidecars beside the engine container.")
    init_containers: list[InitContainer] | None = list_map(
        "name", 4, "Containers run before the engine starts, or native sidecars (restartPolicy Always)."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        _mounts_resolve("containers"),
        _mounts_resolve("initContainers"),
        Rule(
            id="kubernetes",
            rule="!has(self.containers) || !has(self.initContainers) "
            "|| !self.initContainers.exists(i, self.containers.exists(c, c.name == i.name))",
            message="a container and an init container share a name, which Kubernetes refuses: rename one",
            field_path=".initContainers",
        ),
    )


class PodMetadata(Section):
    """Labels and annotations of the engine pods."""

    labels: LabelMap | None = Field(
        default=None,
        max_length=32,
        description="Pod labels, e.g. a Volcano queue; the operator's app.kubernetes.io/* and specinfer.io/* win. "
        f"Not the Job controller's ({', '.join(JOB_POD_LABELS)}).",
    )
    annotations: AnnotationMap | None = Field(
        default=None,
        max_length=32,
        description="Pod annotations, e.g. prometheus.io/scrape; the operator's specinfer.io/config-hash wins.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="pod",
            rule=f"!has(self.labels) || !self.labels.exists(k, k in {cel_list(JOB_POD_LABELS)})",
            message="pod labels %s are the ones the Job controller puts on a Job's pods (an engine pod carrying "
            "them could pass for a training Job's): remove them",
            args=(f"self.labels.filter(k, k in {cel_list(JOB_POD_LABELS)})",),
            field_path=".labels",
            reason="FieldValueForbidden",
        ),
    )


class PodTemplate(Section):
    """Merged under the operator's pod template; the operator's fields win (see docs/pod-template.md)."""

    metadata: PodMetadata | None = Field(default=None, description="Labels and annotations of the pods.")
    spec: PodSpecOverlay | None = Field(default=None, description="Pod settings.")


# Maps under spec.podTemplate whose keys the admission policy checks (see resource.ADMISSION_RULES).
POD_TEMPLATE_KEY_MAPS = ("metadata.labels", "metadata.annotations")
