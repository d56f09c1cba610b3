"""When the next draft is trained, and what became of each generation (pure).

A run starts only when the resource serves quietly (Ready, no canary, no rollback in force), no run of it is
active, training.minIntervalMinutes have passed since the last began, and prompts were recorded since. A
rolled-back draft is never trained again on the same samples: the window of samples it trained on is
quarantined, and no later run reads a sample recorded in it (`quarantine`, `kept`). Then one of the triggers
decides:
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

from specinfer_operator.api.learning import MAX_GENERATIONS, LearningSettings
from specinfer_operator.api.timestamps import age, parse
from specinfer_operator.render.training import Kept


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


def quarantine(learning: dict[str, Any], rolled_back: dict[str, Any]) -> None:
    """Keep the samples a rolled-back generation trained on out of every later run: its window joins
    status.learning.quarantine (a run that left no window quarantines nothing: it trained on nothing known)."""
    window = rolled_back.get("window") or {}
    if "oldest" not in window or "newest" not in window:
        return
    entry = {
        "generation": int(rolled_back["generation"]),
        "oldest": int(window["oldest"]),
        "newest": int(window["newest"]),
        "samples": int(rolled_back.get("samples") or 0),
    }
    windows = [w for w in learning.get("quarantine") or [] if w.get("generation") != entry["generation"]]
    learning["quarantine"] = [*windows, entry][-MAX_GENERATIONS:]
    _count(learning)


def expire(learning: dict[str, Any], settings: LearningSettings, now: str) -> None:
    """Forget the quarantined windows whose samples the retention age has removed."""
    windows = learning.get("quarantine")
    if not windows:
        return
    oldest_kept = parse(now).timestamp() - settings.sampling.retention_hours * 3600
    left = [w for w in windows if w["newest"] >= oldest_kept]
    if left:
        learning["quarantine"] = left
    else:
        learning.pop("quarantine", None)
    _count(learning)


def _count(learning: dict[str, Any]) -> None:
    learning["quarantinedSamples"] = sum(int(w.get("samples") or 0) for w in learning.get("quarantine") or [])


def kept(settings: LearningSettings, learning: dict[str, Any], in_force: int) -> Kept:
    """What a new run keeps of earlier ones: the draft in force and the newest storage.keepDrafts promoted
    generations (rolled-back and failed ones are removed), and the quarantined windows."""
    promoted = [int(g["generation"]) for g in learning.get("generations") or [] if g.get("phase") == "Promoted"]
    drafts = {*promoted[-settings.storage.keep_drafts :], *([in_force] if in_force else [])}
    windows = tuple((int(w["oldest"]), int(w["newest"])) for w in learning.get("quarantine") or [])
    return Kept(frozenset(drafts), windows)
