"""spec.speculative.tuning at work (pure): status.tuning, its profiles and recommendation, and Auto's moves.

The telemetry loop hands over the windowed figures of the serving pods and of a canary; a figure set with
enough draft tokens becomes the profile of its K and batch-size band (replaced as it is measured again)
as long as it belongs to the serving configuration's family (the configuration but for K). The recommendation is
tuning.recommend's over those profiles, written when it changes materially, with an event. In Auto, once
the resource is Ready with no canary or rollback under way and minIntervalSeconds have passed since the
last change, the K to measure next or the recommended K (when it promises minGainPercent) is applied
through applied.py's annotation, and the canary that follows decides: promoted, or reverted when slower
(status.rollout.rolledBack) or failing, in which case the K before is put back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api.timestamps import age
from specinfer_operator.measure.window import Figures
from specinfer_operator.tuning.recommendation import Bounds, Profile, Recommendation, band, recommend
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS
from specinfer_runtime.tuning import TuningSettings

STEP_TOLERANCE = 0.02  # relative: a profile whose step time moved less is not rewritten
ACCEPT_TOLERANCE = 0.01  # accepted drafts per step
MAX_PROFILES = 16
RETRY_AFTER = 4  # a reverted K is not tried again within this many minIntervalSeconds
KEEP = "keep"


def carry(
    previous: dict[str, Any] | None, mode: str, family: str, requested: int, serving: int, tuned: int | None = None
) -> dict[str, Any] | None:
    """status.tuning as reconcile writes it: what the spec asks, what Auto applied (`tuned`) and what serves,
    with the evidence and the advice kept while the family stays (a new family starts over); None with
    tuning off."""
    if mode == "Off":
        return None
    kept = previous if previous is not None and previous.get("family") == family else {}
    return {
        "mode": mode,
        "family": family,
        "requestedNumSpeculativeTokens": requested,
        **({"tunedNumSpeculativeTokens": tuned} if tuned is not None else {}),
        "effectiveNumSpeculativeTokens": serving,
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
    """status.tuning.recommendation for a recommendation; moves under minGainPercent are `keep`."""
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
    move = found.k != found.current_k and gain >= settings.min_gain_percent
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
    if found.schedule:
        out["numSpeculativeTokensPerBatchSize"] = [
            {"minBatchSize": a, "maxBatchSize": b, "numSpeculativeTokens": k} for a, b, k in found.schedule
        ]
    return out


@dataclass(frozen=True)
class Update:
    """A status merge patch, events, and the K to apply (Auto), if any."""

    patch: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)
    apply: int | None = None  # the K to write into the effective annotation
    family: str = ""


def _profiles(
    tuning: dict[str, Any], figures: list[tuple[int, Figures]], need: int, now: str
) -> tuple[list[dict[str, Any]], bool]:
    """The profiles with these figures (K, windowed figures) in, and whether any changed; the oldest go
    beyond MAX_PROFILES."""
    kept = {(int(p["numSpeculativeTokens"]), band(float(p["decodeBatch"]))): p for p in tuning.get("profiles") or []}
    changed = False
    for k, measured in figures:
        if not 0 <= k <= ASCEND_MAX_SPECULATIVE_TOKENS or len(measured.counts.per_position) != k:
            continue  # figures of a K no engine of this resource can run: a broken or hostile exporter
        found = Profile.of(measured.counts, k) if measured.counts.draft_tokens >= need else None
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


def _resolve(
    tuning: dict[str, Any], status: dict[str, Any], serving: int, now: str
) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]], int | None]:
    """How an applied K ended, if it did: (lastChange, events, K to put back). A tuned K rolled back (slower,
    or failing) is reverted whoever set it, Auto or a person pinning it; one serving everywhere is promoted."""
    change = tuning.get("lastChange") or {}
    rollout = status.get("rollout") or {}
    if rollout.get("canary"):
        return None, [], None
    back, tuned = rollout.get("rolledBack"), tuning.get("tunedNumSpeculativeTokens")
    if back is not None and tuned is not None and tuned != serving:
        message = f"K={tuned} reverted to K={serving}: {back['reason']}: {back['message']}"
        since = change.get("time", now) if change.get("result") == "Trying" and change.get("toK") == tuned else now
        ended = {"fromK": serving, "toK": tuned, "result": "Reverted", "message": message, "time": since}
        return ended, [("Normal", "TuningReverted", message)], serving
    if change.get("result") == "Trying" and serving == change["toK"]:
        message = f"K={change['toK']} serves on every pod (was K={change['fromK']})"
        return {**change, "result": "Promoted", "message": message}, [("Normal", "TuningPromoted", message)], None
    return None, [], None


def _move(
    tuning: dict[str, Any], status: dict[str, Any], settings: TuningSettings, serving: int, now: str
) -> int | None:
    """The K Auto applies now, or None."""
    recommendation = tuning.get("recommendation") or {}
    target = recommendation.get("measureNext", recommendation.get("numSpeculativeTokens"))
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
            and change.get("toK") == target
            and since < RETRY_AFTER * settings.min_interval_seconds
        ):
            return None
    return int(target)


def update(
    status: dict[str, Any],
    settings: TuningSettings,
    figures: list[tuple[int, Figures]],
    now: str,
    max_batch: int,
) -> Update | None:
    """What tuning changes in the status after a scrape round: `figures` are (K, windowed figures) of the
    serving pods and, when it changes K alone, of the canary. None when nothing changes."""
    tuning = status.get("tuning")
    if not tuning or tuning.get("mode") in (None, "Off"):
        return None
    serving = int(tuning["effectiveNumSpeculativeTokens"])
    requested = int(tuning["requestedNumSpeculativeTokens"])
    profiles, changed = _profiles(tuning, figures, settings.min_draft_tokens, now)
    patch: dict[str, Any] = {}
    events: list[tuple[str, str, str]] = []
    if changed:
        patch["profiles"] = profiles
    bounds = Bounds(min_k=settings.min_k, max_k=settings.max_k or requested, off=False, max_batch=max_batch)
    usable = [p for p in map(profile_of, profiles) if p is not None]
    found = recommend(usable, serving, bounds) if usable else None
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
                message = (
                    f"K={serving} -> K={apply} on a canary: {(tuning.get('recommendation') or {}).get('message', '')}"
                )
                patch["lastChange"] = {
                    "fromK": serving,
                    "toK": apply,
                    "result": "Trying",
                    "message": message,
                    "time": now,
                }
                events.append(("Normal", "TuningChange", message))
    if not patch:
        return None
    return Update({"tuning": patch}, events, apply, tuning["family"])
