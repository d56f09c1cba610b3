"""The load sweep's table: each K's figure at a load is the median over its engines that served that load; tuning
over it stays within the K measured."""

from __future__ import annotations

from bench.load_sweep import CONCURRENCIES, Sweep, loads, mixed_day
from bench.profiles import Run
from bench.tuning import MIN_GAIN, tune
from specinfer_operator.tuning.model import Profile
from specinfer_operator.tuning.recommendation import Bounds


def engine(k: int, step_ms: float, starved_at: int | None = None) -> dict[int, Run]:
    """One engine at every load: a batch of 0.8 c, or of one request where it starved."""
    runs = {}
    for c in CONCURRENCIES:
        batch = 1.0 if c == starved_at else 0.8 * c
        profile = Profile(k, 1000, (step_ms + 0.2 * batch) / 1000, (0.5,) * k, batch)
        runs[c] = Run(k, c, 1.0, profile, 0.0, b"")
    return runs


def test_an_engine_starved_at_a_load_is_not_the_one_that_speaks_for_its_k_there() -> None:
    starved = engine(4, 3.0, starved_at=32)
    sweep = Sweep({1: [engine(1, 2.0)], 4: [engine(4, 3.2), starved, engine(4, 2.8)]})
    assert sweep.runs[4][32].profile.batch > 16  # the starved engine's batch of one would mislead tuning
    assert sweep.runs[4][4] is starved[4]  # elsewhere it served, and its figure is the median
    # The median of the two engines that served at 32 (the lower of two): the slower, 3.2 ms + 0.2 per request.
    assert sweep.runs[4][32].profile.step_seconds > 3.0e-3 + 0.2e-3 * 25.6


def test_when_every_engine_starved_the_starved_figures_are_what_there_is() -> None:
    sweep = Sweep({1: [engine(1, 2.0)], 2: [engine(2, 2.5, starved_at=16), engine(2, 2.6, starved_at=16)]})
    assert sweep.runs[2][16].profile.batch == 1.0


def drafting(k: int) -> dict[int, Run]:
    """An engine at K whose step costs 0.4 ms per draft token and whose positions accept less and less."""
    runs = {}
    for c in CONCURRENCIES:
        batch = 0.8 * c
        profile = Profile(k, 1000, (2.0 + 0.4 * k + 0.1 * batch) / 1000, tuple(0.8**p for p in range(1, k + 1)), batch)
        runs[c] = Run(k, c, 1.0, profile, 0.0, b"")
    return runs


def test_tuning_over_a_subset_of_k_stays_within_what_was_measured() -> None:
    """`--ks 1,2,3,8`: from K=8 the recommendation asks for K=4, which no engine measured; the sweep goes on with
    what it has instead of failing, and every K tuning reaches is one that was measured."""
    measured = [0, 1, 2, 3, 8]
    sweep = Sweep({k: [drafting(k)] for k in measured})
    bounds = Bounds(min_k=1, max_k=8, off=False, max_batch=64, min_gain=MIN_GAIN)
    for c in CONCURRENCIES:
        end, steps, profiles = tune(*sweep.at(c), 8, bounds)
        assert end in measured
        assert set(profiles) <= set(measured)
        assert any("K=4 not measured" in step for step in steps)
    assert 0 <= loads(sweep, "Auto", bounds) < 1
    whole, single = mixed_day(sweep, "Auto", bounds, lambda schedule: [])
    assert whole < 1
    assert single < 1
