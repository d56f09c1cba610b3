"""Rollback on failure (pure): whether the spec's configuration failed, and the Deployment that restores
the last good one.

Rollouts replace NPU pods in place, so a configuration whose pods cannot serve takes replicas down with it.
When the pods of a new configuration fail (crash-loop, refused by the runtime's preflight, image or config
errors) or its rollout misses the deadline, the operator puts the last configuration that served on every
replica (status.rollout.lastGood) back, and records the failure (status.rollout.rolledBack) with the spec's
generation: the same spec is not tried again, an edited one is. The last good pod template comes from its
ReplicaSet, which the Deployment keeps (revisionHistoryLimit) along with the ConfigMap it mounts.
"""

from __future__ import annotations

from typing import Any

from specinfer_operator import workload
from specinfer_operator.health import FAILED_CREATE, Health, pod_problem
from specinfer_operator.podspec import CONFIG_HASH_ANNOTATION
from specinfer_operator.status import Desired, Observed

# Pod states that a configuration, not the cluster, is to blame for, once the kubelet has retried:
# ErrImagePull (a first failed pull, perhaps a registry hiccup) and Unschedulable (capacity may come) are not
# among them; a rollout that never gets past them misses the deadline instead.
FAILURES = ("CrashLoopBackOff", "ImagePullBackOff", "CreateContainerConfigError", "ProgressDeadlineExceeded")
# A refusal of the pods that the configuration is to blame for: the namespace's Pod Security level or an
# admission policy refusing its pod template (a quota refusing it is the cluster's state: it may pass).
REFUSED_BY_ADMISSION = ("violates PodSecurity", "denied")


def in_force(previous: dict[str, Any], generation: int, config_hash: str) -> dict[str, Any] | None:
    """The rollback recorded for this generation of the spec and this configuration, if any: a new
    generation tries again, and so does a configuration that changed without one (Auto tuning moved K)."""
    record: dict[str, Any] | None = (previous.get("rollout") or {}).get("rolledBack")
    if record is None or record.get("generation") != generation or record.get("configHash") != config_hash:
        return None
    return record


def failure(desired: Desired, observed: Observed, state: Health) -> tuple[str, str] | None:
    """(reason, message) when the configuration's own pods failed or its rollout missed the deadline; the
    pods of the previous configuration are not its doing."""
    if state.reason == "ProgressDeadlineExceeded":
        return state.reason, state.message or "the rollout made no progress within progressDeadlineSeconds"
    if state.reason == FAILED_CREATE and any(words in state.message for words in REFUSED_BY_ADMISSION):
        return state.reason, state.message
    own = [p for p in observed.pods if _hash(p.get("metadata")) == desired.config_hash]
    problem = pod_problem(own, desired)
    return problem if problem is not None and problem[0] in FAILURES else None


def decide(
    previous: dict[str, Any], desired: Desired, observed: Observed, state: Health, generation: int, now: str
) -> dict[str, Any] | None:
    """The rollback record to write, when the spec's configuration failed and a different one served
    everywhere before it; None to leave things as they are (the failure then shows as Degraded)."""
    good = (previous.get("rollout") or {}).get("lastGood")
    if good is None or good.get("configHash") == desired.config_hash:
        return None
    failed = failure(desired, observed, state)
    if failed is None:
        return None
    reason, message = failed
    return {
        "configHash": desired.config_hash,
        "generation": generation,
        "reason": reason,
        "message": message,
        "time": now,
    }


def restored(wanted: dict[str, Any], owners: list[dict[str, Any]], config_hash: str) -> dict[str, Any] | None:
    """`wanted` (the rendered workload) with the pod templates of the first of `owners` (the live workload,
    or its history: ReplicaSets, a LeaderWorkerSet's revisions) whose templates ran `config_hash`, or None
    when none has them."""
    for owner in owners:
        if workload.template_hash(owner) == config_hash:
            return workload.with_templates_of(wanted, owner)
    return None


def _hash(metadata: dict[str, Any] | None) -> str | None:
    value = ((metadata or {}).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
    return None if value is None else str(value)
