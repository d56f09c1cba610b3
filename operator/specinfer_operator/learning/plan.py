"""When the next draft is trained, and what became of each generation (pure).

A run starts only when the resource serves quietly (Ready, no canary, no rollback in force), no run of it is
active, training.minIntervalMinutes have passed since the last began, and prompts were recorded since: a
rolled-back draft is never trained again on the same samples. Then one of the triggers decides:
- enough new prompts: the engines' served requests since the last run, times sampling.percent (the recorder
  takes exactly that share of requests; the run itself refuses to start without a prompt newer than the
  last run);
- acceptance drifted: the mean acceptance length fell triggers.acceptanceDropPercent below its value at the
  last promotion, with a tenth of minNewSamples new (both figures from every pod, over telemetry.minDrafts);
- the schedule: triggers.intervalHours since the last run (or since learning began), with any new prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.learning import LearningSettings
from specinfer_operator.api.timestamps import age


@dataclass(frozen=True)
class Moment:
    """What the loop sees of the resource now."""

    now: str  # RFC 3339
    requests: int  # requests served since the last run began
    acceptance_length: float | None  # the current configuration's over the telemetry window, when evidence
    quiet: bool  # Ready, no canary, no rollback in force
    running: bool  # a training Job of the resource is active


def recorded(settings: LearningSettings, requests: int) -> int:
    """The prompts the engines recorded of `requests`: the recorder's exact share of each engine's."""
    return requests * settings.sampling.percent // 100


def _last_start(status: dict[str, Any]) -> str | None:
    generations = status.get("generations") or []
    return generations[-1].get("startedAt") if generations else None


def trigger(settings: LearningSettings, status: dict[str, Any], moment: Moment) -> str | None:
    """Why a run starts now (the generation's `trigger`), or None. `status` is status.learning."""
    if moment.running or not moment.quiet:
        return None
    triggers = settings.triggers
    last = _last_start(status)
    if last is not None and age(last, moment.now) < triggers.min_interval_minutes * 60:
        return None
    new = recorded(settings, moment.requests)
    if new < 1:
        return None
    if new >= triggers.min_new_samples:
        return f"{new} prompts recorded since the last run (triggers.minNewSamples {triggers.min_new_samples})"
    promoted, now_length = status.get("promotedAcceptanceLength"), moment.acceptance_length
    drop = triggers.acceptance_drop_percent
    if drop and promoted and now_length is not None and new >= max(1, triggers.min_new_samples // 10):
        floor = promoted * (1 - drop / 100)
        if now_length < floor:
            return (
                f"mean acceptance length {now_length:.2f} is below {floor:.2f}, {drop}% under its {promoted:.2f} "
                f"at the last promotion (triggers.acceptanceDropPercent), with {new} prompts recorded since"
            )
    since = last or status.get("since")
    hours = triggers.interval_hours
    if hours and since is not None and age(since, moment.now) >= hours * 3600:
        return f"{hours} h since the last run (triggers.intervalHours), with {new} prompts recorded since"
    return None


def next_generation(status: dict[str, Any]) -> int:
    return max((int(g.get("generation", 0)) for g in status.get("generations") or []), default=0) + 1
