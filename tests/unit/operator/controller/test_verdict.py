"""A canary's verdict (pure): speed at comparable load decides, over repeated comparisons; acceptance
explains, and a collapse of it that brings no speed is rolled back with its own reason."""

from __future__ import annotations

from typing import Any

from specinfer_operator.api.rollout import CanarySettings
from specinfer_operator.controller import verdict
from specinfer_operator.controller.canary import rescaled
from specinfer_operator.tuning.model import Cost
from tests.support.statuses import DESIRED, good_status

SETTINGS = CanarySettings(min_draft_tokens=1000, max_speed_drop_percent=2, min_comparisons=3)
FLOOR = 1.5


def figures(
    config_hash: str,
    length: float,
    milliseconds: float,
    batch: float = 1.0,
    draft_tokens: int = 5000,
    time: str = "t0",
) -> dict[str, Any]:
    """Window figures where tokens per step is the acceptance length (one request per step)."""
    return {
        "configHash": config_hash,
        "meanAcceptanceLength": length,
        "draftTokens": draft_tokens,
        "tokensPerStep": length,
        "stepMilliseconds": milliseconds,
        "decodeBatch": batch,
        "measuredTime": time,
    }


def trial(canary: dict[str, Any] | None, comparisons: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    record: dict[str, Any] = {"configHash": DESIRED.config_hash, "stableConfigHash": "good"}
    if canary is not None:
        record["observed"] = canary
    if comparisons:
        record["comparisons"] = list(comparisons)
    return record


def repeated(
    canary: list[dict[str, Any]], stable: dict[str, Any], settings: CanarySettings = SETTINGS, stable_pods: int = 1
) -> list[verdict.Verdict]:
    """The verdicts as successive canary measurements arrive, each kept in the record as the controller does."""
    out: list[verdict.Verdict] = []
    kept: tuple[dict[str, Any], ...] = ()
    for measured in canary:
        said = verdict.judge(trial(measured, kept), stable, stable_pods, True, settings, FLOOR, None)
        out.append(said)
        kept = said.comparisons
    return out


def test_a_canary_with_shorter_acceptance_that_decodes_faster_is_promoted() -> None:
    # Adaptive verification, or a lower K: 3.0 tokens per 4 ms step (750/s) against 4.0 per 8 ms (500/s).
    stable = figures("good", 4.0, 8.0)
    said = repeated([figures(DESIRED.config_hash, 3.0, 4.0, time=f"t{i}") for i in range(3)], stable)
    assert [s.action for s in said] == ["wait", "wait", "promote"]
    assert said[0].message.startswith("compared 1/3 times: canary 750 tokens/s per request vs 500")
    assert said[-1].reason == "Promoted"
    assert "+50.0% (median of 3 comparisons)" in said[-1].message
    assert "acceptance length 3.00 vs 4.00" in said[-1].message  # the explanation
    assert said[-1].message.endswith(": faster")
    assert [c["ratio"] for c in said[-1].comparisons] == [1.5, 1.5, 1.5]


def test_a_canary_with_longer_acceptance_but_a_slower_step_is_rolled_back() -> None:
    # A big draft model: every draft accepted (5 tokens per step) but the step takes 25 ms (200/s vs 450/s).
    stable = figures("good", 3.6, 8.0)
    said = repeated([figures(DESIRED.config_hash, 5.0, 25.0, time=f"t{i}") for i in range(3)], stable)
    assert (said[-1].action, said[-1].reason) == ("rollback", "SpeedBelowStable")
    assert "canary 200 tokens/s per request vs 450 for the stable pods" in said[-1].message
    assert "more than 2% slower" in said[-1].message


def test_equal_acceptance_at_half_the_speed_is_rolled_back() -> None:
    # An image upgrade that halves speed: the same acceptance, twice the step time.
    stable = figures("good", 3.0, 5.0)
    said = repeated([figures(DESIRED.config_hash, 3.0, 10.0, time=f"t{i}") for i in range(3)], stable)
    assert said[-1].reason == "SpeedBelowStable"
    assert "-50.0%" in said[-1].message


def test_one_noisy_window_does_not_decide() -> None:
    stable = figures("good", 3.0, 5.0)  # 600/s
    steps = [5.0, 9.0, 5.1]  # the second window slow (333/s): the median of the three is 588/s, within 2 %
    said = repeated([figures(DESIRED.config_hash, 3.0, ms, time=f"t{i}") for i, ms in enumerate(steps)], stable)
    assert said[-1].action == "promote"
    assert "within 2%" in said[-1].message
    # And the other way round: one fast window among slow ones does not promote.
    steps = [7.0, 4.0, 7.0]
    said = repeated([figures(DESIRED.config_hash, 3.0, ms, time=f"t{i}") for i, ms in enumerate(steps)], stable)
    assert said[-1].reason == "SpeedBelowStable"


def test_the_same_measurement_is_compared_once() -> None:
    stable = figures("good", 3.0, 5.0)
    same = [figures(DESIRED.config_hash, 3.0, 5.0, time="t0")] * 3
    said = repeated(same, stable)
    assert [s.action for s in said] == ["wait"] * 3
    assert len(said[-1].comparisons) == 1


def test_a_collapse_of_acceptance_that_brings_no_speed_is_rolled_back_at_once() -> None:
    stable = figures("good", 3.6, 8.0)
    collapsed = figures(DESIRED.config_hash, 1.2, 8.0)
    said = verdict.judge(trial(collapsed), stable, 1, True, SETTINGS, FLOOR, None)
    assert (said.action, said.reason) == ("rollback", "AcceptanceBelowFloor")
    assert said.message.startswith("acceptance collapsed: canary mean acceptance length 1.20")
    assert "below telemetry.minMeanAcceptanceLength 1.5" in said.message
    # A collapse that decodes faster (a far cheaper step) is judged on speed like any other.
    cheap = figures(DESIRED.config_hash, 1.2, 1.0)
    assert verdict.judge(trial(cheap), stable, 1, True, SETTINGS, FLOOR, None).action == "wait"


def test_a_canary_waits_for_its_pods_for_evidence_on_both_sides_and_for_step_times() -> None:
    stable = figures("good", 3.6, 8.0)
    canary = figures(DESIRED.config_hash, 3.5, 8.0)
    assert verdict.judge(trial(canary), stable, 1, False, SETTINGS, FLOOR, None).action == "wait"
    few = verdict.judge(trial({**canary, "draftTokens": 300}), stable, 1, True, SETTINGS, FLOOR, None)
    assert (few.action, few.message) == ("wait", "waiting for evidence: the canary drafted 300/1000 tokens")
    thin = verdict.judge(trial(canary), {**stable, "draftTokens": 200}, 1, True, SETTINGS, FLOOR, None)
    assert "stable pods drafted 200/1000" in thin.message
    other = verdict.judge(trial(canary), {**stable, "configHash": "older"}, 1, True, SETTINGS, FLOOR, None)
    assert other.action == "wait"  # figures of another configuration are not the stable pods'
    timeless = {k: v for k, v in canary.items() if k != "stepMilliseconds"}
    untimed = verdict.judge(trial(timeless), stable, 1, True, SETTINGS, FLOOR, None)
    assert (untimed.action, untimed.comparisons) == ("wait", ())
    assert "no inter-token latency" in untimed.message


def test_loads_too_far_apart_wait_unless_a_fitted_cost_relates_them() -> None:
    stable = figures("good", 3.0, 10.0, batch=8.0)  # 300/s at batch 8
    canary = [figures(DESIRED.config_hash, 3.0, 5.0, batch=1.0, time=f"t{i}") for i in range(3)]  # 600/s at 1
    apart = verdict.judge(trial(canary[0]), stable, 1, True, SETTINGS, FLOOR, None)
    assert apart.action == "wait"
    assert "waiting for comparable load: the canary decoded 1.0 requests per step, the stable configuration 8.0" in (
        apart.message
    )
    # Step time 2 + 1 ms per request at K=4: the stable pods' 10 ms at batch 8 are 3 ms at batch 1 (1000/s).
    cost = (Cost(base=2e-3, per_token=0.0, per_request=1e-3), 4)
    said = [verdict.judge(trial(canary[0]), stable, 1, True, SETTINGS, FLOOR, None, cost)]
    for measured in canary[1:]:
        said.append(verdict.judge(trial(measured, said[-1].comparisons), stable, 1, True, SETTINGS, FLOOR, None, cost))
    assert said[-1].reason == "SpeedBelowStable"
    assert said[-1].comparisons[-1]["stableTokensPerSecond"] == 1000.0
    assert said[-1].comparisons[-1]["normalised"] is True
    assert "at batch 1 (normalised)" in said[-1].message


def test_the_fitted_cost_comes_from_tunings_profiles_of_the_stable_family() -> None:
    def profile(k: int, batch: float, milliseconds: float) -> dict[str, Any]:
        return {
            "numSpeculativeTokens": k,
            "decodeSteps": 1000,
            "draftTokens": 1000 * k,
            "stepMilliseconds": milliseconds,
            "decodeBatch": batch,
            "acceptedPerStep": [0.5] * k,
            "measuredTime": "t",
        }

    status = good_status()
    status["rollout"]["lastGood"]["family"] = "fam"
    # 2 ms + 0.5 ms per draft token + 1 ms per request: measured at two K and two batch sizes.
    status["tuning"] = {
        "family": "fam",
        "profiles": [profile(k, n, 2 + 0.5 * k + 1 * n) for k in (2, 4) for n in (1.0, 8.0)],
    }
    found = verdict.stable_cost(status, "fam")
    assert found is not None
    cost, k = found
    assert k == 4
    assert abs(cost.seconds(4, 8.0) - 12e-3) < 1e-9
    assert verdict.stable_cost(status, "other") is None  # profiles of another family say nothing of it
    status["tuning"]["profiles"] = [profile(k, 1.0, 2 + 0.5 * k) for k in (2, 4)]
    assert verdict.stable_cost(status, "fam") is None  # one batch size: no batch terms to normalise with


def test_with_every_pod_in_the_canary_it_is_compared_with_the_last_good_figures() -> None:
    baseline = figures("good", 3.6, 8.0)

    def sequential(canary: dict[str, Any], kept: tuple[dict[str, Any], ...] = ()) -> verdict.Verdict:
        record = {**trial(canary, kept), "baseline": baseline}
        return verdict.judge(record, None, 0, True, SETTINGS, FLOOR, None)

    first = sequential(figures(DESIRED.config_hash, 3.6, 8.0, time="t0"))
    assert "last good configuration (sequential)" in first.message
    # Nothing measured the last good configuration: the resource's floor judges the canary alone.
    alone = verdict.judge(trial(figures(DESIRED.config_hash, 1.2, 8.0)), None, 0, True, SETTINGS, FLOOR, None)
    assert (alone.action, alone.reason) == ("rollback", "AcceptanceBelowFloor")
    fine = verdict.judge(trial(figures(DESIRED.config_hash, 2.0, 8.0)), None, 0, True, SETTINGS, FLOOR, None)
    assert fine.action == "promote"


def test_a_person_promotes_or_aborts_whatever_the_figures() -> None:
    stable = figures("good", 3.6, 8.0)
    assert verdict.judge(trial(None), None, 2, False, SETTINGS, FLOOR, "promote").reason == "PromotedByHand"
    fast = figures(DESIRED.config_hash, 5.0, 1.0)
    aborted = verdict.judge(trial(fast), stable, 2, True, SETTINGS, FLOOR, "abort")
    assert (aborted.action, aborted.reason) == ("rollback", "AbortedByHand")
    assert verdict.judge(trial(fast), stable, 2, True, SETTINGS, FLOOR, "promte").action == "wait"


def at(minute: int) -> str:
    return f"2026-11-29T10:{minute:02d}:00Z"


def windowed(config_hash: str, milliseconds: float, batch: float, minute: int) -> dict[str, Any]:
    """Figures of the two minutes before `minute`."""
    return {**figures(config_hash, 3.0, milliseconds, batch, time=at(minute)), "windowSeconds": 120}


def test_a_scale_event_neither_promotes_nor_rolls_back_a_canary() -> None:
    """Two comparisons said the canary is as fast; then the autoscaler doubled the engines at 10:05. The stable pods'
    window straddling the scale shows them faster per request (half the batch for part of it): a third comparison
    would complete the count and decide. The verdict waits for figures of both sides measured wholly after the
    scale, and the rescaled record starts its comparisons over."""
    kept = tuple(
        verdict.compare(windowed(DESIRED.config_hash, 4.0, 8.0, m), windowed("good", 4.0, 8.0, m), None)[0] or {}
        for m in (3, 4)
    )
    record = {**trial(windowed(DESIRED.config_hash, 4.0, 8.0, 7), kept), "scaledTime": at(5)}
    straddling = windowed("good", 3.0, 7.0, 6)  # 10:04 to 10:06: mostly at half the batch, faster per step
    said = verdict.judge(record, straddling, 2, True, SETTINGS, FLOOR, None)
    assert said.action == "wait"
    assert said.message == f"waiting for figures measured wholly after the replicas changed at {at(5)}"
    without_the_scale = {k: v for k, v in record.items() if k != "scaledTime"}
    assert verdict.judge(without_the_scale, straddling, 2, True, SETTINGS, FLOOR, None).action != "wait"
    after = rescaled({**record, "replicas": 1, "stableReplicas": 1}, 2, 2, at(5))
    assert "comparisons" not in after
    assert (after["replicas"], after["stableReplicas"], after["scaledTime"]) == (2, 2, at(5))

    # A canary's figures from before the scale do not count either, whatever the stable pods show.
    record = {**trial(windowed(DESIRED.config_hash, 8.0, 8.0, 5), kept), "scaledTime": at(5)}
    assert verdict.judge(record, windowed("good", 4.0, 8.0, 7), 2, True, SETTINGS, FLOOR, None).action == "wait"

    # Both windows after the scale: compared again, from the first comparison.
    record = {**trial(windowed(DESIRED.config_hash, 4.0, 4.0, 7), ()), "scaledTime": at(5)}
    said = verdict.judge(record, windowed("good", 4.0, 4.0, 7), 2, True, SETTINGS, FLOOR, None)
    assert said.action == "wait"
    assert said.message.startswith("compared 1/3 times")


def test_a_sequential_canary_after_a_scale_waits_for_its_own_figures_only() -> None:
    """With every pod in the canary the reference is the last good configuration's figures at the start: only the
    canary's own window must follow the scale."""
    baseline = windowed("good", 4.0, 1.0, 1)
    record = {**trial(windowed(DESIRED.config_hash, 4.0, 1.0, 9), ()), "baseline": baseline, "scaledTime": at(5)}
    said = verdict.judge(record, None, 0, True, SETTINGS, FLOOR, None)
    assert said.message.startswith("compared 1/3 times")
