"""What the tenant policy's rules share: where things are in the resource (`object`), how a refusal reads, and
CEL for the containers of the pod template overlay. The rules themselves are in policy_volumes,
policy_secrets, policy_pods and policy_placement; policy.py holds the policy's fields (`params.spec`)."""

from __future__ import annotations

from collections.abc import Callable

from specinfer_runtime.celrules import Rule

SPEC = "object.spec"
OVERLAY = f"{SPEC}.podTemplate.spec"
WHY = "the tenant policy (SpeculativeInferencePolicy, set by the platform team)"
CONTAINER_GROUPS = ("containers", "initContainers")


def forbid(rule: str, message: str, field_path: str, args: tuple[str, ...] = ()) -> Rule:
    """A policy rule: `rule` (CEL) holds, or `message` says what is refused at `field_path` (`.spec...`)."""
    return Rule(id="policy", rule=rule, message=message, args=args, field_path=field_path, reason="FieldValueForbidden")


def present(path: str) -> str:
    """CEL: every field along the dotted `path` is set (`object.spec.a.b`: spec, a and b)."""
    head, *fields = path.split(".")
    return " && ".join(f"has({head}.{'.'.join(fields[: i + 1])})" for i in range(len(fields)))


def listed(path: str, items: Callable[[str], str]) -> str:
    """CEL: the list `items(path)` where the list at `path` is set, else `[]`."""
    return f"({present(path)} ? {items(path)} : [])"


def containers(test: Callable[[str], str]) -> str:
    """CEL: `test` holds for every sidecar and init container of the overlay."""
    return " && ".join(
        f"(!({present(f'{OVERLAY}.{g}')}) || {OVERLAY}.{g}.all(c, {test('c')}))" for g in CONTAINER_GROUPS
    )


def context(container: str, field: str) -> str:
    return f"has({container}.securityContext) && has({container}.securityContext.{field})"
