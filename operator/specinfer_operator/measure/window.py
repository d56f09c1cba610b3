"""Windowed acceptance: counter samples per pod in, figures over the last N seconds out (pure).

vLLM's counters run from the engine's start, so a lifetime ratio hides a collapse that happened an hour
ago behind days of good history. Figures here are increases over a window, computed as Prometheus's
`increase()` does: consecutive samples are differenced, and a counter that went down, or a pod whose
container restarted, starts a new series whose values count in full (the engine counted them since its
restart, inside the window). The first sample of a series that began inside the window counts in full
too, so a new pod's first requests are not lost to a baseline taken after them. An increase is therefore
never negative and never the lifetime total.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import zip_longest

from specinfer_operator.measure.acceptance import Acceptance
from specinfer_operator.measure.timing import Steps


@dataclass(frozen=True)
class Counts:
    """The spec-decode and decode-step counters of one engine (or a sum of them)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: tuple[int, ...] = ()
    steps: Steps = field(default_factory=Steps)

    @classmethod
    def of(cls, figures: Iterable[Acceptance], steps: Iterable[Steps] = ()) -> Counts:
        """The counters of one scrape, summed over the models it exports (one engine serves one)."""
        total = cls()
        for f in figures:
            total += cls(f.drafts, f.draft_tokens, f.accepted_tokens, f.accepted_per_position)
        for s in steps:
            total += cls(steps=s)
        return total

    def __add__(self, other: Counts) -> Counts:
        a, b = self.steps, other.steps
        return Counts(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            tuple(x + y for x, y in zip_longest(self.per_position, other.per_position, fillvalue=0)),
            Steps(
                a.steps + b.steps,
                a.seconds + b.seconds,
                a.generated + b.generated,
                a.requests + b.requests,
                a.iterations + b.iterations,
            ),
        )

    def since(self, earlier: Counts) -> Counts | None:
        """The increase from `earlier`, or None when a counter went down (the engine restarted)."""
        width = max(len(self.per_position), len(earlier.per_position))
        now = (*self.per_position, *[0] * (width - len(self.per_position)))
        then = (*earlier.per_position, *[0] * (width - len(earlier.per_position)))
        a, b = self.steps, earlier.steps
        step_deltas = (
            a.steps - b.steps,
            a.generated - b.generated,
            a.requests - b.requests,
            a.iterations - b.iterations,
        )
        deltas = (
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted - earlier.accepted,
            *(x - y for x, y in zip(now, then, strict=True)),
        )
        seconds = a.seconds - b.seconds
        if any(d < 0 for d in (*deltas, *step_deltas)) or seconds < 0:
            return None
        return Counts(
            deltas[0], deltas[1], deltas[2], tuple(deltas[3:]), Steps(step_deltas[0], seconds, *step_deltas[1:])
        )

    def figures(self) -> Acceptance:
        """vLLM's ratios of these counts (acceptance.py has the definitions)."""
        return Acceptance.from_counts("", self.drafts, self.draft_tokens, self.accepted, self.per_position)


@dataclass(frozen=True)
class Sample:
    """One successful scrape of one pod. `series` changes when the container restarts; `born` is when the
    series began (the container's start, on the same clock as `time`), when known."""

    time: float
    series: str
    counts: Counts
    born: float | None = None


def _born_since(sample: Sample, start: float) -> bool:
    return sample.born is not None and sample.born >= start


def increase(samples: Iterable[Sample], start: float = float("inf")) -> Counts:
    """The total increase along consecutive samples, resets included, from `start` on: a first sample whose
    series was born at or after `start` counts in full (see the module docstring)."""
    total, previous = Counts(), None
    for sample in samples:
        if previous is not None:
            step = sample.counts.since(previous.counts) if sample.series == previous.series else None
            total += sample.counts if step is None else step
        elif _born_since(sample, start):
            total += sample.counts
        previous = sample
    return total


def served_since(previous: Sample | None, sample: Sample) -> int:
    """Requests a pod served between two of its samples (those that reached decoding); none across a
    restart, whose requests before its first sample are not counted."""
    if previous is None or previous.series != sample.series:
        return 0
    return max(0, sample.counts.steps.requests - previous.counts.steps.requests)


@dataclass
class History:
    """The recent samples of one pod, enough to cover the window plus the sample just before it."""

    limit: int
    samples: deque[Sample] = field(default_factory=deque)

    def record(self, sample: Sample, window: float) -> None:
        self.samples.append(sample)
        # Keep one sample at or before the window's start: it is the baseline of the first increase.
        while len(self.samples) > 2 and self.samples[1].time <= sample.time - window:
            self.samples.popleft()
        while len(self.samples) > self.limit:
            self.samples.popleft()

    def within(self, now: float, window: float) -> list[Sample]:
        """The baseline (the newest sample at or before now - window, else the oldest) and what follows."""
        samples = list(self.samples)
        start = 0
        for i, sample in enumerate(samples):
            if sample.time <= now - window:
                start = i
        return samples[start:]


@dataclass(frozen=True, order=True)
class Failure:
    """A scrape that gave no sample: why, in one line, and its result in specinfer_scrapes_total."""

    reason: str
    result: str


@dataclass(frozen=True)
class Figures:
    """Acceptance of one configuration over the window, from the pods that answered the last scrape, and
    the pods that did not, with why."""

    pods: int
    pods_measured: int
    seconds: float  # the span the samples actually cover: shorter than the window after a start
    counts: Counts
    failures: tuple[tuple[str, Failure], ...] = ()  # (pod, why), by pod

    @property
    def acceptance(self) -> Acceptance:
        return self.counts.figures()


def aggregate(histories: dict[str, History], pods: int, fresh: set[str], now: float, window: float) -> Figures:
    """Figures over the pods in `fresh` (answered the latest scrape); the others' samples may be stale and
    are left out, so a pod that stops answering lowers `pods_measured` instead of freezing its figures."""
    total, span = Counts(), 0.0
    for pod in sorted(fresh):
        history = histories.get(pod)
        if history is None:
            continue
        samples = history.within(now, window)
        if not samples:
            continue
        total += increase(samples, now - window)
        born = samples[0].born
        begins = born if born is not None and born >= now - window else samples[0].time
        span = max(span, samples[-1].time - begins)
    return Figures(pods=pods, pods_measured=len(fresh), seconds=span, counts=total)
