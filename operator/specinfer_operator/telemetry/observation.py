"""What the measured figures change in a resource's status (pure: status and figures in, patch out).

Scrapes run every 30 s; status writes must not. A write happens when a figure moved beyond its tolerance,
the pods measured changed, LowAcceptance changed, the drafts reached minDrafts (the figures became evidence),
or the last write is older than the refresh interval (while some pod answers), so a steady fleet of N
resources costs at most N writes per refresh interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api.autoscaling import AutoscalingSettings, status_of
from specinfer_operator.api.service import TelemetrySettings
from specinfer_operator.api.timestamps import age
from specinfer_operator.controller.conditions import CANARY, condition
from specinfer_operator.controller.conditions import MEASURED_CONDITION as LOW_ACCEPTANCE
from specinfer_operator.measure.window import Figures
from specinfer_operator.tuning import auto
from specinfer_operator.tuning.applied import from_ranges
from specinfer_runtime.tokens import SCHEDULE_FIELD

RATE_TOLERANCE = 0.01  # acceptance rate and per-position rates, absolute
LENGTH_TOLERANCE = 0.02  # mean acceptance length, tokens per step
DRAFTED_TOLERANCE = 0.25  # tokens per draft: under a schedule, the K in force moved with the batch
BATCH_TOLERANCE = 0.25  # decode batch, relative: the load per engine moved (a scale event, a surge)
MAX_FAILURES = 16  # pods named in scrapeFailures; the count of the others is podsMeasured's shortfall
FAILURE_EVENTS = 3  # pods named in one ScrapeFailed event


@dataclass(frozen=True)
class Update:
    """A status merge patch and the events that go with it."""

    patch: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)


def observed(figures: Figures, config_hash: str, now: str) -> dict[str, Any]:
    """status.speculation.observed for these figures."""
    counts, ratios = figures.counts, figures.acceptance
    out: dict[str, Any] = {
        "configHash": config_hash,
        "windowSeconds": round(figures.seconds),
        "measuredTime": now,
        "pods": figures.pods,
        "podsMeasured": figures.pods_measured,
        "drafts": counts.drafts,
        "draftTokens": counts.draft_tokens,
        "acceptedTokens": counts.accepted,
    }
    if counts.drafts:
        out["draftTokensPerDraft"] = round(counts.draft_tokens / counts.drafts, 2)
    if ratios.acceptance_rate is not None:
        out["acceptanceRate"] = round(ratios.acceptance_rate, 4)
    if ratios.mean_acceptance_length is not None:
        out["meanAcceptanceLength"] = round(ratios.mean_acceptance_length, 3)
    if ratios.position_rates is not None:
        out["positionAcceptanceRates"] = [round(r, 4) for r in ratios.position_rates]
    steps = counts.steps
    if steps.steps:
        out["stepMilliseconds"] = round(1000 * steps.seconds / steps.steps, 3)
        out["tokensPerStep"] = round(max(0, steps.generated - steps.requests) / steps.steps, 3)
        if steps.seconds > 0:
            out["decodeTokensPerSecond"] = round(max(0, steps.generated - steps.requests) / steps.seconds, 1)
    if steps.iterations:
        out["decodeBatch"] = round(steps.steps / steps.iterations, 2)
    if figures.seconds > 0 and steps.generated:
        out["tokensPerSecond"] = round(steps.generated / figures.seconds, 1)
    if figures.failures:
        out["scrapeFailures"] = [
            {"pod": pod, "result": why.result, "reason": why.reason} for pod, why in figures.failures[:MAX_FAILURES]
        ]
    return out


def _failures(obs: dict[str, Any] | None) -> dict[str, str]:
    return {f["pod"]: f["reason"] for f in (obs or {}).get("scrapeFailures") or []}


def failure_events(before: dict[str, Any] | None, after: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A ScrapeFailed event when pods fail that did not (or now fail otherwise): once, not every round."""
    known, now = _failures(before), _failures(after)
    new = [f"pod {pod}: {reason}" for pod, reason in now.items() if known.get(pod) != reason]
    if not new:
        return []
    more = f"; and {len(new) - FAILURE_EVENTS} more" if len(new) > FAILURE_EVENTS else ""
    message = "; ".join(new[:FAILURE_EVENTS]) + more + " (figures come from the pods that answered)"
    return [("Warning", "ScrapeFailed", message)]


def _said(obs: dict[str, Any]) -> str:
    return f"over the last {obs['windowSeconds']} s ({obs['drafts']} drafts from {obs['podsMeasured']} pods)"


def low_acceptance(
    obs: dict[str, Any], settings: TelemetrySettings, previous: list[dict[str, Any]], generation: int, now: str
) -> dict[str, Any] | None:
    """The LowAcceptance condition: judged only on enough drafts, else left as it was (None if never judged)."""
    before = next((c for c in previous if c.get("type") == LOW_ACCEPTANCE), None)
    length = obs.get("meanAcceptanceLength")
    if length is None or not settings.evidence(obs):
        return before
    floor = settings.min_mean_acceptance_length
    if length < floor:
        message = (
            f"mean acceptance length {length:.2f} is below {floor:g} {_said(obs)}: speculation costs more "
            "than it gives; lower numSpeculativeTokens, or try another method or draft model"
        )
        return condition(LOW_ACCEPTANCE, True, "BelowThreshold", message, generation, previous, now)
    message = f"mean acceptance length {length:.2f} is at least {floor:g} {_said(obs)}"
    return condition(LOW_ACCEPTANCE, False, "AboveThreshold", message, generation, previous, now)


def moved(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether `after` tells the reader something `before` does not (counts alone always move)."""
    if any(before.get(k) != after.get(k) for k in ("configHash", "pods", "podsMeasured")):
        return True
    if _failures(before) != _failures(after):
        return True
    absolute = (
        ("acceptanceRate", RATE_TOLERANCE),
        ("meanAcceptanceLength", LENGTH_TOLERANCE),
        ("draftTokensPerDraft", DRAFTED_TOLERANCE),
    )
    for key, tolerance in absolute:
        a, b = before.get(key), after.get(key)
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > tolerance):
            return True
    a_batch, b_batch = before.get("decodeBatch"), after.get("decodeBatch")
    if (a_batch is None) != (b_batch is None) or (a_batch and b_batch and abs(b_batch / a_batch - 1) > BATCH_TOLERANCE):
        return True
    a_rates, b_rates = before.get("positionAcceptanceRates") or [], after.get("positionAcceptanceRates") or []
    if len(a_rates) != len(b_rates):
        return True
    return any(abs(x - y) > RATE_TOLERANCE for x, y in zip(a_rates, b_rates, strict=True))


def _nearer(before: dict[str, Any] | None, after: dict[str, Any], need: int | None, beyond: bool = False) -> bool:
    """Whether the draft tokens passed another tenth of the way to `need` (the evidence a canary waits for):
    counts alone do not move the figures, and a judge reading stale counts would wait longer than needed.
    With `beyond` (the canary's own figures), every tenth of `need` more counts past it too: each write is one
    more comparison for the canary's verdict (controller/verdict.py)."""
    if not need:
        return False

    def tenths(draft_tokens: int) -> int:
        found = draft_tokens * 10 // need
        return found if beyond else min(found, 10)

    return tenths(int((before or {}).get("draftTokens", 0))) != tenths(int(after["draftTokens"]))


def update(
    status: dict[str, Any],
    figures: Figures,
    settings: TelemetrySettings,
    generation: int,
    now: str,
    refresh: float,
    need: int | None = None,
    autoscaling: AutoscalingSettings | None = None,
) -> Update | None:
    """The status change these figures call for, or None. `status` is the resource's current status: the
    figures belong to its configHash (the caller measured the pods running it). With `need` (a canary is
    compared with these figures), each tenth of the way to that many draft tokens is written too. With
    `autoscaling` (the spec's), whether its speed objective is met is written when it turns."""
    config_hash = status.get("configHash")
    if not config_hash:
        return None
    written = (status.get("speculation") or {}).get("observed") or {}
    before = written if written.get("configHash") == config_hash else None
    after = observed(figures, config_hash, now)
    conditions = status.get("conditions") or []
    old = next((c for c in conditions if c.get("type") == LOW_ACCEPTANCE), None)
    new = low_acceptance(after, settings, conditions, generation, now)
    judged = new is not None and new is not old
    turned = judged and (old or {}).get("reason") != (new or {}).get("reason")
    # Refreshing says "still measured, still these figures"; with no pod answering there is nothing to say.
    stale = before is not None and after["podsMeasured"] > 0 and age(before.get("measuredTime"), now) >= refresh
    scaling = status_of(autoscaling, after) if autoscaling is not None else None
    objective = scaling is not None and scaling != status.get("autoscaling")
    # Figures become evidence at minDrafts (what LowAcceptance and learning wait for): news, if nothing moved.
    evidenced = before is not None and settings.evidence(before) != settings.evidence(after)
    if (
        before is not None
        and not turned
        and not stale
        and not objective
        and not evidenced
        and not moved(before, after)
        and not _nearer(before, after, need)
    ):
        return None
    # A merge patch keeps keys it does not name: a ratio that is gone (no drafts) is removed explicitly.
    patch: dict[str, Any] = {"speculation": {"observed": {**dict.fromkeys(written), **after}}}
    if objective:
        patch["autoscaling"] = scaling
    if judged:  # its message carries the figures: refresh it with them
        patch["conditions"] = [c for c in conditions if c.get("type") != LOW_ACCEPTANCE] + [new]
    events = failure_events(before, after)
    if turned and new is not None and new["status"] == "True":
        events.append(("Warning", LOW_ACCEPTANCE, new["message"]))
    elif turned and new is not None and old is not None and old["status"] == "True":
        events.append(("Normal", "AcceptanceRecovered", new["message"]))
    return Update(patch, events)


def canary_update(
    status: dict[str, Any], figures: Figures, need: int, now: str, refresh: float
) -> dict[str, Any] | None:
    """The patch of status.rollout.canary.observed for the canary's figures, or None: written when they
    moved, at each tenth of `need` draft tokens more (past it, each is a comparison for the verdict), or
    when stale."""
    record = (status.get("rollout") or {}).get("canary") or {}
    config_hash = record.get("configHash")
    if not config_hash:
        return None
    written = record.get("observed") or {}
    before = written if written.get("configHash") == config_hash else None
    after = observed(figures, config_hash, now)

    stale = before is not None and after["podsMeasured"] > 0 and age(before.get("measuredTime"), now) >= refresh
    if before is not None and not _nearer(before, after, need, True) and not stale and not moved(before, after):
        return None
    return {"rollout": {"canary": {"observed": {**dict.fromkeys(written), **after}}}}


def measured(status: dict[str, Any], figures: Figures, trial: Figures | None) -> list[auto.Measured]:
    """The serving pods' figures with their K and schedule; the canary's (`trial`), when it changes K alone
    (its family is tuning's), with the schedule Auto is trying on it (if any)."""
    speculation = status.get("speculation") or {}
    found = [(int(speculation.get("numSpeculativeTokens") or 0), from_ranges(speculation.get(SCHEDULE_FIELD)), figures)]
    record = (status.get("rollout") or {}).get("canary") or {}
    tuning = status.get("tuning") or {}
    change = tuning.get("lastChange") or {}
    if trial is not None and record.get("phase") == CANARY and record.get("family") == tuning.get("family"):
        tried = from_ranges(change.get("toSchedule")) if change.get("result") == "Trying" else ()
        found.append((len(trial.counts.per_position), tried, trial))
    return found
