"""The load-sweep's verdict figure: an engine starved during its rounds is judged at the load's batch."""

from __future__ import annotations

import pytest

from bench.decode_rate import decode_rate, load_batch, step_at
from specinfer_operator.tuning.model import Profile


def profile(batch: float, step_ms: float, tokens_per_step: float = 2.0, k: int = 2) -> Profile:
    per_position = (tokens_per_step - 1) / k
    return Profile(k=k, steps=1000, step_seconds=step_ms / 1000, position_tokens=(per_position,) * k, batch=batch)


# One engine's step time by batch, as measured at four loads: 5 ms at 1 request, 20 ms at 24.
CURVE = [(1.0, 0.005), (3.5, 0.008), (10.0, 0.012), (24.0, 0.020)]


def test_step_time_is_interpolated_between_measured_batches_and_extended_beyond() -> None:
    assert step_at(CURVE, 3.5) == pytest.approx(0.008)
    assert step_at(CURVE, 17.0) == pytest.approx(0.016)
    assert step_at(CURVE, 31.0) == pytest.approx(0.024)  # the last two points' line
    assert step_at(CURVE, 0.0) == pytest.approx(0.0038)
    assert step_at([(2.0, 0.004), (4.0, 0.010)], 0.0) == pytest.approx(0.002)  # the floor: FLOOR of the fastest
    assert step_at([(4.0, 0.01)], 16.0) == pytest.approx(0.01)


def test_a_load_comparable_to_the_profiles_batch_keeps_the_measured_step() -> None:
    # Within BATCH_SPREAD the measured step stands, as in the canary's verdict: 2 tokens per 8 ms per request.
    assert decode_rate(profile(3.5, 8.0), CURVE, 4.0) == pytest.approx(4.0 * 2 / 0.008)


def test_a_starved_round_is_moved_to_the_loads_batch_instead_of_looking_faster() -> None:
    # The load puts 24 requests in an engine; this engine's rounds saw 10 (its API server starved), at a
    # step of 12 ms. Its requests would see 20 ms at 24: 24 * 2 / 0.020 decode tokens per second.
    starved = decode_rate(profile(10.0, 12.0), CURVE, 24.0)
    assert starved == pytest.approx(24 * 2 / 0.020)
    assert starved == pytest.approx(decode_rate(profile(24.0, 20.0), CURVE, 24.0))


def test_more_tokens_per_step_at_the_same_step_time_is_faster() -> None:
    assert decode_rate(profile(24.0, 20.0, tokens_per_step=3.0), CURVE, 24.0) > decode_rate(
        profile(24.0, 20.0), CURVE, 24.0
    )


def test_the_loads_batch_is_the_median_over_its_engines() -> None:
    assert load_batch([profile(b, 10.0) for b in (23.6, 7.4, 22.9, 24.1, 23.0)]) == pytest.approx(23.0)
