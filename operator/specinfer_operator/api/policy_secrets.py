"""The tenant policy's Secret rules: which Secrets of its namespace a resource may name.

A pod that names a Secret gets its value (in its environment, as files, as a pull or driver credential):
whoever makes such a pod can read the Secret through it, and with an image of their own, send it anywhere.
So every place a spec names a Secret is held to allowedSecrets: the engine's env and envFrom, the sidecars'
and init containers' env and envFrom, secret and CSI volumes, and the Hub tokens of the model and the draft.
The pull Secrets of spec.runtime.imagePullSecrets are held to allowedImagePullSecrets instead: a registry
credential is the platform's to hand out, not one of the application's Secrets, and the kubelet, not the
tenant's process, reads it.
"""

from __future__ import annotations

from collections.abc import Callable

from specinfer_operator.api.policy_cel import CONTAINER_GROUPS, OVERLAY, SPEC, WHY, forbid, listed, present
from specinfer_runtime.celrules import Rule

SECRETS = "allowedSecrets"
PULL_SECRETS = "allowedImagePullSecrets"


def secret_allowed(name: str, allowed: str = SECRETS) -> str:
    """CEL: the Secret `name` is in the policy's list `allowed`: listed, or under a listed prefix (`team-a-*`;
    `*` is every Secret)."""
    return f"params.spec.{allowed}.exists(p, p == {name} || (p.endsWith('*') && {name}.startsWith(p.replace('*', ''))))"


def _env(env: str) -> str:
    """CEL: the Secrets of the env list `env`."""
    return f"{env}.filter(e, has(e.valueFrom) && has(e.valueFrom.secretKeyRef)).map(e, e.valueFrom.secretKeyRef.name)"


def _env_from(env_from: str) -> str:
    """CEL: the Secrets of the envFrom list `env_from`."""
    return f"{env_from}.filter(f, has(f.secretRef)).map(f, f.secretRef.name)"


def _from_env(c: str) -> str:
    """CEL: the Secrets the container `c` takes its environment from."""
    return f"{listed(f'{c}.env', _env)} + {listed(f'{c}.envFrom', _env_from)}"


def _refused(kind: str, allowed: str) -> str:
    """The refusal of `kind` (Secrets, pull Secrets) the policy's list `allowed` does not name: which ones, what
    the list holds, and the fix (args: the refused names, then the list)."""
    return (
        f"{kind} %s are not allowed by {WHY}, whose {allowed} is %s (names, or prefixes ending in *): use one of "
        f"those, or ask the platform team to add them to {allowed}"
    )


def _names(names: str, field_path: str, allowed: str = SECRETS, kind: str = "Secrets") -> Rule:
    """Every Secret of the CEL list `names` is in the policy's list `allowed`."""
    ok = secret_allowed("n", allowed)
    return forbid(
        f"{names}.all(n, {ok})",
        _refused(kind, allowed),
        field_path,
        (f"{names}.filter(n, !({ok}))", f"params.spec.{allowed}"),
    )


def _engine(field: str, names: Callable[[str], str]) -> Rule:
    """The Secrets of spec.runtime's `field` (`names`: CEL, the Secrets of the list there)."""
    return _names(listed(f"{SPEC}.runtime.{field}", names), f".spec.runtime.{field}")


def _containers(group: str) -> Rule:
    """The Secrets of each sidecar (or init container): refused ones are named after their container."""
    every = f"{OVERLAY}.{group}"
    ok = secret_allowed("n")
    return forbid(
        f"!({present(every)}) || {every}.all(c, ({_from_env('c')}).all(n, {ok}))",
        _refused("Secrets", SECRETS),
        f".spec.podTemplate.spec.{group}",
        (
            f"{every}.filter(c, !({_from_env('c')}).all(n, {ok}))"
            f".map(c, c.name + ': ' + ({_from_env('c')}).filter(n, !({ok})).join(', '))",
            f"params.spec.{SECRETS}",
        ),
    )


def _token(source: str) -> Rule:
    path = f"{source}.huggingFace.tokenSecretRef.name"
    return _names(listed(path, lambda name: f"[{name}]"), path.removeprefix("object"))


SECRET_RULES: tuple[Rule, ...] = (
    _engine("env", _env),
    _engine("envFrom", _env_from),
    _names(
        listed(f"{SPEC}.runtime.imagePullSecrets", lambda refs: f"{refs}.map(s, s.name)"),
        ".spec.runtime.imagePullSecrets",
        PULL_SECRETS,
        "pull Secrets",
    ),
    *(_containers(group) for group in CONTAINER_GROUPS),
    _names(
        listed(
            f"{OVERLAY}.volumes",
            lambda volumes: (
                f"{volumes}.filter(v, has(v.secret)).map(v, v.secret.secretName) + "
                f"{volumes}.filter(v, has(v.csi) && has(v.csi.nodePublishSecretRef))"
                ".map(v, v.csi.nodePublishSecretRef.name)"
            ),
        ),
        ".spec.podTemplate.spec.volumes",
    ),
    _token(f"{SPEC}.model.source"),
    _token(f"{SPEC}.speculative.draftModel.source"),
)
