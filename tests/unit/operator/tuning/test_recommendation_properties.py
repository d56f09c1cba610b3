"""The recommender and tuning's status updates never raise, whatever the engines measured.

Profiles come from what pods export (and back from the status, where they are kept), so any finite
figures are possible: zero-cost steps, costs that a fit turns negative, counters near the bound
acceptance.MAX_COUNT, K beyond what was measured, bounds the spec allows in any order.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import tests.support.strategies  # noqa: F401  (the ci profile)
from specinfer_operator.measure.acceptance import MAX_COUNT
from specinfer_operator.measure.timing import Steps
from specinfer_operator.measure.window import Counts, Figures
from specinfer_operator.tuning import auto
from specinfer_operator.tuning.model import Profile
from specinfer_operator.tuning.recommendation import Bounds, recommend
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS as MAX_K
from specinfer_runtime.tuning import TuningSettings

finite = st.floats(min_value=1e-12, max_value=1e6, allow_nan=False, allow_infinity=False)
share = st.floats(min_value=0, max_value=1, allow_nan=False)


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    k = draw(st.integers(0, MAX_K))
    return Profile(
        k=k,
        steps=draw(st.integers(1, int(MAX_COUNT))),
        step_seconds=draw(finite),
        position_tokens=tuple(draw(st.lists(share, min_size=k, max_size=k))),
        batch=draw(st.floats(min_value=1e-3, max_value=1e4)),
        draft_tokens=draw(st.integers(0, int(MAX_COUNT))),
    )


bounds = st.builds(
    Bounds,
    min_k=st.integers(1, MAX_K),
    max_k=st.integers(1, MAX_K),
    off=st.booleans(),
    max_batch=st.integers(1, 256),
)


@given(st.lists(profiles(), max_size=8), st.integers(0, MAX_K), bounds, st.none() | st.floats(1e-3, 1e4))
def test_the_recommendation_never_raises_and_its_figures_are_finite(
    found: list[Profile], current: int, limits: Bounds, batch: float | None
) -> None:
    answer = recommend(found, current, limits, batch)
    if answer is None:
        return
    assert math.isfinite(answer.speed)
    assert math.isfinite(answer.current_speed)
    assert math.isfinite(answer.gain)
    assert 0 <= answer.k <= MAX_K
    assert answer.explore is None or 1 <= answer.explore <= MAX_K
    assert answer.describe()


counters = st.integers(0, int(MAX_COUNT))


@st.composite
def figures(draw: st.DrawFn) -> Figures:
    width = draw(st.integers(0, 64))
    steps = Steps(draw(counters), draw(st.floats(0, MAX_COUNT)), draw(counters), draw(counters), draw(counters))
    counts = Counts(draw(counters), draw(counters), draw(counters), tuple(draw(counters) for _ in range(width)), steps)
    return Figures(pods=draw(st.integers(0, 1000)), pods_measured=1, seconds=draw(st.floats(0, 1e6)), counts=counts)


@given(
    st.lists(st.tuples(st.integers(0, 64), figures()), max_size=3),
    st.integers(1, MAX_K),
    st.integers(1, MAX_K),
    st.sampled_from(["Recommend", "Auto"]),
    st.integers(1, 300),
)
def test_a_tuning_update_never_raises_on_any_figures(
    measured: list[tuple[int, Figures]], k: int, min_k: int, mode: str, max_batch: int
) -> None:
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "tuning": {"mode": mode, "family": "f", "requestedNumSpeculativeTokens": k, "effectiveNumSpeculativeTokens": k},
    }
    settings_ = TuningSettings(mode=mode, min_k=min_k, min_draft_tokens=1)  # type: ignore[arg-type]
    for _ in range(3):  # the profiles go into the status and come back from it
        change = auto.update(
            status, settings_, [(exported, (), f) for exported, f in measured], "2026-11-25T12:00:00Z", max_batch
        )
        if change is None:
            break
        status["tuning"] = {**status["tuning"], **change.patch["tuning"]}
    for item in status["tuning"].get("profiles") or []:
        assert len(item["acceptedPerStep"]) == item["numSpeculativeTokens"] <= MAX_K
