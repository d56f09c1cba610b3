"""spec.speculative.tuning at work (pure): status.tuning, its profiles and recommendation, and Auto's moves.

The telemetry loop hands over the windowed figures of the serving pods and of a canary; a figure set with
enough draft tokens becomes the profile of its K and batch-size band (replaced as it is measured again)
as long as it belongs to the serving configuration's family (the configuration but for K). The recommendation is
tuning.recommend's over those profiles, written when it changes materially, with an event. In Auto, once
the resource is Ready with no canary or rollback under way and minIntervalSeconds have passed since the
last change, the K to measure next or the recommended K (when it promises minGainPercent) is applied
through applied.py's annotation, and the canary that follows decides: promoted, or reverted when slower
(status.rollout.rolledBack) or failing, in which case the K before is put back. Once K has settled (the
recommendation keeps it), the engine-side mechanism the resource offers (status.tuning.adaptivityCandidate,
tuning/adaptivity.py) is tried the same way; while it serves, Auto holds and profiles are not taken, since
the engine chooses how many drafts each request verifies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api.timestamps import age
from specinfer_operator.measure.window import Figures
from specinfer_operator.tuning.adaptivity import ENGINE_SIDE
from specinfer_operator.tuning.applied import Schedule, Setting, as_ranges, from_ranges, in_force, largest
from specinfer_operator.tuning.model import Profile, band
from specinfer_operator.tuning.recommendation import Bounds, Recommendation, recommend
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS, SCHEDULE_FIELD
from specinfer_runtime.tuning import TuningSettings

STEP_TOLERANCE = 0.02  # relative: a profile whose step time moved less is not rewritten
ACCEPT_TOLERANCE = 0.01  # accepted drafts per step
MAX_PROFILES = 16
RETRY_AFTER = 4  # a reverted K is not tried again within this many minIntervalSeconds
KEEP = "keep"
EFFECTIVE_SCHEDULE = f"effective{SCHEDULE_FIELD[0].upper()}{SCHEDULE_FIELD[1:]}"
Measured = tuple[int, Schedule, Figures]  # K as exported, the schedule rendered (or ()), the window's figures


def carry(
    previous: dict[str, Any] | None,
    mode: str,
    family: str,
    requested: int,
    serving: int,
    tuned: int | None = None,
    schedule: Schedule = (),
    adaptivity: str = "",
    candidate: str = "",
) -> dict[str, Any] | None:
    """status.tuning as reconcile writes it: what the spec asks, what Auto applied (`tuned`) and what serves
    (K, the `schedule` when one is rendered, the engine-side mechanism Auto applied: `adaptivity`), what
    Auto may try next (`candidate`), with the evidence and the advice kept while the family stays (a new
    family starts over); None with tuning off."""
    if mode == "Off":
        return None
    kept = previous if previous is not None and previous.get("family") == family else {}
    return {
        "mode": mode,
        "family": family,
        "requestedNumSpeculativeTokens": requested,
        **({"tunedNumSpeculativeTokens": tuned} if tuned is not None else {}),
        "effectiveNumSpeculativeTokens": serving,
        **({EFFECTIVE_SCHEDULE: as_ranges(schedule)} if schedule else {}),
        **({"tunedAdaptivity": adaptivity} if adaptivity else {}),
        **({"adaptivityCandidate": candidate} if candidate else {}),
        **{k: kept[k] for k in ("profiles", "recommendation", "lastChange") if k in kept},
    }


def entry(profile: Profile, now: str) -> dict[str, Any]:
    return {
        "numSpeculativeTokens": profile.k,
        "decodeSteps": profile.steps,
        "draftTokens": profile.draft_tokens,
        "stepMilliseconds": float(f"{1000 * profile.step_seconds:.6g}"),
        "decodeBatch": round(profile.batch, 2),
        "acceptedPerStep": [round(t, 4) for t in profile.position_tokens],
        "measuredTime": now,
    }


def profile_of(item: dict[str, Any]) -> Profile | None:
    """The profile a status entry keeps; None for one the recommender cannot use (no step time, a K that
    does not match its positions), which only a hand-edited status holds."""
    try:
        found = Profile(
            k=int(item["numSpeculativeTokens"]),
            steps=int(item["decodeSteps"]),
            step_seconds=float(item["stepMilliseconds"]) / 1000,
            position_tokens=tuple(float(t) for t in item["acceptedPerStep"]),
            batch=float(item["decodeBatch"]),
            draft_tokens=int(item["draftTokens"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    usable = (*found.position_tokens, found.step_seconds, found.batch)
    if found.steps <= 0 or not all(math.isfinite(x) and x >= 0 for x in usable) or found.step_seconds <= 0:
        return None
    return found if len(found.position_tokens) == found.k and found.batch > 0 else None


def _moved(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    if before is None:
        return True
    step = float(before["stepMilliseconds"])
    if abs(float(after["stepMilliseconds"]) - step) > STEP_TOLERANCE * step:
        return True
    if abs(float(after["decodeBatch"]) - float(before["decodeBatch"])) > 0.1 * float(before["decodeBatch"]):
        return True
    pairs = zip(before["acceptedPerStep"], after["acceptedPerStep"], strict=False)
    return any(abs(float(a) - float(b)) > ACCEPT_TOLERANCE for a, b in pairs)


def advice(found: Recommendation | None, settings: TuningSettings, now: str) -> dict[str, Any] | None:
    """status.tuning.recommendation for a recommendation; moves under minGainPercent are `keep`. A schedule
    is advised (and applied in Auto) when some band gains minGainPercent by it."""
    if found is None:
        return None
    if found.explore is not None:
        return {
            "measureNext": found.explore,
            "message": found.describe(),
            "summary": f"measure K={found.explore}",
            "time": now,
        }
    gain = round(100 * found.gain, 1)
    move = found.moves
    message = found.describe()
    if found.k != found.current_k and not move:
        message = f"keep K={found.current_k}, under minGainPercent {settings.min_gain_percent}: {message}"
    out: dict[str, Any] = {
        "numSpeculativeTokens": found.k if move else found.current_k,
        "expectedGainPercent": gain if move else 0.0,
        "message": message,
        "summary": f"K={found.k} {gain:+.0f}%" if move else f"{KEEP} K={found.current_k}",
        "time": now,
    }
    if found.schedules:
        out[SCHEDULE_FIELD] = as_ranges(found.schedule)
        out["summary"] = f"by batch {100 * found.schedule_gain:+.0f}%"
    return out


def advised(recommendation: dict[str, Any]) -> Setting | None:
    """The setting a recommendation asks Auto to apply: a K to measure, a schedule, or a K; None to keep."""
    if "measureNext" in recommendation:
        return Setting(int(recommendation["measureNext"]))
    schedule = from_ranges(recommendation.get(SCHEDULE_FIELD))
    if schedule:
        return Setting(largest(schedule), schedule)
    k = recommendation.get("numSpeculativeTokens")
    keep = str(recommendation.get("summary", "")).startswith(KEEP)
    return None if k is None or keep else Setting(int(k))


@dataclass(frozen=True)
class Update:
    """A status merge patch, events, and the K to apply (Auto), if any."""

    patch: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)
    apply: Setting | None = None  # what to write into the effective annotation
    family: str = ""


def _profiles(
    tuning: dict[str, Any], figures: list[Measured], need: int, now: str
) -> tuple[list[dict[str, Any]], bool]:
    """The profiles with these figures in, and whether any changed; the oldest go beyond MAX_PROFILES.
    Under a schedule a window's figures are the profile of the K in force at the window's batch size (the
    per-band counters: vLLM's per-position counts of steps at a smaller K fill only its first positions)."""
    kept = {(int(p["numSpeculativeTokens"]), band(float(p["decodeBatch"]))): p for p in tuning.get("profiles") or []}
    changed = False
    for exported, schedule, measured in figures:
        counts = measured.counts
        if not 0 <= exported <= ASCEND_MAX_SPECULATIVE_TOKENS or len(counts.per_position) != exported:
            continue  # figures of a K no engine of this resource can run: a broken or hostile exporter
        batch = counts.steps.steps / counts.steps.iterations if counts.steps.iterations else 1.0
        k = in_force(exported, schedule, batch)
        found = Profile.of(counts, k) if counts.draft_tokens >= need and k > 0 else None
        if found is None:
            continue
        item = entry(found, now)
        key = (k, band(found.batch))
        if _moved(kept.get(key), item):
            kept[key] = item
            changed = True
    newest = sorted(kept.values(), key=lambda p: str(p["measuredTime"]), reverse=True)[:MAX_PROFILES]
    ordered = sorted(newest, key=lambda p: (int(p["numSpeculativeTokens"]), float(p["decodeBatch"])))
    return ordered, changed


def _tried(change: dict[str, Any]) -> Setting:
    return Setting(int(change["toK"]), from_ranges(change.get("toSchedule")), str(change.get("toAdaptivity") or ""))


def _resolve(
    tuning: dict[str, Any], status: dict[str, Any], serving: Setting, now: str
) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]], Setting | None]:
    """How an applied setting ended, if it did: (lastChange, events, setting to put back). One rolled back
    (slower, or failing) is reverted whoever set it, Auto or a person pinning it; one serving everywhere is
    promoted."""
    change = tuning.get("lastChange") or {}
    rollout = status.get("rollout") or {}
    if rollout.get("canary"):
        return None, [], None
    back, tuned = rollout.get("rolledBack"), tuning.get("tunedNumSpeculativeTokens")
    trying = change.get("result") == "Trying"
    differs = _tried(change) != serving if trying else tuned is not None and tuned != serving.k
    if back is not None and tuned is not None and differs:
        tried = _tried(change) if trying else Setting(int(tuned))
        message = f"{tried.describe()} reverted to {serving.describe()}: {back['reason']}: {back['message']}"
        since = change.get("time", now) if trying else now
        ended = {**_change(serving, tried), "result": "Reverted", "message": message, "time": since}
        return ended, [("Normal", "TuningReverted", message)], serving
    if trying and _tried(change) == serving:
        message = f"{serving.describe()} serves on every pod (was K={change['fromK']})"
        return {**change, "result": "Promoted", "message": message}, [("Normal", "TuningPromoted", message)], None
    return None, [], None


def _change(before: Setting, after: Setting) -> dict[str, Any]:
    return {
        "fromK": before.k,
        "toK": after.k,
        **({"toSchedule": after.ranges()} if after.schedule else {}),
        **({"toAdaptivity": after.adaptivity} if after.adaptivity else {}),
    }


def _engine_side(tuning: dict[str, Any], serving: Setting) -> Setting | None:
    """The engine-side mechanism to try once K has settled: a recommendation that keeps what serves, and a
    candidate the resource offers; at the K that serves (a schedule's largest), as the most it may draft."""
    candidate, found = tuning.get("adaptivityCandidate"), tuning.get("recommendation") or {}
    if candidate not in ENGINE_SIDE or not found or "measureNext" in found:
        return None
    return Setting(serving.k, (), str(candidate))


def _move(
    tuning: dict[str, Any], status: dict[str, Any], settings: TuningSettings, serving: Setting, now: str
) -> Setting | None:
    """What Auto applies now, or None: nothing while an engine-side mechanism serves (the engine chooses)."""
    if serving.adaptivity:
        return None
    target = advised(tuning.get("recommendation") or {})
    if target is None or target == serving:
        target = _engine_side(tuning, serving)
    if target is None or target == serving:
        return None
    rollout = status.get("rollout") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not ready or rollout.get("canary") or rollout.get("rolledBack"):
        return None
    change = tuning.get("lastChange")
    if change is not None:
        since = age(change.get("time"), now)
        if change.get("result") == "Trying" or since < settings.min_interval_seconds:
            return None
        if (
            change.get("result") == "Reverted"
            and _tried(change) == target
            and since < RETRY_AFTER * settings.min_interval_seconds
        ):
            return None
    return target


def update(
    status: dict[str, Any],
    settings: TuningSettings,
    figures: list[Measured],
    now: str,
    max_batch: int,
) -> Update | None:
    """What tuning changes in the status after a scrape round: `figures` are (K, schedule, windowed figures)
    of the serving pods first and, when it changes K alone, of the canary. None when nothing changes."""
    tuning = status.get("tuning")
    if not tuning or tuning.get("mode") in (None, "Off"):
        return None
    serving = Setting(
        int(tuning["effectiveNumSpeculativeTokens"]),
        from_ranges(tuning.get(EFFECTIVE_SCHEDULE)),
        str(tuning.get("tunedAdaptivity") or ""),
    )
    requested = int(tuning["requestedNumSpeculativeTokens"])
    # Under an engine-side mechanism Auto applied, the per-position counts are of the drafts the engine chose
    # to verify: not the profile of K.
    profiles, changed = _profiles(tuning, [] if serving.adaptivity else figures, settings.min_draft_tokens, now)
    patch: dict[str, Any] = {}
    events: list[tuple[str, str, str]] = []
    if changed:
        patch["profiles"] = profiles
    bounds = Bounds(
        min_k=settings.min_k,
        max_k=settings.max_k or requested,
        off=False,
        max_batch=max_batch,
        min_gain=settings.min_gain_percent / 100,
    )
    usable = [p for p in map(profile_of, profiles) if p is not None]
    load = _batch(figures)
    current = in_force(serving.k, serving.schedule, load or 1.0)
    found = recommend(usable, current, bounds, load) if usable else None
    before = tuning.get("recommendation")
    after = advice(found, settings, now)
    if after is not None and (before is None or before.get("summary") != after["summary"]):
        patch["recommendation"] = after
        events.append(("Normal", "TuningRecommendation", after["message"]))
        tuning = {**tuning, "recommendation": after}
    apply = None
    if tuning["mode"] == "Auto":
        ended, said, back = _resolve(tuning, status, serving, now)
        if ended is not None:
            patch["lastChange"] = ended
            events += said
            apply = back
        else:
            apply = _move(tuning, status, settings, serving, now)
            if apply is not None:
                why = (tuning.get("recommendation") or {}).get("message", "")
                if apply.adaptivity:
                    why = (
                        f"K has settled; the engine's own adaptivity is kept only when requests decode at least "
                        f"minGainPercent {settings.min_gain_percent}% faster"
                    )
                message = f"{serving.describe()} -> {apply.describe()} on a canary: {why}"
                patch["lastChange"] = {**_change(serving, apply), "result": "Trying", "message": message, "time": now}
                events.append(("Normal", "TuningChange", message))
    if not patch:
        return None
    return Update({"tuning": patch}, events, apply, tuning["family"])


def _batch(figures: list[Measured]) -> float | None:
    """The serving pods' batch size in this window (None without an engine step): the load the
    recommendation is for."""
    if not figures:
        return None
    steps = figures[0][2].counts.steps
    return steps.steps / steps.iterations if steps.iterations and steps.steps else None
