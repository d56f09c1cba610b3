"""The canary of `rollout.strategy: Canary` (pure): its Deployment, its record in status, and its verdict.

A new configuration first runs on `canary.size(replicas)` pods of a second Deployment, `<name>-canary`,
behind the same Service (its pods carry a track label the Service ignores); the stable Deployment keeps
the last good configuration on the other pods (all of them when maxSurge leaves room for the canary, so
no extra NPU pod is needed unless maxSurge allows one). Both are measured by the telemetry loop. The
canary is promoted (the stable Deployment rolls every pod to the new configuration, and the canary goes)
when its pods are healthy and its requests decode about as fast as the stable pods' at comparable load
(verdict.py); otherwise it is rolled back like a failed configuration. With every pod in the canary the
comparison is sequential: against the figures the last good configuration showed when the canary started.

Where a canary stands is read from the cluster and the status: promoting once status.rollout.canary says
so or the stable Deployment runs the new configuration, rolled back once status.rollout.rolledBack names
it. The operator can therefore stop at any point and reach the same outcome after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.labels import TRACK_LABEL
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.controller.conditions import CANARY, PROMOTING
from specinfer_operator.render import workload


def name_of(name: str) -> str:
    return f"{name}-canary"


def trial(wanted: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The canary's workload: `wanted` (the spec's rendered Deployment or LeaderWorkerSet) on `replicas`
    replicas, its pods told apart by a track label, which the Service ignores."""
    return workload.canary(wanted, name_of(wanted["metadata"]["name"]), f"{TRACK_LABEL}=canary", replicas)


def stable_replicas(cr: SpeculativeInference, canary: int) -> int:
    """Pods the stable Deployment keeps during the canary: all of them when maxSurge makes room for the
    canary's, else the rest (NPUs are scarce)."""
    replicas, surge = cr.spec.replicas, cr.spec.rollout.max_surge
    return replicas if surge >= canary else replicas - canary


def wanted(cr: SpeculativeInference, config_hash: str, previous: dict[str, Any]) -> bool:
    """Whether this configuration goes through a canary: strategy Canary, a different configuration served
    on every replica before it (a first rollout has nothing to compare with), and pods to run it."""
    good = (previous.get("rollout") or {}).get("lastGood") or {}
    return (
        cr.spec.rollout.strategy == "Canary"
        and cr.spec.replicas > 0
        and bool(good.get("configHash"))
        and good.get("configHash") != config_hash
    )


@dataclass(frozen=True)
class CanaryState:
    """Where the canary of one configuration stands."""

    config_hash: str
    phase: str  # CANARY or PROMOTING
    replicas: int
    stable_replicas: int
    message: str
    family: str = ""  # the canary's configuration but for K; the stable one's is in lastGood


def record(
    previous: dict[str, Any],
    state: CanaryState,
    good_hash: str,
    now: str,
) -> dict[str, Any]:
    """status.rollout.canary: kept while the canary of this configuration lasts, with the last good
    configuration's figures taken at its start (the reference of a sequential comparison)."""
    before = (previous.get("rollout") or {}).get("canary") or {}
    if before.get("configHash") != state.config_hash:
        measured = (previous.get("speculation") or {}).get("observed")
        baseline = measured if measured is not None and measured.get("configHash") == good_hash else None
        before = {"startTime": now, **({"baseline": baseline} if baseline is not None else {})}
    keep = {k: before[k] for k in ("startTime", "scaledTime", "baseline", "observed", "comparisons") if k in before}
    good = (previous.get("rollout") or {}).get("lastGood") or {}
    families = {"family": state.family, "stableFamily": good.get("family")}
    return {
        "configHash": state.config_hash,
        "stableConfigHash": good_hash,
        **{k: v for k, v in families.items() if v},
        "phase": state.phase,
        "replicas": state.replicas,
        "stableReplicas": state.stable_replicas,
        "message": state.message,
        **keep,
    }


def rescaled(record: dict[str, Any], size: int, stable_size: int, now: str) -> dict[str, Any]:
    """The record after the replicas changed to `size` canary and `stable_size` stable pods (an autoscaler, a person):
    the same configurations, so the canary goes on, but the load on each side moved, so the comparisons made
    before are dropped and only figures measured wholly after `now` count (verdict.py)."""
    kept = {k: v for k, v in record.items() if k != "comparisons"}
    return {**kept, "replicas": size, "stableReplicas": stable_size, "scaledTime": now}


def phase_of(live_stable_hash: str | None, config_hash: str, recorded: str | None) -> str:
    """Promoting once promotion was decided (recorded) or the stable Deployment runs the new configuration;
    Canary before."""
    return PROMOTING if recorded == PROMOTING or live_stable_hash == config_hash else CANARY
