"""How a generation's run and its canary ended (pure), from the Job, its pod and the resource's status.

The run's result is the termination message of the trainer container of the Job's own pod (the Job its
controller, by uid, and its controller-uid label the Job's): one line of JSON that specinfer-train writes, in a
pod the tenant controls. A pod that only carries the Job's name, a sidecar's message, or a log tail the kubelet
made the message (a policy other than File) is never read. The message is read as untrusted: at most MAX_MESSAGE
bytes, known keys only, numbers in range; anything else is kept out of the status (a failed run's message is
quoted, shortened and scrubbed, as its reason).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from specinfer_operator.learning.draft import draft_label
from specinfer_operator.platform.ownership import controlled_by
from specinfer_operator.platform.words import own_message
from specinfer_operator.render.training import TRAINER_CONTAINER
from specinfer_runtime.redaction import redact

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"  # the Job controller's, on each pod it makes
MAX_MESSAGE = 4096
MAX_REASON = 512
# The result's numbers the status takes, with their upper bounds.
_COUNTS = {"samples": 1e9, "tokens": 1e12}
_SECONDS = {"trainingSeconds": 1e7}
_WINDOW = ("oldest", "newest")  # when its samples were recorded (Unix seconds): what a rollback quarantines
MAX_TIME = 1e11


@dataclass(frozen=True)
class RunEnd:
    """A run that ended: Succeeded with its figures for the status, or Failed with why."""

    phase: Literal["Succeeded", "Failed"]
    figures: dict[str, Any]
    reason: str


def _finished(job: dict[str, Any]) -> tuple[str, str] | None:
    """(Complete or Failed, the condition's reason and message) once the Job says it ended."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            said = ": ".join(str(condition.get(k)) for k in ("reason", "message") if condition.get(k))
            return str(condition["type"]), said
    return None


def job_pod(job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest of `pods` that `job` made: controlled by it and labelled with its uid, as the Job controller
    makes them (anyone who may create a pod can give it the Job's name)."""
    uid = (job.get("metadata") or {}).get("uid")
    own = [
        p
        for p in pods
        if controlled_by(p, uid) and ((p.get("metadata") or {}).get("labels") or {}).get(CONTROLLER_UID_LABEL) == uid
    ]
    return max(own, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


def _message(pod: dict[str, Any] | None) -> str:
    """The trainer container's own termination message (see platform/words.py), bounded."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != TRAINER_CONTAINER:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        return (own_message(pod, TRAINER_CONTAINER, terminated) or "")[:MAX_MESSAGE]
    return ""


def _shown(text: str) -> str:
    """A pod's words as a reason: the first line, printable, shortened, scrubbed of anything that looks like
    a token (as the engine pods' words are: controller/health.py)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = "".join(c if c.isprintable() else "?" for c in line)
    return redact(line[:MAX_REASON] + ("..." if len(line) > MAX_REASON else ""))


def result_of(message: str) -> dict[str, Any] | None:
    """The figures of specinfer-train's result line, or None when it is not one."""
    try:
        found = json.loads(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict):
        return None
    figures: dict[str, Any] = {}
    for key, bound in (_COUNTS | _SECONDS).items():
        value = found.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None
        if not 0 <= value <= bound:
            return None
        figures[key] = round(float(value), 1) if key in _SECONDS else int(value)
    oldest, newest = (found.get(k) for k in _WINDOW)
    if isinstance(oldest, int) and isinstance(newest, int) and _time(oldest) and _time(newest) and oldest <= newest:
        figures["window"] = {"oldest": oldest, "newest": newest}
    return figures


def _time(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TIME


def run_end(job: dict[str, Any] | None, pod: dict[str, Any] | None) -> RunEnd | None:
    """How the run of `job` ended (None while it runs). A Job that is gone ended too: Failed."""
    if job is None:
        return RunEnd("Failed", {}, "its Job is gone (deleted before the operator read its result)")
    finished = _finished(job)
    if finished is None:
        return None
    kind, said = finished
    message = _message(pod)
    if kind == "Complete":
        figures = result_of(message)
        if figures is None:
            return RunEnd("Failed", {}, f"the Job completed without a result: {_shown(message) or 'no message'}")
        return RunEnd("Succeeded", figures, "")
    return RunEnd("Failed", {}, _shown(message) or said or "the Job failed")


def figures_of(observed: dict[str, Any] | None) -> dict[str, float]:
    """A configuration's figures as a generation keeps them (its speed and mean acceptance length)."""
    found = observed or {}
    keys = ("meanAcceptanceLength", "decodeTokensPerSecond")
    return {k: round(float(found[k]), 3) for k in keys if isinstance(found.get(k), int | float)}


CanaryEnd = Literal["Promoted", "RolledBack"]


def canary_end(generation: int, status: dict[str, Any]) -> tuple[CanaryEnd, str] | None:
    """How the canary of `generation` ended, from the rollout status: Promoted once it serves on every pod,
    RolledBack once a rollback of it is in force (None while its canary runs)."""
    rollout = status.get("rollout") or {}
    if rollout.get("canary"):
        return None
    label = draft_label(generation)
    back = rollout.get("rolledBack") or {}
    if back and back.get("draft") == label:
        return "RolledBack", _shown(f"{back.get('reason', '')}: {back.get('message', '')}")
    if (rollout.get("lastGood") or {}).get("draft") == label:
        return "Promoted", ""
    return None
