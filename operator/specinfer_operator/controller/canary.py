"""The canary of `rollout.strategy: Canary` (pure): its Deployment, its record in status, and its verdict.

A new configuration first runs on `canary.size(replicas)` pods of a second Deployment, `<name>-canary`,
behind the same Service (its pods carry a track label the Service ignores); the stable Deployment keeps
the last good configuration on the other pods (all of them when maxSurge leaves room for the canary, so
no extra NPU pod is needed unless maxSurge allows one). Both are measured by the telemetry loop. The
canary is promoted (the stable Deployment rolls every pod to the new configuration, and the canary goes)
when its pods are healthy and its mean acceptance length is not worse than the stable pods' by more than
the tolerance; otherwise it is rolled back like a failed configuration. With every pod in the canary the
comparison is sequential: against the figures the last good configuration showed when the canary started.

Where a canary stands is read from the cluster and the status: promoting once status.rollout.canary says
so or the stable Deployment runs the new configuration, rolled back once status.rollout.rolledBack names
it. The operator can therefore stop at any point and reach the same outcome after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specinfer_operator.api.labels import TRACK_LABEL
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.api.rollout import CanarySettings
from specinfer_operator.controller.conditions import CANARY, PROMOTING, SLOWER
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


@dataclass(frozen=True)
class Verdict:
    """What the figures say: promote, roll back (with the reason and both figures), or wait (and why)."""

    action: Literal["promote", "rollback", "wait"]
    reason: str
    message: str


def _length(figures: dict[str, Any] | None) -> float | None:
    value = (figures or {}).get("meanAcceptanceLength")
    return None if value is None else float(value)


def _evidence(figures: dict[str, Any] | None) -> int:
    return int((figures or {}).get("draftTokens") or 0)


def speed(figures: dict[str, Any] | None) -> float | None:
    """Tokens per second a decoding request gets: tokens per step over the step's time."""
    tokens, milliseconds = (figures or {}).get("tokensPerStep"), (figures or {}).get("stepMilliseconds")
    return None if tokens is None or not milliseconds else 1000 * float(tokens) / float(milliseconds)


def k_only(record: dict[str, Any]) -> bool:
    """Whether the canary differs from the stable configuration in K alone (a tuning step, or a K edited
    by hand): fewer drafts give a shorter acceptance length by design, so speed decides, not acceptance."""
    family = record.get("family")
    return bool(family) and family == record.get("stableFamily")


def reference(record: dict[str, Any], stable: dict[str, Any] | None, stable_pods: int) -> dict[str, Any] | None:
    """The figures the canary is compared with: the stable pods' while some run, else the last good
    configuration's at the canary's start."""
    if stable_pods > 0:
        return stable if stable is not None and stable.get("configHash") == record.get("stableConfigHash") else None
    return record.get("baseline")


def judge(
    record: dict[str, Any],
    stable: dict[str, Any] | None,
    stable_pods: int,
    healthy: bool,
    settings: CanarySettings,
    floor: float,
    action: str | None,
) -> Verdict:
    """The canary's verdict from its figures (record.observed), the stable ones, its pods' health and a
    person's `action`; `floor` (telemetry.minMeanAcceptanceLength) judges it alone when nothing measured
    the last good configuration."""
    if action == "promote":
        return Verdict("promote", "PromotedByHand", "promoted by hand (annotation specinfer.io/canary=promote)")
    if action == "abort":
        return Verdict("rollback", "AbortedByHand", "aborted by hand (annotation specinfer.io/canary=abort)")
    if not healthy:
        return Verdict("wait", CANARY, "waiting for the canary's pods to be ready")
    need = settings.min_draft_tokens
    canary = record.get("observed")
    base = reference(record, stable, stable_pods)
    if _evidence(canary) < need or _length(canary) is None:
        return Verdict("wait", CANARY, f"waiting for evidence: the canary drafted {_evidence(canary)}/{need} tokens")
    length = _length(canary)
    assert length is not None
    said = f"canary mean acceptance length {length:.2f} ({_evidence(canary)} draft tokens)"
    if base is None or _evidence(base) < need or _length(base) is None:
        if stable_pods > 0:
            message = f"waiting for evidence: the stable pods drafted {_evidence(base)}/{need} tokens"
            return Verdict("wait", CANARY, message)
        if length < floor:
            message = f"{said} is below telemetry.minMeanAcceptanceLength {floor:g}; no figures of the last good one"
            return Verdict("rollback", "AcceptanceBelowFloor", message)
        return Verdict("promote", "Promoted", f"{said} is at least {floor:g}; no figures of the last good one")
    which = "stable pods" if stable_pods > 0 else "last good configuration (sequential)"
    if k_only(record):
        return _judge_speed(canary, base, which, settings)
    stable_length = _length(base)
    assert stable_length is not None
    compared = f"{said} vs {stable_length:.2f} for the {which} ({_evidence(base)} draft tokens)"
    drop = settings.max_mean_acceptance_length_drop
    if length < stable_length - drop:
        return Verdict("rollback", "AcceptanceBelowStable", f"{compared}: more than {drop:g} worse")
    return Verdict("promote", "Promoted", f"{compared}: within {drop:g}")


def _judge_speed(canary: dict[str, Any] | None, base: dict[str, Any], which: str, settings: CanarySettings) -> Verdict:
    """A canary that changes K alone: promoted unless its requests decode slower than the stable ones by
    more than canary.maxSpeedDropPercent."""
    mine, theirs = speed(canary), speed(base)
    if mine is None or theirs is None:
        return Verdict("wait", CANARY, "waiting for step times: the engines export no inter-token latency yet")
    compared = (
        f"canary {mine:.0f} tokens/s per request ({(canary or {}).get('tokensPerStep')} tokens per "
        f"{(canary or {}).get('stepMilliseconds')} ms step) vs {theirs:.0f} for the {which}"
    )
    drop = settings.max_speed_drop_percent
    if mine < theirs * (1 - drop / 100):
        return Verdict("rollback", SLOWER, f"{compared}: more than {drop}% slower")
    said = f"{mine / theirs - 1:+.0%}" if mine >= theirs else f"within {drop}%"
    return Verdict("promote", "Promoted", f"{compared}: {said}")


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
    keep = {k: before[k] for k in ("startTime", "baseline", "observed") if k in before}
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


def phase_of(live_stable_hash: str | None, config_hash: str, recorded: str | None) -> str:
    """Promoting once promotion was decided (recorded) or the stable Deployment runs the new configuration;
    Canary before."""
    return PROMOTING if recorded == PROMOTING or live_stable_hash == config_hash else CANARY
