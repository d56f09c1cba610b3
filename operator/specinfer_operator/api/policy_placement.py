"""The tenant policy's placement rules: priority, scheduler, tolerations and the control plane's nodes.

By default a resource may not take a `system-*` priority (which preempts the cluster's own pods), hand its
pods to a scheduler other than the default one, tolerate every taint (a toleration without key), or select
or tolerate the control plane's nodes; the policy can allow each.
"""

from __future__ import annotations

from specinfer_operator.api.policy_cel import SPEC, WHY, forbid
from specinfer_runtime.celrules import Rule, along, cel_in

PLACEMENT = f"{SPEC}.placement"
# The label and taint of control-plane nodes (kubeadm's; master before Kubernetes 1.24).
CONTROL_PLANE = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
SYSTEM_PRIORITY = "system-"
DEFAULT_SCHEDULER = "default-scheduler"
_NODE_AFFINITY = f"{PLACEMENT}.affinity.nodeAffinity"
_TERMS = (
    f"{_NODE_AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchExpressions[]",
    f"{_NODE_AFFINITY}.preferredDuringSchedulingIgnoredDuringExecution[].preference.matchExpressions[]",
)
_NOT_CONTROL_PLANE = (
    f"which {WHY} does not allow: run on worker nodes, or ask the platform team to allow the control plane"
)


def _priority_allowed(name: str) -> str:
    allowed = "params.spec.allowedPriorityClasses"
    return f"(size({allowed}) == 0 ? !{name}.startsWith('{SYSTEM_PRIORITY}') : {name} in {allowed})"


def _selects_no_control_plane(requirement: str) -> str:
    """CEL: the node selector requirement `requirement` does not pick control-plane nodes (it may keep away)."""
    return f"!({cel_in(f'{requirement}.key', CONTROL_PLANE)}) || {requirement}.operator in ['NotIn', 'DoesNotExist']"


PLACEMENT_RULES: tuple[Rule, ...] = (
    forbid(
        along(f"{PLACEMENT}.priorityClassName", _priority_allowed),
        f"priorityClassName %s is not allowed by {WHY}, which allows %s (none listed: any but the "
        f"{SYSTEM_PRIORITY}* ones, which preempt the cluster's own pods): remove it, or use an allowed PriorityClass",
        ".spec.placement.priorityClassName",
        (f"{PLACEMENT}.priorityClassName", "params.spec.allowedPriorityClasses"),
    ),
    forbid(
        along(
            f"{PLACEMENT}.schedulerName",
            lambda s: f"{s} == '{DEFAULT_SCHEDULER}' || {s} in params.spec.allowedSchedulers",
        ),
        f"schedulerName %s is not allowed by {WHY}, which allows %s: remove it, or ask the platform team to allow the "
        "scheduler",
        ".spec.placement.schedulerName",
        (f"{PLACEMENT}.schedulerName", f"['{DEFAULT_SCHEDULER}'] + params.spec.allowedSchedulers"),
    ),
    forbid(
        "params.spec.tolerateAllTaintsAllowed || "
        + along(f"{PLACEMENT}.tolerations[]", lambda t: f"has({t}.key) && {t}.key != ''"),
        f"a toleration without key tolerates every taint (of its effect), which {WHY} does not allow: name the "
        "taint's key, e.g. huawei.com/Ascend910",
        ".spec.placement.tolerations",
    ),
    forbid(
        "params.spec.controlPlaneAllowed || "
        + along(f"{PLACEMENT}.tolerations[]", lambda t: f"!has({t}.key) || !({cel_in(f'{t}.key', CONTROL_PLANE)})"),
        f"tolerations %s tolerate the control plane's taint, {_NOT_CONTROL_PLANE}",
        ".spec.placement.tolerations",
        (f"{PLACEMENT}.tolerations.filter(t, has(t.key) && {cel_in('t.key', CONTROL_PLANE)}).map(t, t.key)",),
    ),
    forbid(
        "params.spec.controlPlaneAllowed || "
        + along(f"{PLACEMENT}.nodeSelector", lambda m: f"!{m}.exists(k, {cel_in('k', CONTROL_PLANE)})"),
        f"nodeSelector %s selects the control plane's nodes, {_NOT_CONTROL_PLANE}",
        ".spec.placement.nodeSelector",
        (f"{PLACEMENT}.nodeSelector.filter(k, {cel_in('k', CONTROL_PLANE)})",),
    ),
    forbid(
        "params.spec.controlPlaneAllowed || (" + " && ".join(along(t, _selects_no_control_plane) for t in _TERMS) + ")",
        f"node affinity selects the control plane's nodes ({', '.join(CONTROL_PLANE)}, with In or Exists), "
        f"{_NOT_CONTROL_PLANE}",
        ".spec.placement.affinity.nodeAffinity",
    ),
)
