"""The tenant policy: what a SpeculativeInference may ask of its engine pods, as the platform team sets it.

Whoever may create a SpeculativeInference gets pods made by the operator, so the pod template overlay
and the model sources would otherwise reach whatever a pod can: any host path, NFS server or image,
sidecars as root, the namespace's service accounts. A cluster-scoped SpeculativeInferencePolicy (the
chart installs one, from its values) says what is allowed; its defaults allow the Ascend driver's host
paths read-only and nothing else beyond the ordinary volume types.

The rules are CEL over the resource (`object`) and the policy (`params`), written once: a
ValidatingAdmissionPolicy with the policy as its parameter enforces them at `kubectl apply`, and the
operator and `specinfer validate` evaluate the same expressions in-process (policy_problems).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from specinfer_operator.api.container import ABSOLUTE_PATH
from specinfer_operator.api.engine import DEFAULT_RULES, EngineVersions
from specinfer_operator.api.metadata import ObjectMeta
from specinfer_operator.api.overlay import VOLUME_SOURCES
from specinfer_operator.api.resource import API_VERSION
from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule, along
from specinfer_runtime.validation import Problem, rule_violations

POLICY_KIND = "SpeculativeInferencePolicy"
POLICY_PLURAL = "speculativeinferencepolicies"
VolumeType = Literal["emptyDir", "hostPath", "configMap", "secret", "persistentVolumeClaim", "nfs", "csi"]
DEFAULT_VOLUME_TYPES: tuple[VolumeType, ...] = (
    "emptyDir",
    "hostPath",
    "configMap",
    "secret",
    "persistentVolumeClaim",
    "csi",
)
# The host paths of the Ascend driver and its tools, as Ascend's own device plugin examples mount them.
ASCEND_HOST_PATHS = (
    "/usr/local/Ascend/driver",
    "/usr/local/Ascend/add-ons",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
)


class HostPathPrefix(Section):
    """A directory (or file) on the nodes that engine pods may mount, and everything below it."""

    path_prefix: str = Field(
        max_length=1024,
        pattern=ABSOLUTE_PATH,
        description="Absolute path without a trailing /; it and every path below it are allowed (/data allows "
        "/data/models, not /database).",
    )
    read_only: bool = Field(
        default=True, description="Only read-only mounts (a model, the driver); false also allows writing."
    )


def _ascend_paths() -> list[HostPathPrefix]:
    return [HostPathPrefix(path_prefix=p) for p in ASCEND_HOST_PATHS]


ImagePrefix = Annotated[str, Field(min_length=1, max_length=512)]
ServerName = Annotated[str, Field(min_length=1, max_length=253)]


class TenantPolicySpec(Section):
    """What a SpeculativeInference may ask of its pods beyond the engine, in every namespace the policy binds."""

    allowed_host_paths: list[HostPathPrefix] = Field(
        default_factory=_ascend_paths,
        max_length=64,
        description="Host paths a pod may mount (pod template volumes, model, draft and hidden-state sources); "
        "the Ascend driver's, read-only, by default. Pod Security `baseline` refuses every host path: in such "
        "namespaces run the Ascend container runtime instead of mounting the driver.",
    )
    allowed_volume_types: list[VolumeType] = Field(
        default_factory=lambda: list(DEFAULT_VOLUME_TYPES),
        max_length=len(VOLUME_SOURCES),
        description="Volume sources of spec.podTemplate.spec.volumes; hostPath is further limited by "
        "allowedHostPaths and nfs by allowedNfsServers.",
    )
    allowed_nfs_servers: list[ServerName] = Field(
        default_factory=list,
        max_length=64,
        description="NFS servers (exactly as written in a volume) a pod may mount; none by default.",
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
        default_factory=list,
        max_length=64,
        description="Prefixes (e.g. registry.example.com/ml/) that spec.runtime.image and every sidecar image "
        "must start with; any image when empty.",
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
    spec: TenantPolicySpec = Field(default_factory=TenantPolicySpec, description="The limits.")


# --- the rules: `object` is the SpeculativeInference, `params` the policy ---------------------------------

SPEC = "object.spec"
OVERLAY = f"{SPEC}.podTemplate.spec"
ALLOWED = "params.spec.allowedHostPaths"
WHY = "the tenant policy (SpeculativeInferencePolicy, set by the platform team)"


def _under(path: str, writable: bool = False) -> str:
    """CEL: `path` is an allowed host path (for writing, when `writable`)."""
    match = f"({path} == a.pathPrefix || {path}.startsWith(a.pathPrefix + '/'))"
    return f"{ALLOWED}.exists(a, {match}{' && !a.readOnly' if writable else ''})"


def _mounted_writable(volume: str) -> str:
    """CEL: a container mounts the overlay volume `volume` without readOnly."""
    writes = f"m.name == {volume}.name && !(has(m.readOnly) && m.readOnly)"
    return " || ".join(
        [
            f"(has({SPEC}.runtime.volumeMounts) && {SPEC}.runtime.volumeMounts.exists(m, {writes}))",
            *(
                f"(has({OVERLAY}.{g}) && {OVERLAY}.{g}.exists(c, has(c.volumeMounts) && c.volumeMounts.exists(m, "
                f"{writes})))"
                for g in ("containers", "initContainers")
            ),
        ]
    )


_ALLOWED_LIST = f"{ALLOWED}.map(a, a.pathPrefix + (a.readOnly ? ' (read-only)' : ''))"
_VOLUMES = f"{OVERLAY}.volumes"


def _host_rule(path: str, what: str, writable: bool) -> Rule:
    """The host path at `path` (a model, draft or hidden-state source), where set, is allowed."""
    return Rule(
        id="policy",
        rule=along(path, lambda p: _under(p, writable)),
        message=f"host path %s is not allowed {'for writing ' if writable else ''}by {WHY}, which allows %s: {what}",
        args=(path, _ALLOWED_LIST),
        field_path=path.removeprefix("object"),
        reason="FieldValueForbidden",
    )


def _volume_rule(ok: Callable[[str], str], shown: str, message: str, allowed: str) -> Rule:
    """Every overlay volume passes `ok` (CEL of a volume); the message names `shown` (a field of the volume,
    e.g. `hostPath.path`) of those that do not, and `allowed` (CEL) what the policy allows."""
    return Rule(
        id="policy",
        rule=along(f"{_VOLUMES}[]", ok),
        message=message,
        args=(f"{_VOLUMES}.filter(v, !({ok('v')})).map(v, v.{shown})", allowed),
        field_path=".spec.podTemplate.spec.volumes",
        reason="FieldValueForbidden",
    )


def _type_allowed(v: str) -> str:
    return " && ".join(f"(!has({v}.{t}) || '{t}' in params.spec.allowedVolumeTypes)" for t in VOLUME_SOURCES)


def _containers(test: Callable[[str], str]) -> str:
    """CEL: `test` holds for every sidecar and init container of the overlay."""
    return " && ".join(along(f"{OVERLAY}.{g}[]", test) for g in ("containers", "initContainers"))


def _context(container: str, field: str) -> str:
    return f"has({container}.securityContext) && has({container}.securityContext.{field})"


def _not_root(c: str) -> str:
    pod = f"{OVERLAY}.securityContext"
    pod_has = f"has({pod})"
    pod_user = f"({pod_has} && has({pod}.runAsUser) ? {pod}.runAsUser : -1)"
    user = f"({_context(c, 'runAsUser')} ? {c}.securityContext.runAsUser : {pod_user})"
    non_root = (
        f"({_context(c, 'runAsNonRoot')} ? {c}.securityContext.runAsNonRoot : "
        f"({pod_has} && has({pod}.runAsNonRoot) && {pod}.runAsNonRoot))"
    )
    return f"({user} > 0 || ({user} == -1 && {non_root}))"


def _images(c: str) -> str:
    return f"params.spec.allowedImagePrefixes.exists(p, {c}.image.startsWith(p))"


_FREE_IMAGES = "size(params.spec.allowedImagePrefixes) == 0"

POLICY_RULES: tuple[Rule, ...] = (
    _volume_rule(
        lambda v: f"!has({v}.hostPath) || {_under(f'{v}.hostPath.path')}",
        "hostPath.path",
        f"host paths %s are not allowed by {WHY}, which allows %s: use a PersistentVolumeClaim, or ask the "
        "platform team to allow the path",
        _ALLOWED_LIST,
    ),
    _volume_rule(
        lambda v: f"!has({v}.hostPath) || !({_mounted_writable(v)}) || {_under(f'{v}.hostPath.path', True)}",
        "hostPath.path",
        f"host paths %s are mounted writable, which {WHY} does not allow (it allows %s): mount them with "
        "readOnly: true",
        _ALLOWED_LIST,
    ),
    _host_rule(f"{SPEC}.model.source.hostPath.path", "use a PVC source", False),
    _host_rule(f"{SPEC}.speculative.draftModel.source.hostPath.path", "use a PVC source", False),
    _host_rule(f"{SPEC}.speculative.hiddenStates.storage.hostPath.path", "use a PVC for the hidden states", True),
    _volume_rule(
        _type_allowed,
        "name",
        f"volumes %s are of types {WHY} does not allow (it allows %s): use another volume type",
        "params.spec.allowedVolumeTypes",
    ),
    _volume_rule(
        # A type refused already says it all: the server is judged once the type is allowed.
        lambda v: (
            f"!has({v}.nfs) || !('nfs' in params.spec.allowedVolumeTypes) || {v}.nfs.server in "
            "params.spec.allowedNfsServers"
        ),
        "nfs.server",
        f"NFS servers %s are not allowed by {WHY}, which allows %s: use an allowed server, or a PersistentVolumeClaim",
        "params.spec.allowedNfsServers",
    ),
    Rule(
        id="policy",
        rule=f"params.spec.sidecarsMayRunAsRoot || ({_containers(_not_root)})",
        message=f"{WHY} runs sidecars and init containers only as a user other than root: set runAsUser (not 0) or "
        "runAsNonRoot: true in their securityContext, or in spec.podTemplate.spec.securityContext",
        field_path=".spec.podTemplate.spec.containers",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="policy",
        rule="params.spec.sidecarsMayEscalate || ("
        + _containers(
            lambda c: f"!({_context(c, 'allowPrivilegeEscalation')}) || !{c}.securityContext.allowPrivilegeEscalation"
        )
        + ")",
        message=f"{WHY} does not allow sidecars and init containers allowPrivilegeEscalation true: remove it",
        field_path=".spec.podTemplate.spec.containers",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="policy",
        rule=f"params.spec.serviceAccountNameAllowed || !has({SPEC}.podTemplate) || !has({OVERLAY}) "
        f"|| !has({OVERLAY}.serviceAccountName)",
        message=f"{WHY} does not allow choosing the pods' ServiceAccount (it would run them as any ServiceAccount "
        "of the namespace, with its token): remove serviceAccountName",
        field_path=".spec.podTemplate.spec.serviceAccountName",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="policy",
        rule=f"{_FREE_IMAGES} || ((!has({SPEC}.runtime.image) || {_images(f'{SPEC}.runtime')}) "
        f"&& ({_containers(_images)}))",
        message=f"{WHY} allows only images that start with one of %s: use an image from an allowed registry",
        args=("params.spec.allowedImagePrefixes",),
        field_path=".spec.runtime.image",
        reason="FieldValueForbidden",
    ),
    *DEFAULT_RULES,
)


def policy_problems(resource: dict[str, Any], policy: TenantPolicySpec) -> list[Problem]:
    """What the policy refuses in a valid resource (as stored: camelCase, defaults applied)."""
    return rule_violations(POLICY_RULES, resource, variable="object", params={"spec": policy.dump()})
