"""The autoscaling day's simulation: the autoscaler's algorithm follows the load up and, after the scale-down
window, down; static provisioning is judged minute by minute."""

from __future__ import annotations

from bench.autoscale_day import SCALE_DOWN_WINDOW, STARTUP, autoscaled, day, needed, static


def speed(batch: float) -> float:
    """A request gets 100 tokens/s alone and shares the engine's 100 tokens/s... at most: 100 / batch."""
    return 100 / batch


def test_the_fewest_engines_that_meet_the_objective() -> None:
    assert needed(50, speed, 10) == 5
    assert needed(51, speed, 10) == 6


def test_static_provisioning_is_judged_every_minute() -> None:
    load = [5.0] * 30 + [50.0] * 30
    assert static(load, speed, 1, 10).met == 0.5
    assert static(load, speed, 5, 10).met == 1.0
    assert static(load, speed, 5, 10).engine_minutes == 300


def test_the_autoscaler_follows_a_step_up_after_startup_and_down_after_its_window() -> None:
    load = [5.0] * 10 + [50.0] * 50 + [5.0] * 60
    outcome = autoscaled(load, speed, 10, 1, 20)
    # Up: only the minutes the first added engines need to start are missed.
    missed = round((1 - outcome.met) * len(load))
    assert 0 < missed <= STARTUP / 60 + 1
    # 10 % faster than the objective: 50 requests over 6 engines, never fewer while the load lasts.
    assert outcome.engines[:10] == (1,) * 10
    assert min(outcome.engines[20:60]) == 6
    # Down: kept through the scale-down window after the load fell, then back to one.
    window = int(SCALE_DOWN_WINDOW / 60)
    assert min(outcome.engines[60 : 60 + window - 1]) >= 6
    assert outcome.engines[-1] == 1
    assert outcome.engine_minutes < static(load, speed, 16, 10).engine_minutes


def test_a_day_ramps_from_quiet_to_the_peak_and_back() -> None:
    load = day(4, 96)
    assert (load[0], load[12 * 60], load[23 * 60]) == (4, 96, 4)
    assert load[8 * 60] == 50
