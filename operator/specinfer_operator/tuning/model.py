"""What the engines measured, and the step cost fitted from it (pure).

A request gets 1 + the accepted drafts per decode step and pays the step's time, so its decode speed at K
is tokens per step / step time. Tokens per step at K comes from the per-position acceptance: vLLM counts
the drafts accepted at each position p, and since a draft at p is accepted only if the ones before it were,
the tokens per step at K' <= K is 1 + the sum over p < K' of accepted(p) / decode steps. Step time cannot be
read off one K: it is fitted across the K measured (a profile each), a + b K, and with batch terms when the
profiles ran at different batch sizes, a + b K + c n + d n K (verifying K+1 tokens for each of n requests
costs more as batches grow, vllm#26504).

Positions beyond the largest K measured are extrapolated geometrically from the last two (or, with one,
from the first position's rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specinfer_operator.measure.window import Counts

# Profiles whose batches differ by this factor tell the cost's batch terms apart.
BATCH_SPREAD = 1.5
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


def comparable(batch: float, other: float) -> bool:
    """Whether two batch sizes are close enough (within BATCH_SPREAD) to compare what was measured at each."""
    return max(batch, other) < BATCH_SPREAD * min(batch, other)


def near(profiles: list[Profile], k: int, batch: float) -> list[Profile]:
    """The profiles of K measured at about this batch size."""
    return [p for p in profiles if p.k == k and comparable(p.batch, batch)]


def pooled_speed(profiles: list[Profile]) -> float:
    """Tokens per second per request over these profiles together (their steps weigh)."""
    tokens = sum(p.tokens_per_step * p.steps for p in profiles)
    seconds = sum(p.step_seconds * p.steps for p in profiles)
    return tokens / seconds if seconds > 0 else 0.0


def band(batch: float) -> int:
    """The power-of-two band of a batch size: profiles are kept, and schedules judged, per band."""
    return max(0, int(math.log2(max(batch, 1.0))))
