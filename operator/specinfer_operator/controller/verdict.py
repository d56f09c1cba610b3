"""A canary's verdict (pure): decode speed at comparable load decides; acceptance explains.

What users pay for is the tokens per second a decoding request gets: tokens per step over the step's time,
both from the engines' own counters. A change of method, draft model, option, image or K is judged on that
alone. A shorter acceptance length that decodes faster (adaptive verification, a lower K) is promoted; a
longer one whose step is much slower (a big draft model), or an image that halves speed at equal acceptance,
is rolled back.

Speed depends on load: a step serving eight requests takes longer than one serving one. The two sides are
compared only where they served comparable batches (within BATCH_SPREAD of each other), or, when the step
cost has been fitted over batch sizes (status.tuning.profiles of the stable configuration), with the stable
speed moved to the canary's batch through that fit. Otherwise the verdict waits for comparable load.

One window is not enough evidence: a CPU or a shared node moves step times by tens of percent from one
window to the next. Every new canary measurement (a new status.rollout.canary.observed) with enough draft
tokens on both sides adds one comparison to the record; the verdict takes the median ratio of the last
canary.minComparisons, so one noisy window does not decide either way. A canary whose acceptance collapsed
below telemetry.minMeanAcceptanceLength and whose requests do not decode faster is rolled back at once, with
that reason. An engine-side mechanism Auto tries (tuning/adaptivity.py) must do better than not be slower:
it is kept only when its requests decode at least minGainPercent faster, since what it replaces was measured.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from specinfer_operator.api.rollout import CanarySettings
from specinfer_operator.api.timestamps import parse
from specinfer_operator.controller.conditions import CANARY, NOT_FASTER, SLOWER
from specinfer_operator.tuning.auto import profile_of
from specinfer_operator.tuning.model import Cost, comparable, fit

BELOW_FLOOR = "AcceptanceBelowFloor"
KEEP_COMPARISONS = 8


@dataclass(frozen=True)
class Verdict:
    """What the figures say: promote, roll back (with the reason and both figures), or wait (and why), and
    the comparisons made so far (kept in the canary's record)."""

    action: Literal["promote", "rollback", "wait"]
    reason: str
    message: str
    comparisons: tuple[dict[str, Any], ...] = ()


def speed(figures: dict[str, Any] | None) -> float | None:
    """Tokens per second a decoding request gets: tokens per step over the step's time."""
    tokens, milliseconds = (figures or {}).get("tokensPerStep"), (figures or {}).get("stepMilliseconds")
    return None if tokens is None or not milliseconds else 1000 * float(tokens) / float(milliseconds)


def _length(figures: dict[str, Any] | None) -> float | None:
    value = (figures or {}).get("meanAcceptanceLength")
    return None if value is None else float(value)


def _evidence(figures: dict[str, Any] | None) -> int:
    return int((figures or {}).get("draftTokens") or 0)


def _batch(figures: dict[str, Any]) -> float:
    return float(figures.get("decodeBatch") or 1.0)


def _since(figures: dict[str, Any], when: str) -> bool:
    """Whether the window of `figures` started at or after `when` (RFC 3339)."""
    try:
        start = parse(str(figures.get("measuredTime"))) - timedelta(seconds=float(figures.get("windowSeconds") or 0))
        return start >= parse(when)
    except ValueError:
        return False


def reference(record: dict[str, Any], stable: dict[str, Any] | None, stable_pods: int) -> dict[str, Any] | None:
    """The figures the canary is compared with: the stable pods' while some run, else the last good
    configuration's at the canary's start."""
    if stable_pods > 0:
        return stable if stable is not None and stable.get("configHash") == record.get("stableConfigHash") else None
    return record.get("baseline")


def stable_cost(status: dict[str, Any], stable_family: str | None) -> tuple[Cost, int] | None:
    """The step cost fitted over batch sizes from tuning's profiles of the stable configuration's family,
    with that configuration's K; None when tuning measured no such spread of batches."""
    tuning = status.get("tuning") or {}
    good = (status.get("rollout") or {}).get("lastGood") or {}
    if not stable_family or tuning.get("family") != stable_family or "numSpeculativeTokens" not in good:
        return None
    profiles = [p for p in map(profile_of, tuning.get("profiles") or []) if p is not None]
    cost = fit(profiles)
    if cost is None or not (cost.per_request or cost.per_request_token):
        return None
    return cost, int(good["numSpeculativeTokens"])


def compare(
    canary: dict[str, Any], base: dict[str, Any], cost: tuple[Cost, int] | None
) -> tuple[dict[str, Any] | None, str]:
    """One comparison of the canary's speed with the reference's at the canary's batch, or None and why not."""
    mine, theirs = speed(canary), speed(base)
    if mine is None or theirs is None:
        return None, "waiting for step times: the engines export no inter-token latency yet"
    at, was = _batch(canary), _batch(base)
    normalised = not comparable(at, was)
    if normalised:
        if cost is None:
            return None, (
                f"waiting for comparable load: the canary decoded {at:.1f} requests per step, the stable "
                f"configuration {was:.1f}, and no fitted step cost relates the two (status.tuning.profiles)"
            )
        model, k = cost
        theirs *= model.seconds(k, was) / model.seconds(k, at)
    found = {
        "measuredTime": str(canary.get("measuredTime", "")),
        "canaryTokensPerSecond": round(mine, 1),
        "stableTokensPerSecond": round(theirs, 1),
        "canaryBatch": round(at, 2),
        "stableBatch": round(was, 2),
        "normalised": normalised,
        "ratio": round(mine / theirs, 4),
    }
    return found, ""


def _explain(canary: dict[str, Any], base: dict[str, Any]) -> str:
    """Acceptance and step time of both sides: why one decodes faster."""
    parts = []
    mine, theirs = _length(canary), _length(base)
    if mine is not None and theirs is not None:
        parts.append(f"acceptance length {mine:.2f} vs {theirs:.2f}")
    parts.append(
        f"{canary.get('tokensPerStep')} vs {base.get('tokensPerStep')} tokens per "
        f"{canary.get('stepMilliseconds')} vs {base.get('stepMilliseconds')} ms step"
    )
    return "; ".join(parts)


def _said(latest: dict[str, Any], ratio: float, which: str, counted: int) -> str:
    batch = f"batch {latest['canaryBatch']:g}" + (" (normalised)" if latest["normalised"] else "")
    return (
        f"canary {latest['canaryTokensPerSecond']:.0f} tokens/s per request vs {latest['stableTokensPerSecond']:.0f} "
        f"for the {which} at {batch}, {ratio - 1:+.1%} "
        + ("(one comparison)" if counted == 1 else f"(median of {counted} comparisons)")
    )


def judge(
    record: dict[str, Any],
    stable: dict[str, Any] | None,
    stable_pods: int,
    healthy: bool,
    settings: CanarySettings,
    floor: float,
    action: str | None,
    cost: tuple[Cost, int] | None = None,
    min_gain: int | None = None,
) -> Verdict:
    """The canary's verdict from its figures (record.observed), the stable ones, its pods' health, a person's
    `action` and the fitted step cost of the stable configuration (normalising load); `floor`
    (telemetry.minMeanAcceptanceLength) is what a collapse of acceptance means; `min_gain` the percent an
    engine-side mechanism Auto tries must be faster by."""
    if action == "promote":
        return Verdict("promote", "PromotedByHand", "promoted by hand (annotation specinfer.io/canary=promote)")
    if action == "abort":
        return Verdict("rollback", "AbortedByHand", "aborted by hand (annotation specinfer.io/canary=abort)")
    if not healthy:
        return Verdict("wait", CANARY, "waiting for the canary's pods to be ready")
    need = settings.min_draft_tokens
    canary = record.get("observed") or {}
    base = reference(record, stable, stable_pods)
    length = _length(canary)
    if _evidence(canary) < need or length is None:
        return Verdict("wait", CANARY, f"waiting for evidence: the canary drafted {_evidence(canary)}/{need} tokens")
    said = f"canary mean acceptance length {length:.2f} ({_evidence(canary)} draft tokens)"
    if base is None or _evidence(base) < need:
        if stable_pods > 0:
            message = f"waiting for evidence: the stable pods drafted {_evidence(base)}/{need} tokens"
            return Verdict("wait", CANARY, message)
        if length < floor:
            message = f"{said} is below telemetry.minMeanAcceptanceLength {floor:g}; no figures of the last good one"
            return Verdict("rollback", BELOW_FLOOR, message)
        return Verdict("promote", "Promoted", f"{said} is at least {floor:g}; no figures of the last good one")
    which = "stable pods" if stable_pods > 0 else "last good configuration (sequential)"
    earlier = tuple(record.get("comparisons") or ())
    scaled = record.get("scaledTime")
    if scaled and not all(_since(f, scaled) for f in ((canary, base) if stable_pods > 0 else (canary,))):
        message = f"waiting for figures measured wholly after the replicas changed at {scaled}"
        return Verdict("wait", CANARY, message, earlier)
    latest, why = compare(canary, base, cost)
    if latest is None:
        return Verdict("wait", CANARY, why, earlier)
    fresh = not earlier or earlier[-1].get("measuredTime") != latest["measuredTime"]
    comparisons = (*earlier, latest)[-KEEP_COMPARISONS:] if fresh else earlier
    explained = _explain(canary, base)
    if length < floor and latest["ratio"] <= 1:
        message = (
            f"acceptance collapsed: {said} is below telemetry.minMeanAcceptanceLength {floor:g}, and its "
            f"requests decode no faster: {_said(latest, latest['ratio'], which, 1)}; {explained}"
        )
        return Verdict("rollback", BELOW_FLOOR, message, comparisons)
    counted = comparisons[-settings.min_comparisons :]
    ratio = statistics.median(float(c["ratio"]) for c in counted)
    compared = f"{_said(latest, ratio, which, len(counted))}; {explained}"
    if len(counted) < settings.min_comparisons:
        return Verdict(
            "wait", CANARY, f"compared {len(counted)}/{settings.min_comparisons} times: {compared}", comparisons
        )
    if min_gain is not None:
        if ratio < 1 + min_gain / 100:
            return Verdict(
                "rollback", NOT_FASTER, f"{compared}: less than minGainPercent {min_gain}% faster", comparisons
            )
        return Verdict("promote", "Promoted", f"{compared}: at least {min_gain}% faster", comparisons)
    drop = settings.max_speed_drop_percent
    if ratio < 1 - drop / 100:
        return Verdict("rollback", SLOWER, f"{compared}: more than {drop}% slower", comparisons)
    return Verdict("promote", "Promoted", f"{compared}: {'faster' if ratio >= 1 else f'within {drop}%'}", comparisons)
