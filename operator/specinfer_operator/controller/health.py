"""How far what runs is from what the spec asks, from the workload and its pods (pure: no I/O).

The reasons and messages are the cluster's own where it has them (the scheduler's, the API server refusing
a pod), scrubbed of anything that looks like a token before they reach the status and events. Of what the
pods write, only the engine's own termination message is copied: what specinfer-runtime writes to
/dev/termination-log, in one bounded line. Never a log tail (the kubelet makes one the message of a
container with terminationMessagePolicy FallbackToLogsOnError, and a process that cannot start prints its
environment: `PYTHONHOME = '<a Secret's value>'`), nor a sidecar's words: whoever may read the resource
may not read what its pods read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specinfer_operator.api.container import ENGINE_CONTAINER
from specinfer_operator.platform.words import own_message
from specinfer_operator.render import workload
from specinfer_runtime.redaction import redact

if TYPE_CHECKING:
    from specinfer_operator.controller.conditions import Desired, Observed

NOT_READY_WAITING = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")
FAILED_CREATE = "FailedCreate"  # the Deployment's ReplicaFailure: its ReplicaSet's pods were refused
MAX_SAID = 1024  # characters of a termination message copied


@dataclass(frozen=True)
class Health:
    """The outcome of looking at the Deployment and its pods."""

    ready: bool
    rolled_out: bool
    reason: str
    message: str
    degraded: bool = False


def _get(obj: dict[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _deployment_condition(deployment: dict[str, Any], kind: str) -> dict[str, Any]:
    for condition in _get(deployment, "status", "conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def unschedulable_message(scheduler: str, need: int, resource: str) -> str:
    """`0/2 nodes have 8 free huawei.com/Ascend910` when NPUs are what is missing, else the scheduler's words."""
    counts = re.search(r"(\d+)/(\d+) nodes are available", scheduler)
    if counts and f"Insufficient {resource}" in scheduler:
        return f"{counts.group(1)}/{counts.group(2)} nodes have {need} free {resource}"
    return scheduler.strip()


def _own_words(pod: dict[str, Any], status: dict[str, Any]) -> str:
    """What a container that ended said of itself, as the status may show it: the engine's termination
    message when only its own file can be that message (policy File), in one line, bounded; else its exit
    code alone."""
    terminated = _get(status, "lastState", "terminated") or {}
    code = f"exit code {terminated.get('exitCode', '?')}"
    own = own_message(pod, ENGINE_CONTAINER, terminated) if status.get("name") == ENGINE_CONTAINER else None
    said = " ".join((own or "").split())
    return said[:MAX_SAID] + ("..." if len(said) > MAX_SAID else "") if said else code


def pod_problem(pods: list[dict[str, Any]], desired: Desired | None) -> tuple[str, str] | None:
    """The most telling problem among the pods: (reason, message), or None. What a pod wrote is scrubbed of
    anything that looks like a token before it reaches the status and events."""
    found = _pod_problem(pods, desired)
    return None if found is None else (found[0], redact(found[1]))


def _pod_problem(pods: list[dict[str, Any]], desired: Desired | None) -> tuple[str, str] | None:
    for pod in pods:
        for condition in _get(pod, "status", "conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                need = desired.npus_per_pod if desired else 0
                resource = desired.npu_resource if desired else ""
                return "Unschedulable", unschedulable_message(str(condition.get("message", "")), need, resource)
    for pod in pods:
        for container in _get(pod, "status", "containerStatuses") or []:
            waiting = _get(container, "state", "waiting") or {}
            reason = waiting.get("reason")
            if reason not in NOT_READY_WAITING:
                continue
            name = _get(pod, "metadata", "name")
            if reason == "CrashLoopBackOff":
                restarts = container.get("restartCount", 0)
                which = "" if container.get("name") == ENGINE_CONTAINER else f" of container {container.get('name')}"
                return reason, f"pod {name} restarted {restarts} times; last exit{which}: {_own_words(pod, container)}"
            return reason, f"pod {name}: {waiting.get('message', reason)}"
    return None


def health(desired: Desired, observed: Observed) -> Health:
    """How far the workload is from serving the desired config."""
    deployment = observed.deployment
    if deployment is None:
        return Health(False, False, "Creating", "the workload does not exist yet")
    counts = workload.counts(deployment, observed.pods)
    replicas, ready, updated = counts.replicas, counts.ready, counts.updated
    current = workload.template_hash(deployment) == desired.config_hash and counts.observed
    want, unit = desired.replicas, desired.unit()
    rolled_out = current and updated == want and ready == want and replicas == want
    progress = _deployment_condition(deployment, "Progressing")
    if progress.get("reason") == "ProgressDeadlineExceeded" and not rolled_out:
        return Health(False, False, "ProgressDeadlineExceeded", str(progress.get("message", "")), degraded=True)
    refused = _deployment_condition(deployment, "ReplicaFailure")
    if refused.get("status") == "True" and not rolled_out:
        # The API server refused the pods themselves (Pod Security, an admission policy, a quota): its words.
        said = redact(" ".join(str(refused.get("message", "")).split()))
        return Health(False, False, FAILED_CREATE, f"the ReplicaSet cannot create pods: {said}", degraded=True)
    problem = pod_problem(observed.pods, desired)
    if rolled_out:
        if want == 0:
            return Health(True, True, "ScaledToZero", "no pods requested")
        return Health(
            True,
            True,
            "Ready",
            f"{ready}/{want} {unit} serving {desired.method} with K={desired.num_speculative_tokens}",
        )
    if problem:
        return Health(False, False, problem[0], problem[1], degraded=True)
    if not current or updated < want:
        return Health(False, False, "RolloutInProgress", f"{updated}/{want} {unit} run the current configuration")
    return Health(False, False, "PodsNotReady", f"{ready}/{want} {unit} ready")
