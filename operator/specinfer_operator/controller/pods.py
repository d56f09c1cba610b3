"""What the operator keeps of an engine pod between events, for the status (the pod watch's index,
manager/podwatch.py `PodIndex`).

Anyone who may create a pod may label it as an engine of any resource of its namespace, Pending or not,
with up to 1.5 MiB of labels and 256 KiB of annotations: kept whole, one such pod cost the operator 8.7 MiB.
So only what the status reads is kept, each piece bounded, and only of pods whose controller is of a kind
that makes engine pods (a ReplicaSet or a StatefulSet). Whether the chain above that controller ends at the
resource costs API reads, which the index must not make (the watch runs it for every pod event, one at a
time): it is verified before the pod is used (`context.observe`, by `Ownership.pod_resource`), and what
is kept meanwhile is bounded.

What a pod's creator writes (labels, annotations, owner references) is kept to the keys the operator
reads, each no longer than the API server allows a real one: a few KiB whatever the pod carries. What the
kubelet and the scheduler write (conditions, container statuses) is bounded by count and length. One pod
costs at most MAX_KEPT_BYTES of the operator's memory (tests/unit/operator/controller/test_pods.py measures
it), about 7 KiB as a real engine pod is.
"""

from __future__ import annotations

from typing import Any

from specinfer_operator.api.container import ENGINE_CONTAINER
from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION, INSTANCE_LABEL, TEMPLATE_HASH_LABEL
from specinfer_operator.controller.health import MAX_SAID
from specinfer_operator.platform.ownership import controller, maker
from specinfer_operator.render.workload import GROUP_INDEX_LABEL, SET_LABEL, WORKER_INDEX_LABEL

LABELS = (INSTANCE_LABEL, TEMPLATE_HASH_LABEL, SET_LABEL, GROUP_INDEX_LABEL, WORKER_INDEX_LABEL)
ANNOTATIONS = (CONFIG_HASH_ANNOTATION,)
REFERENCE = ("apiVersion", "kind", "name", "uid")
CONDITIONS = ("Ready", "PodScheduled")  # what readiness and the Unschedulable problem read
MAX_VALUE = 63  # a label value's own limit; the operator's config hash is 10 characters
MAX_NAME = 253  # an object name's own limit; also a reason's and an owner reference field's
MAX_CONTAINERS = 4  # container statuses kept: the engine's first
MAX_TERMINATION = 4096  # the kubelet's own limit on a termination message; only the engine's is kept
MAX_KEPT_BYTES = 72 * 1024  # one pod, at worst: every string at its bound, in 4-byte characters


def _cut(value: Any, limit: int) -> str:
    return str(value)[:limit]


def _kept_reference(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controller reference, if it is of a kind that makes engine pods and no longer than a real
    one can be."""
    ref = controller(meta)
    if ref is None or not maker(ref) or any(len(str(ref.get(k, ""))) > MAX_NAME for k in REFERENCE):
        return None
    return {**{k: str(ref.get(k, "")) for k in REFERENCE}, "controller": True}


def _condition(condition: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": _cut(condition.get("type"), MAX_NAME),
        "status": _cut(condition.get("status"), MAX_NAME),
        "reason": _cut(condition.get("reason", ""), MAX_NAME),
        "message": _cut(condition.get("message", ""), MAX_SAID),
    }


def _container(status: dict[str, Any]) -> dict[str, Any]:
    """What pod_problem reads of a container: its name, restarts, why it waits, and (the engine's alone) how
    it last ended."""
    name = _cut(status.get("name", ""), MAX_VALUE)
    waiting = (status.get("state") or {}).get("waiting") or {}
    terminated = (status.get("lastState") or {}).get("terminated") or {}
    restarts = status.get("restartCount", 0)
    kept: dict[str, Any] = {"name": name, "restartCount": restarts if isinstance(restarts, int) else 0}
    if waiting:
        reason = _cut(waiting.get("reason", ""), MAX_NAME)
        kept["state"] = {"waiting": {"reason": reason, "message": _cut(waiting.get("message", ""), MAX_SAID)}}
    if terminated:
        code = terminated.get("exitCode")
        ended: dict[str, Any] = {"exitCode": code if isinstance(code, int) else "?"}
        if name == ENGINE_CONTAINER and terminated.get("message"):
            ended["message"] = _cut(terminated["message"], MAX_TERMINATION)
        kept["lastState"] = {"terminated": ended}
    return kept


def kept(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod as the status reads it, bounded; None for a pod that no chain of the operator's can have made
    (no controller, or one of another kind)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ref = _kept_reference(meta)
    if ref is None:
        return None
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    engine = next((c for c in spec.get("containers") or [] if c.get("name") == ENGINE_CONTAINER), None)
    statuses = sorted(status.get("containerStatuses") or [], key=lambda c: c.get("name") != ENGINE_CONTAINER)
    return {
        "metadata": {
            "name": _cut(meta.get("name", ""), MAX_NAME),
            "namespace": _cut(meta.get("namespace", ""), MAX_NAME),
            "uid": _cut(meta.get("uid", ""), 36),
            "deletionTimestamp": meta.get("deletionTimestamp") and _cut(meta["deletionTimestamp"], 40),
            "labels": {k: _cut(labels[k], MAX_VALUE) for k in LABELS if k in labels},
            "annotations": {k: _cut(annotations[k], MAX_VALUE) for k in ANNOTATIONS if k in annotations},
            "ownerReferences": [ref],
        },
        # Of the spec, what the status needs: whether the engine's termination message is its own words.
        "spec": {
            "containers": []
            if engine is None
            else [
                {"name": ENGINE_CONTAINER, "terminationMessagePolicy": str(engine.get("terminationMessagePolicy"))[:40]}
            ]
        },
        "status": {
            "conditions": [_condition(c) for c in status.get("conditions") or [] if c.get("type") in CONDITIONS][
                : len(CONDITIONS)
            ],
            "containerStatuses": [_container(c) for c in statuses[:MAX_CONTAINERS]],
        },
    }
