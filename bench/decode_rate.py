"""The load-sweep's verdict figure (pure): the decode tokens per second a load gets, from the engine's counters,
at the batch that load puts in an engine.

This is how the operator judges (controller/verdict.py): tokens per step over the step's time, compared at
comparable batches, a figure moved to another batch through the step cost measured at several. On two cores
the client, vLLM's API server and the engine share the CPU, and a round can lose most of its time between
the client and the API server while the engine's own steps stay as fast as ever (docs/contributing/benchmarks.md,
the load sweep). Such a round shows in the engine's counters as a smaller batch at a shorter step, not as a slower
one. Such rounds are measured again (bench/profiles.py, STARVED); where an engine starves on every retry,
its step time is moved to the load's batch along that engine's own step time by batch, measured at every
load, rather than judged at a load it did not serve.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from specinfer_operator.tuning.model import FLOOR, Profile, comparable

Points = Sequence[tuple[float, float]]  # (requests per step, seconds per step), as measured at each load


def load_batch(profiles: Sequence[Profile]) -> float:
    """The batch a load puts in an engine: the median over the engines that served it, so that an engine
    starved during its rounds (a smaller batch) does not set it."""
    return statistics.median(p.batch for p in profiles)


def step_at(points: Points, batch: float) -> float:
    """The step time at `batch`, interpolated between the measured points around it (or extended from the
    two nearest when outside them), never below FLOOR of the fastest step measured, as the recommendation's
    fit."""
    ordered = sorted(points)
    if len(ordered) == 1:
        return ordered[0][1]
    below = [p for p in ordered if p[0] <= batch]
    i = min(max(len(below) - 1, 0), len(ordered) - 2)
    (b0, s0), (b1, s1) = ordered[i], ordered[i + 1]
    found = s0 if b1 == b0 else s0 + (s1 - s0) * (batch - b0) / (b1 - b0)
    return max(found, FLOOR * min(s for _, s in ordered))


def decode_rate(profile: Profile, points: Points, batch: float) -> float:
    """Decode tokens per second at `batch` requests per step: the profile's tokens per step, its step time
    moved from the batch it served to `batch` along `points` when the two are not comparable (BATCH_SPREAD,
    as the canary's verdict), times the requests served."""
    seconds = profile.step_seconds
    if not comparable(batch, profile.batch):
        seconds *= step_at(points, batch) / step_at(points, profile.batch)
    return batch * profile.tokens_per_step / seconds
