"""Tuning in the operator (pure): the K rendered, status.tuning, the recommendation, Auto's moves and how
a canary that changes K alone is judged."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.controller.conditions import Observed, Verdict, compute
from specinfer_operator.controller.context import desired_of
from specinfer_operator.measure.timing import Steps
from specinfer_operator.measure.window import Counts, Figures
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, family_hash
from specinfer_operator.tuning import applied, auto
from specinfer_operator.tuning.applied import Setting
from specinfer_runtime.tuning import TuningSettings
from tests.support.builders import example, resource
from tests.support.statuses import NOW, deployment

LATER = "2026-01-01T01:00:00Z"
AUTO = TuningSettings(mode="Auto", min_draft_tokens=100, min_gain_percent=5, min_interval_seconds=600)


def body(
    k: int = 4, mode: str = "Auto", tuned: int | None = None, graph: dict[str, Any] | None = None, **tuning: Any
) -> dict[str, Any]:
    spec = example("ngram")["spec"]
    spec["speculative"] = {**spec["speculative"], "numSpeculativeTokens": k, "tuning": {"mode": mode, **tuning}}
    spec["rollout"] = {"strategy": "Canary"}
    spec["replicas"] = 2
    if graph is not None:
        spec["graph"] = graph
    out = resource(spec, name="demo", namespace="ml", uid="u1")
    if tuned is not None:
        family = family_hash(check(out).value, RenderDefaults())  # type: ignore[arg-type]
        out["metadata"]["annotations"] = {TUNED_K_ANNOTATION: applied.annotation(family, Setting(tuned))}
    return out


def resolve(obj: dict[str, Any]) -> applied.Effective:
    found = applied.resolve(obj, check(obj), lambda c: family_hash(c, RenderDefaults()), check)
    assert found is not None
    return found


def test_auto_renders_the_annotated_k_and_the_spec_is_left_as_written() -> None:
    chosen = resolve(body(k=4, tuned=2))
    assert chosen.resource.spec.speculative.num_speculative_tokens == 2
    assert (chosen.requested_k, chosen.warning) == (4, None)
    desired = desired_of(chosen.resource, RenderDefaults(), chosen=chosen)
    assert (desired.num_speculative_tokens, desired.requested_k, desired.tuned) == (2, 4, True)
    # Pinned to the spec's own K, it is still tuning's K: a slower canary of it is reverted, not a failure.
    same = resolve(body(k=4, tuned=4))
    assert (same.resource.spec.speculative.num_speculative_tokens, same.tuned) == (4, True)
    untuned = desired_of(resolve(body(k=4)).resource, RenderDefaults())
    assert desired.family == untuned.family  # K alone differs
    assert desired.config_hash != untuned.config_hash


def test_the_annotation_counts_only_in_auto_for_its_family_and_within_bounds() -> None:
    assert resolve(body(mode="Recommend", tuned=2)).resource.spec.speculative.num_speculative_tokens == 4
    stale = body(tuned=2)
    stale["spec"]["speculative"]["ngram"] = {"promptLookupMin": 1, "promptLookupMax": 8}  # another family
    assert resolve(stale).resource.spec.speculative.num_speculative_tokens == 4
    over = resolve(body(k=4, tuned=6))  # maxK defaults to the spec's K
    assert over.resource.spec.speculative.num_speculative_tokens == 4
    assert over.warning is not None
    assert "outside minK 1 to maxK 4" in over.warning
    assert resolve(body(k=4, tuned=6, maxK=8)).resource.spec.speculative.num_speculative_tokens == 6
    garbage = body()
    garbage["metadata"]["annotations"] = {TUNED_K_ANNOTATION: "{not json"}
    assert "not JSON" in (resolve(garbage).warning or "")
    huge = body()
    huge["metadata"]["annotations"] = {TUNED_K_ANNOTATION: json.dumps({"pad": "x" * 5000})}
    assert "longer than" in (resolve(huge).warning or "")


def test_a_tuned_k_the_spec_does_not_allow_is_ignored_with_the_reason() -> None:
    sizes = {"mode": "FULL_DECODE_ONLY", "captureSizes": [6, 12]}  # multiples of K+1 for K 5, 2 and 1, not 3
    chosen = resolve(body(k=5, tuned=3, maxK=5, graph=sizes))
    assert chosen.resource.spec.speculative.num_speculative_tokens == 5
    assert chosen.warning is not None
    assert "not multiples: [6]" in chosen.warning


def figures(k: int, accepted: tuple[int, ...], steps: int, seconds: float, batch: float = 1.0) -> Figures:
    generated = steps + sum(accepted) + 10
    counts = Counts(steps, steps * k, sum(accepted), accepted, Steps(steps, seconds, generated, 10, int(steps / batch)))
    return Figures(1, 1, 300.0, counts)


def status(
    serving: int = 4, requested: int = 4, mode: str = "Auto", tuned: int | None = None, **extra: Any
) -> dict[str, Any]:
    tuning = auto.carry(None, mode, "fam", requested, serving, tuned)
    return {
        "configHash": "h",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}],
        "speculation": {"numSpeculativeTokens": serving},
        "tuning": tuning,
        **extra,
    }


def apply(current: dict[str, Any], change: auto.Update) -> dict[str, Any]:
    return {**current, "tuning": {**current["tuning"], **change.patch["tuning"]}}


def test_the_first_profile_asks_for_a_second_k_and_auto_applies_it() -> None:
    # ngram: 1,000 decode steps of 4 ms, accepted 800/600/400/200 at positions 0-3.
    first = auto.update(status(), AUTO, [(4, (), figures(4, (800, 600, 400, 200), 1000, 4.0))], NOW, 256)
    assert first is not None
    profile = first.patch["tuning"]["profiles"][0]
    assert (profile["numSpeculativeTokens"], profile["stepMilliseconds"], profile["acceptedPerStep"]) == (
        4,
        4.0,
        [0.8, 0.6, 0.4, 0.2],
    )
    assert first.patch["tuning"]["recommendation"]["summary"] == "measure K=2"
    assert first.apply == Setting(2)
    assert first.family == "fam"
    assert first.patch["tuning"]["lastChange"]["result"] == "Trying"
    assert [e[1] for e in first.events] == ["TuningRecommendation", "TuningChange"]
    # The same figures again: nothing to write, nothing to do while the change is under way.
    again = apply(status(), first)
    assert auto.update(again, AUTO, [(4, (), figures(4, (800, 600, 400, 200), 1000, 4.0))], NOW, 256) is None


def test_recommend_only_reports() -> None:
    found = auto.update(
        status(mode="Recommend"), AUTO, [(4, (), figures(4, (800, 600, 400, 200), 1000, 4.0))], NOW, 256
    )
    assert found is not None
    assert found.apply is None
    assert "lastChange" not in found.patch["tuning"]


def test_too_little_evidence_makes_no_profile() -> None:
    thin = TuningSettings(mode="Auto", min_draft_tokens=100_000)
    assert auto.update(status(), thin, [(4, (), figures(4, (800, 600, 400, 200), 1000, 4.0))], NOW, 256) is None


def two_profiles() -> dict[str, Any]:
    """K 4 and K 2 measured: a draft token costs 1 ms and the last positions are rarely accepted, so K 2
    serves more tokens per second (2.6 tokens in 4 ms against 3.0 in 6 ms)."""
    current = status()
    for k, accepted, seconds in ((4, (900, 700, 300, 100), 6.0), (2, (900, 700), 4.0)):
        change = auto.update(
            current,
            TuningSettings(mode="Recommend", min_draft_tokens=100),
            [(k, (), figures(k, accepted, 1000, seconds))],
            NOW,
            256,
        )
        assert change is not None
        current = apply(current, change)
    return current


def test_with_two_k_the_recommendation_is_a_k_with_its_gain() -> None:
    current = two_profiles()
    recommendation = current["tuning"]["recommendation"]
    assert recommendation["numSpeculativeTokens"] == 2
    assert recommendation["expectedGainPercent"] > 5
    assert recommendation["summary"].startswith("K=2 +")


def test_auto_waits_for_the_interval_and_for_a_ready_resource() -> None:
    current = two_profiles()
    current["tuning"]["mode"] = "Auto"
    recent = {"fromK": 2, "toK": 4, "result": "Promoted", "message": "", "time": NOW}
    current["tuning"]["lastChange"] = recent
    assert auto.update(current, AUTO, [], "2026-01-01T00:05:00Z", 256) is None  # 5 min < 10 min
    moved = auto.update(current, AUTO, [], LATER, 256)
    assert moved is not None
    assert moved.apply == Setting(2)
    busy = {**current, "rollout": {"canary": {"configHash": "x", "phase": "Canary"}}}
    assert auto.update(busy, AUTO, [], LATER, 256) is None
    degraded = {**current, "conditions": [{"type": "Ready", "status": "False", "reason": "RolledBack"}]}
    assert auto.update(degraded, AUTO, [], LATER, 256) is None


def test_a_change_under_way_ends_promoted_or_reverted() -> None:
    trying = {"fromK": 4, "toK": 2, "result": "Trying", "message": "", "time": NOW}
    promoted = status(serving=2)
    promoted["tuning"]["lastChange"] = trying
    done = auto.update(promoted, AUTO, [], LATER, 256)
    assert done is not None
    assert done.patch["tuning"]["lastChange"]["result"] == "Promoted"
    assert done.apply is None
    slower = {"configHash": "k2", "generation": 3, "reason": "SpeedBelowStable", "message": "canary 300 vs 350"}
    reverted = status(serving=4, tuned=2, rollout={"rolledBack": slower})
    reverted["tuning"]["lastChange"] = trying
    back = auto.update(reverted, AUTO, [], LATER, 256)
    assert back is not None
    assert back.patch["tuning"]["lastChange"]["result"] == "Reverted"
    assert "SpeedBelowStable: canary 300 vs 350" in back.patch["tuning"]["lastChange"]["message"]
    assert back.apply == Setting(4)  # the K before is put back
    assert [e[1] for e in back.events] == ["TuningReverted"]


def test_a_k_pinned_by_hand_and_rolled_back_is_reverted_too() -> None:
    slower = {"configHash": "k8", "generation": 3, "reason": "SpeedBelowStable", "message": "canary 120 vs 180"}
    pinned = status(serving=4, tuned=8, rollout={"rolledBack": slower})
    back = auto.update(pinned, AUTO, [], LATER, 256)
    assert back is not None
    assert back.apply == Setting(4)
    change = back.patch["tuning"]["lastChange"]
    assert (change["fromK"], change["toK"], change["result"]) == (4, 8, "Reverted")


def test_a_reverted_k_is_not_tried_again_soon() -> None:
    current = two_profiles()
    current["tuning"]["mode"] = "Auto"
    current["tuning"]["lastChange"] = {"fromK": 4, "toK": 2, "result": "Reverted", "message": "", "time": NOW}
    # 20 minutes on, minIntervalSeconds (10) has passed, but not 4 times it.
    assert auto.update(current, AUTO, [], "2026-01-01T00:20:00Z", 256) is None
    again = auto.update(current, AUTO, [], LATER, 256)
    assert again is not None
    assert again.apply == Setting(2)


def test_status_tuning_keeps_its_evidence_within_a_family_only() -> None:
    kept = auto.carry({"family": "a", "profiles": [{"k": 1}], "lastChange": {"x": 1}}, "Auto", "a", 4, 2)
    assert kept is not None
    assert (kept["profiles"], kept["effectiveNumSpeculativeTokens"], kept["requestedNumSpeculativeTokens"]) == (
        [{"k": 1}],
        2,
        4,
    )
    fresh = auto.carry({"family": "a", "profiles": [{"k": 1}]}, "Auto", "b", 4, 4)
    assert fresh is not None
    assert "profiles" not in fresh
    assert auto.carry({"family": "a"}, "Off", "a", 4, 4) is None


def test_a_tuned_k_measured_slower_leaves_the_resource_ready() -> None:
    obj = body(k=4, tuned=2)
    chosen = resolve(obj)
    desired = desired_of(chosen.resource, RenderDefaults(), chosen=chosen)
    good = desired_of(resolve(body(k=4)).resource, RenderDefaults())
    previous = compute(3, Verdict(True), good, Observed(deployment(good.config_hash), []), {}, NOW)
    rollback = {
        "configHash": desired.config_hash,
        "generation": 3,
        "reason": "SpeedBelowStable",
        "message": "slower",
        "time": NOW,
    }
    after = compute(3, Verdict(True), desired, Observed(deployment(good.config_hash), []), previous, LATER, rollback)
    by_type = {c["type"]: c for c in after["conditions"]}
    assert (by_type["Ready"]["status"], by_type["Degraded"]["status"]) == ("True", "False")
    assert by_type["Progressing"]["reason"] == "TuningReverted"
    assert after["speculation"]["numSpeculativeTokens"] == 4
    assert after["tuning"]["effectiveNumSpeculativeTokens"] == 4
    assert after["tuning"]["requestedNumSpeculativeTokens"] == 4
    # The same verdict on a K written in the spec is a rollback like any other.
    manual = replace(desired, requested_k=2, tuned=False)
    degraded = compute(3, Verdict(True), manual, Observed(deployment(good.config_hash), []), previous, LATER, rollback)
    assert {c["type"]: c for c in degraded["conditions"]}["Degraded"]["status"] == "True"


def test_profiles_at_different_batch_sizes_are_kept_apart_and_give_a_schedule() -> None:
    # Per request: at batch 1 a draft token costs 0.2 ms; at batch 16 verification grows with the batch
    # (0.3 ms more per request and draft token), so K=4 pays at batch 1 and K=1 at batch 16.
    def seconds(k: int, batch: float) -> float:
        return (4.0 + 0.2 * k + 0.3 * batch * k / 4) / 1000

    accepted = (800, 600, 400, 200)
    current = status()
    recommend_only = TuningSettings(mode="Recommend", min_draft_tokens=100, min_gain_percent=0)
    for batch in (1.0, 16.0):
        for k in (4, 2):
            measured = figures(k, accepted[:k], 1600, 1600 * seconds(k, batch), batch)
            change = auto.update(current, recommend_only, [(k, (), measured)], NOW, 64)
            assert change is not None
            current = apply(current, change)
    kept = [(p["numSpeculativeTokens"], p["decodeBatch"]) for p in current["tuning"]["profiles"]]
    assert kept == [(2, 1.0), (2, 16.0), (4, 1.0), (4, 16.0)]
    schedule = current["tuning"]["recommendation"]["numSpeculativeTokensPerBatchSize"]
    assert schedule[0]["minBatchSize"] == 1
    assert schedule[-1]["maxBatchSize"] == 64
    ks = [r["numSpeculativeTokens"] for r in schedule]
    assert ks[0] > ks[-1]
