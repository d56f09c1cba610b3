"""Publish a resource's status: computed from what runs, written only when it changed, and each transition
reported as an event and in the metrics. Reconcile and refresh both end here."""

from __future__ import annotations

from typing import Any

from specinfer_operator.controller.arrangement import Arrangement
from specinfer_operator.controller.conditions import Desired, Observed, Verdict, compute, transitions
from specinfer_operator.controller.context import Context
from specinfer_operator.controller.pool import POOL_CONDITION, PoolReport, fold
from specinfer_operator.platform import metrics


def status_patch(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any] | None:
    """A merge patch turning `previous` into `current` (None when equal: no write at steady state).

    Only what changed is named, at every depth: `previous` may be a moment old (the body of the event
    being handled), and naming an unchanged key would write that old value over a newer one another
    writer made meanwhile (the telemetry loop's figures, tuning's decisions). Keys that went away are set
    to null: a merge patch keeps whatever it does not name, so `speculation.observed` of a replaced
    configuration would otherwise survive the new one."""
    if previous == current:
        return None
    patch: dict[str, Any] = {}
    for key, value in current.items():
        before = previous.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = status_patch(before, value)
            if nested is not None:
                patch[key] = nested
        elif value != before or key not in previous:
            patch[key] = value
    for key in previous:
        if key not in current:
            patch[key] = None
    return patch


def _event_type(kind: str, status: bool) -> str:
    bad = (kind == "Degraded" and status) or (kind in ("ConfigValid", POOL_CONDITION) and not status)
    return "Warning" if bad else "Normal"


def publish(
    body: dict[str, Any],
    ctx: Context,
    verdict: Verdict,
    desired: Desired | None,
    observed: Observed,
    arrangement: Arrangement | None = None,
    pool: PoolReport | None = None,
) -> None:
    """Compute the status, write it only if it changed (and keep it in `body`, for a next publish), and
    report transitions as events and metrics. `pool`: how reconcile found the InferencePool (pool.py)."""
    meta = body["metadata"]
    previous = body.get("status") or {}
    rollback, record = (arrangement.rollback, arrangement.record) if arrangement else (None, None)
    now = ctx.now()
    current = compute(meta.get("generation", 0), verdict, desired, observed, previous, now, rollback, record)
    current = fold(current, pool, previous, now)
    patch = status_patch(previous, current)
    if patch is None:
        return
    ctx.kube.patch_status(meta["namespace"], meta["name"], patch)
    body["status"] = current
    metrics.STATUS_WRITES.labels(writer="reconcile").inc()
    metrics.observe_conditions(meta["namespace"], meta["name"], str(meta.get("uid", "")), current["conditions"])
    for kind, reason, message in transitions(previous, current):
        status = next(c["status"] == "True" for c in current["conditions"] if c["type"] == kind)
        if kind == "Progressing":
            if reason == "RolloutComplete":
                metrics.ROLLOUTS_FINISHED.labels(result="complete").inc()
            elif reason == "ProgressDeadlineExceeded":
                metrics.ROLLOUTS_FINISHED.labels(result="deadline_exceeded").inc()
        ctx.events(body, _event_type(kind, status), reason, message or f"{kind} is {status}")
