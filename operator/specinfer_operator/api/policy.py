"""The tenant policy: what a SpeculativeInference may ask of its engine pods, as the platform team sets it.

Whoever may create a SpeculativeInference gets pods made by the operator, so every field that reaches a pod
or a Service would otherwise reach whatever a pod can: any host path, NFS server, CSI driver, Secret of the
namespace or image, sidecars as root, the namespace's service accounts, any priority, scheduler, runtime class
or node. A cluster-scoped SpeculativeInferencePolicy (the chart installs one, from its values) says what is
allowed; its defaults allow the Ascend driver's host paths read-only, the ordinary volume types, the Secrets the
documented examples use, and nothing else that reaches beyond the tenant's own pods (reach.py lists every field
of the spec and what governs it).

The rules are CEL over the resource (`object`) and the policy (`params`), written once (policy_volumes,
policy_secrets, policy_pods, policy_placement): a ValidatingAdmissionPolicy with the policy as its parameter
enforces them at `kubectl apply`, and the operator and `specinfer validate` evaluate the same expressions
in-process (policy_problems).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from specinfer_operator.api.container import ABSOLUTE_PATH, RESOURCE_NAME, ObjectName
from specinfer_operator.api.engine import DEFAULT_ENGINE_VERSIONS, DEFAULT_RULES, EngineVersions
from specinfer_operator.api.metadata import ObjectMeta
from specinfer_operator.api.overlay import VOLUME_SOURCES
from specinfer_operator.api.placement import INT_BOUND
from specinfer_operator.api.policy_placement import PLACEMENT_RULES
from specinfer_operator.api.policy_pods import POD_RULES
from specinfer_operator.api.policy_secrets import SECRET_RULES
from specinfer_operator.api.policy_volumes import VOLUME_RULES
from specinfer_operator.api.resource import API_VERSION
from specinfer_runtime.base import Section, section_field
from specinfer_runtime.celrules import Rule
from specinfer_runtime.names import DNS_SUBDOMAIN
from specinfer_runtime.validation import Problem, rule_violations

POLICY_KIND = "SpeculativeInferencePolicy"
POLICY_PLURAL = "speculativeinferencepolicies"
VolumeType = Literal["emptyDir", "hostPath", "configMap", "secret", "persistentVolumeClaim", "nfs", "csi"]
# NFS and CSI reach beyond the cluster's own storage: each needs its servers or drivers listed as well.
DEFAULT_VOLUME_TYPES: tuple[VolumeType, ...] = ("emptyDir", "hostPath", "configMap", "secret", "persistentVolumeClaim")
# The host paths of the Ascend driver and its tools, as Ascend's own device plugin examples mount them.
ASCEND_HOST_PATHS = (
    "/usr/local/Ascend/driver",
    "/usr/local/Ascend/add-ons",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
)
# The Secrets the documented examples name: the Hub token and vLLM's API key.
DEFAULT_SECRETS = ("hf-token", "vllm-api-key")
# What the Ascend device plugin advertises: Atlas 800 (910, 910B, 910C) and Atlas 300I (310P) NPUs.
ASCEND_RESOURCES = ("huawei.com/Ascend910", "huawei.com/Ascend310P")
DEFAULT_GRACE_SECONDS = 3600


class HostPathPrefix(Section):
    """A directory (or file) on the nodes that engine pods may mount, and everything below it."""

    path_prefix: str = Field(
        max_length=1024,
        pattern=ABSOLUTE_PATH,
        description="Absolute path without a trailing /; it and every path below it are allowed (/data allows "
        "/data/models, not /database).",
    )
    read_only: bool = Field(
        default=True,
        description="Only read-only mounts (a model, the driver); false also allows writing, and hostPath types "
        "that create what is missing (DirectoryOrCreate, FileOrCreate).",
    )


def _ascend_paths() -> list[HostPathPrefix]:
    return [HostPathPrefix(path_prefix=p) for p in ASCEND_HOST_PATHS]


ImagePrefix = Annotated[str, Field(min_length=1, max_length=512)]
ServerName = Annotated[str, Field(min_length=1, max_length=253)]
Name = Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]
# A Secret's name, or a prefix of names ending in * (`team-a-*`; `*` alone: every Secret).
SecretPattern = Annotated[str, Field(max_length=253, pattern=r"^([a-z0-9][-a-z0-9.]*)?[*]$|" + DNS_SUBDOMAIN)]
ResourceName = Annotated[str, Field(max_length=253, pattern=RESOURCE_NAME)]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]


def _names(*names: str) -> Callable[[], list[str]]:
    return lambda: list(names)


def _default(factory: Callable[[], list[Any]]) -> dict[str, Any]:
    """A list's default, in the model and in the CRD: the API server fills it in a policy that leaves it out (on
    create and on read), as the operator does, so that the admission policy's `params.spec` always has it."""
    shown = [value.dump() if isinstance(value, Section) else value for value in factory()]
    return {"default_factory": factory, "json_schema_extra": {"default": shown}}


class TenantPolicySpec(Section):
    """What a SpeculativeInference may ask of its pods beyond the engine, in every namespace the policy binds."""

    allowed_host_paths: list[HostPathPrefix] = Field(
        **_default(_ascend_paths),
        max_length=64,
        description="Host paths a pod may mount (pod template volumes, model, draft and hidden-state sources); "
        "the Ascend driver's, read-only, by default. Pod Security `baseline` refuses every host path: in such "
        "namespaces run the Ascend container runtime instead of mounting the driver.",
    )
    allowed_volume_types: list[VolumeType] = Field(
        **_default(_names(*DEFAULT_VOLUME_TYPES)),
        max_length=len(VOLUME_SOURCES),
        description="Volume types a pod may get: the sources of spec.podTemplate.spec.volumes, and the volumes typed "
        "sources become (a model, draft or hidden-state pvc or hostPath, resources.modelCacheClaim). hostPath is "
        "further limited by allowedHostPaths, nfs by allowedNfsServers and csi by allowedCsiDrivers.",
    )
    allowed_nfs_servers: list[ServerName] = Field(
        **_default(list),
        max_length=64,
        description="NFS servers (exactly as written in a volume) a pod may mount; none by default.",
    )
    allowed_csi_drivers: list[Name] = Field(
        **_default(list),
        max_length=64,
        description="CSI drivers whose inline volumes a pod may get (csi must also be an allowed volume type); none "
        "by default: a driver may mount anything its volumeAttributes name.",
    )
    allowed_secrets: list[SecretPattern] = Field(
        **_default(_names(*DEFAULT_SECRETS)),
        max_length=64,
        description="Secrets of its namespace a resource may name, wherever: env and envFrom of the engine, of "
        "sidecars and of init containers, secret and CSI volumes, Hub tokens (pull Secrets: "
        "allowedImagePullSecrets). A name, or a prefix ending in * (team-a-*; * alone allows every Secret, as "
        "Kubernetes does for whoever may create pods). The documented examples' hf-token and vllm-api-key by "
        "default.",
    )
    allowed_image_pull_secrets: list[SecretPattern] = Field(
        **_default(list),
        max_length=64,
        description="Registry credentials (Secrets of its namespace) spec.runtime.imagePullSecrets may name: a "
        "name, or a prefix ending in * (team-a-*; * alone allows every Secret). None by default: the pods pull "
        "with the operator's pull Secrets (its chart's imagePullSecrets) and the nodes' own credentials.",
    )
    sidecars_may_run_as_root: bool = Field(
        default=False,
        description="Whether sidecars and init containers may run as root; when false each must run as a user "
        "other than 0 (runAsUser, or runAsNonRoot, in its securityContext or the pod's).",
    )
    sidecars_may_escalate: bool = Field(
        default=False, description="Whether sidecars and init containers may set allowPrivilegeEscalation true."
    )
    service_account_name_allowed: bool = Field(
        default=False,
        description="Whether spec.podTemplate.spec.serviceAccountName may be set. Allowing it lets whoever creates "
        "a SpeculativeInference run pods as any ServiceAccount of their namespace, with its token.",
    )
    allowed_image_prefixes: list[ImagePrefix] = Field(
        **_default(list),
        max_length=64,
        description="Prefixes (e.g. registry.example.com/ml/) that spec.runtime.image and every sidecar image "
        "must be under, compared component by component after the image is parsed as a reference "
        "([registry/]path[:tag][@digest]); any image when empty.",
    )
    allowed_runtime_classes: list[ObjectName] = Field(
        **_default(list),
        max_length=64,
        description="RuntimeClasses spec.podTemplate.spec.runtimeClassName may name, e.g. the Ascend container "
        "runtime's; none by default (the nodes' default runtime).",
    )
    allowed_schedulers: list[Name] = Field(
        **_default(list),
        max_length=64,
        description="Schedulers spec.placement.schedulerName may name besides default-scheduler, e.g. volcano; "
        "none by default.",
    )
    allowed_priority_classes: list[Name] = Field(
        **_default(list),
        max_length=64,
        description="PriorityClasses spec.placement.priorityClassName may name; when empty, any but the system-* "
        "ones (system-node-critical, system-cluster-critical), which preempt the cluster's own pods.",
    )
    tolerate_all_taints_allowed: bool = Field(
        default=False,
        description="Whether a toleration may leave out its key, tolerating every taint (of its effect), the "
        "control plane's and those that keep nodes for other teams included.",
    )
    control_plane_allowed: bool = Field(
        default=False,
        description="Whether pods may select control-plane nodes (node-role.kubernetes.io/control-plane or master, "
        "in nodeSelector or node affinity with In or Exists) or tolerate their taint.",
    )
    max_termination_grace_period_seconds: int = Field(
        default=DEFAULT_GRACE_SECONDS,
        ge=0,
        le=INT_BOUND,
        description="The longest spec.podTemplate.spec.terminationGracePeriodSeconds: how long a stopping pod may "
        "hold its node's NPUs (and a node drain).",
    )
    allowed_service_types: list[ServiceType] = Field(
        **_default(_names("ClusterIP")),
        min_length=1,
        max_length=3,
        description="Types spec.service.type may be; ClusterIP by default. NodePort opens a port on every node, "
        "LoadBalancer an address outside the cluster.",
    )
    allowed_npu_resource_names: list[ResourceName] = Field(
        **_default(_names(*ASCEND_RESOURCES)),
        max_length=64,
        description="Extended resources spec.resources.npuResourceName may name (a ResourceQuota counts each "
        "apart); the Ascend device plugin's by default. Unset, the operator's --npu-resource-name applies.",
    )
    drain_blocking_budgets_allowed: bool = Field(
        default=False,
        description="Whether spec.disruptionBudget may let no pod be evicted (maxUnavailable 0, or minAvailable as "
        "many as the pods), which holds every drain of the pods' nodes, for upgrades or repairs, until it is deleted; "
        "and whether pod annotations karpenter.sh/do-not-disrupt: true or "
        "cluster-autoscaler.kubernetes.io/safe-to-evict: false may hold the pods' nodes the same way.",
    )
    app_armor_unconfined_allowed: bool = Field(
        default=False,
        description="Whether pod annotations container.apparmor.security.beta.kubernetes.io/* may set a profile "
        "other than runtime/default or localhost/* (unconfined), which Pod Security baseline refuses.",
    )
    learning_allowed: bool = Field(
        default=False,
        description="Whether a resource may set spec.learning: its engines then record a share of the prompts they "
        "serve on a claim of the namespace, and Jobs train drafts on them with the namespace's NPUs. Off unless a "
        "platform opts in: served prompts are the tenant's data.",
    )

    default_engine_versions: EngineVersions | None = Field(
        default=None,
        description="The vLLM and vllm-ascend releases of the operator's default runtime image (the chart sets them "
        "from its runtimeImage's pin): a resource without spec.runtime.image whose features need later releases "
        "is refused. Unset: only the pods can tell.",
    )


class SpeculativeInferencePolicy(Section):
    """The platform team's limits on what SpeculativeInferences may ask of their pods (cluster-scoped)."""

    api_version: Literal["specinfer.io/v1alpha1"] = Field(description=API_VERSION)
    kind: Literal["SpeculativeInferencePolicy"] = Field(description=POLICY_KIND)
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: TenantPolicySpec = section_field(TenantPolicySpec, "The limits; each left out takes its default.")


# The policy a chart installed with its default values creates: the defaults above, and its runtime image's engine
# releases (values.yaml's tenantPolicy.spec and runtimeEngineVersions; tests render the chart and compare). Plain
# `specinfer validate` checks against it, so that it refuses what `kubectl apply` refuses on a default install.
DEFAULT_INSTALL_POLICY = TenantPolicySpec(default_engine_versions=DEFAULT_ENGINE_VERSIONS)

POLICY_RULES: tuple[Rule, ...] = (*VOLUME_RULES, *SECRET_RULES, *POD_RULES, *PLACEMENT_RULES, *DEFAULT_RULES)


def policy_problems(resource: dict[str, Any], policy: TenantPolicySpec) -> list[Problem]:
    """What the policy refuses in a valid resource (as stored: camelCase, defaults applied)."""
    return rule_violations(POLICY_RULES, resource, variable="object", params={"spec": policy.dump()})
