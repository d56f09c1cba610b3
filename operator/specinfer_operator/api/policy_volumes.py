"""The tenant policy's volume rules: which volume types, host paths, NFS servers and CSI drivers a pod may get.

A typed source (a model, draft or hidden-state `pvc` or `hostPath`, resources.modelCacheClaim) becomes a
volume of the pod as surely as a volume of the pod template does, so it obeys the same rules: its type must
be allowed, a host path must be under an allowed prefix, and what is written (hidden states, a host path
mounted without readOnly or created when missing) must be under a prefix that allows writing.
"""

from __future__ import annotations

from collections.abc import Callable

from specinfer_operator.api.overlay import VOLUME_SOURCES
from specinfer_operator.api.policy_cel import OVERLAY, SPEC, WHY, forbid
from specinfer_runtime.celrules import Rule, along, cel_in

HOST_PATHS = "params.spec.allowedHostPaths"
TYPES = "params.spec.allowedVolumeTypes"
# The volume types typed sources become.
CLAIM, HOST_PATH = "persistentVolumeClaim", "hostPath"
# hostPath types that create what is missing on the node: writing, whatever the mounts say.
CREATING = ("DirectoryOrCreate", "FileOrCreate")
_VOLUMES = f"{OVERLAY}.volumes"
_ALLOWED_PATHS = f"{HOST_PATHS}.map(a, a.pathPrefix + (a.readOnly ? ' (read-only)' : ''))"


def type_allowed(volume_type: str) -> str:
    return f"'{volume_type}' in {TYPES}"


def under(path: str, writable: bool = False) -> str:
    """CEL: `path` is an allowed host path (for writing, when `writable`)."""
    match = f"({path} == a.pathPrefix || {path}.startsWith(a.pathPrefix + '/'))"
    return f"{HOST_PATHS}.exists(a, {match}{' && !a.readOnly' if writable else ''})"


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


def _written(volume: str) -> str:
    """CEL: the host path volume `volume` is written: mounted without readOnly, or created when missing."""
    created = f"has({volume}.hostPath.type) && {cel_in(f'{volume}.hostPath.type', CREATING)}"
    return f"({_mounted_writable(volume)}) || ({created})"


def _volume_rule(ok: Callable[[str], str], shown: str, message: str, allowed: str) -> Rule:
    """Every overlay volume passes `ok` (CEL of a volume); the message names `shown` (a field of the volume,
    e.g. `hostPath.path`) of those that do not, and `allowed` (CEL) what the policy allows."""
    return forbid(
        along(f"{_VOLUMES}[]", ok),
        message,
        ".spec.podTemplate.spec.volumes",
        (f"{_VOLUMES}.filter(v, !({ok('v')})).map(v, v.{shown})", allowed),
    )


def _types_allowed(v: str) -> str:
    return " && ".join(f"(!has({v}.{t}) || {type_allowed(t)})" for t in VOLUME_SOURCES)


def _host_volume(test: Callable[[str, str], str]) -> Callable[[str], str]:
    """CEL of an overlay volume: not a host path, or one whose type is allowed (a type refused says it all)
    and that passes `test(volume, path)`."""
    return lambda v: f"!has({v}.hostPath) || !({type_allowed(HOST_PATH)}) || ({test(v, f'{v}.hostPath.path')})"


def _typed(path: str, shown: str, volume_type: str, what: str, fix: str) -> Rule:
    """The typed source at `path` (a `pvc`, a `hostPath`, a claim's name), where set, is of an allowed type;
    the message names `shown` (CEL: the claim or the path)."""
    return forbid(
        along(path, lambda _: type_allowed(volume_type)),
        f"{what} %s becomes a {volume_type} volume, a type {WHY} does not allow (it allows %s): {fix}",
        path.removeprefix("object"),
        (shown, TYPES),
    )


def _host_path(source: str, what: str, writable: bool) -> Rule:
    """The typed host path source at `source`, where set and its type allowed, is under an allowed prefix."""
    path = f"{source}.hostPath.path"
    return forbid(
        along(path, lambda p: f"!({type_allowed(HOST_PATH)}) || {under(p, writable)}"),
        f"host path %s is not allowed {'for writing ' if writable else ''}by {WHY}, which allows %s: {what}",
        path.removeprefix("object"),
        (path, _ALLOWED_PATHS),
    )


# Each typed source: where it is, what it holds, and whether the pod writes it.
SOURCES = (
    (f"{SPEC}.model.source", "the model's", False),
    (f"{SPEC}.speculative.draftModel.source", "the draft's", False),
    (f"{SPEC}.speculative.hiddenStates.storage", "the hidden states'", True),
)
_OTHER_SOURCE = {False: "load it from the Hugging Face Hub", True: "write them to a volume of an allowed type"}

VOLUME_RULES: tuple[Rule, ...] = (
    _volume_rule(
        _host_volume(lambda _, path: under(path)),
        "hostPath.path",
        f"host paths %s are not allowed by {WHY}, which allows %s: use a PersistentVolumeClaim, or ask the "
        "platform team to allow the path",
        _ALLOWED_PATHS,
    ),
    _volume_rule(
        # A path refused already says it all: whether it is written is judged once it is allowed.
        _host_volume(lambda v, path: f"!({under(path)}) || !({_written(v)}) || {under(path, True)}"),
        "hostPath.path",
        f"host paths %s are written (mounted without readOnly, or of type {' or '.join(CREATING)}, which create "
        f"what is missing), which {WHY} does not allow there (it allows %s): mount them with readOnly: true, of "
        "type Directory or File",
        _ALLOWED_PATHS,
    ),
    *(
        rule
        for source, what, writes in SOURCES
        for rule in (
            _typed(
                f"{source}.pvc",
                f"{source}.pvc.claimName",
                CLAIM,
                f"{what} PersistentVolumeClaim",
                _OTHER_SOURCE[writes],
            ),
            _typed(
                f"{source}.hostPath",
                f"{source}.hostPath.path",
                HOST_PATH,
                f"{what} host path",
                _OTHER_SOURCE[writes],
            ),
            _host_path(source, "use a PVC source" if not writes else "use a PVC for the hidden states", writes),
        )
    ),
    _typed(
        f"{SPEC}.resources.modelCacheClaim",
        f"{SPEC}.resources.modelCacheClaim",
        CLAIM,
        "the Hub cache's PersistentVolumeClaim",
        "remove modelCacheClaim (the cache is then an emptyDir of resources.modelCache)",
    ),
    _volume_rule(
        _types_allowed,
        "name",
        f"volumes %s are of types {WHY} does not allow (it allows %s): use another volume type",
        TYPES,
    ),
    _volume_rule(
        # A type refused already says it all: the server is judged once the type is allowed.
        lambda v: f"!has({v}.nfs) || !({type_allowed('nfs')}) || {v}.nfs.server in params.spec.allowedNfsServers",
        "nfs.server",
        f"NFS servers %s are not allowed by {WHY}, which allows %s: use an allowed server, or a PersistentVolumeClaim",
        "params.spec.allowedNfsServers",
    ),
    _volume_rule(
        lambda v: f"!has({v}.csi) || !({type_allowed('csi')}) || {v}.csi.driver in params.spec.allowedCsiDrivers",
        "csi.driver",
        f"CSI drivers %s are not allowed by {WHY}, which allows %s: use an allowed driver, or a PersistentVolumeClaim",
        "params.spec.allowedCsiDrivers",
    ),
)
