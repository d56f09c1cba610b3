"""Auto applies schedules (pure): when the bands of batch size that measured two K disagree on the best, Auto
applies K by batch size through the annotation, measures under it band by band, and promotes or reverts it
like a K."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.controller.context import desired_of
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, family_hash
from specinfer_operator.tuning import applied, auto
from specinfer_operator.tuning.applied import Setting
from specinfer_runtime.tuning import TuningSettings
from tests.unit.operator.tuning.test_auto import AUTO, LATER, apply, body, figures, resolve, status

SCHEDULE = ((1, 8, 4), (9, 256, 2))


def annotated(value: dict[str, Any], k: int = 4, **tuning: Any) -> dict[str, Any]:
    obj = body(k=k, **tuning)
    family = family_hash(check(obj).value, RenderDefaults())  # type: ignore[arg-type]
    obj["metadata"]["annotations"] = {TUNED_K_ANNOTATION: json.dumps({"family": family, **value})}
    return obj


def test_an_annotated_schedule_is_rendered_with_its_largest_k_in_the_same_family() -> None:
    obj = body(k=4)
    family = family_hash(check(obj).value, RenderDefaults())  # type: ignore[arg-type]
    obj["metadata"]["annotations"] = {TUNED_K_ANNOTATION: applied.annotation(family, Setting(4, SCHEDULE))}
    chosen = resolve(obj)
    assert (chosen.warning, chosen.tuned) == (None, True)
    ranges = chosen.resource.spec.speculative.num_speculative_tokens_per_batch_size or []
    assert tuple((r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in ranges) == SCHEDULE
    desired = desired_of(chosen.resource, RenderDefaults(), chosen=chosen)
    assert (desired.num_speculative_tokens, desired.schedule) == (4, SCHEDULE)
    assert desired.family == desired_of(resolve(body(k=4)).resource, RenderDefaults()).family


def test_a_schedule_the_annotation_cannot_hold_or_the_bounds_refuse_is_ignored_with_the_reason() -> None:
    shape = resolve(annotated({"numSpeculativeTokens": 4, "numSpeculativeTokensPerBatchSize": [[1, 8]]}))
    assert "needs" in (shape.warning or "")
    assert not shape.resource.spec.speculative.num_speculative_tokens_per_batch_size
    over = resolve(annotated({"numSpeculativeTokens": 4, "numSpeculativeTokensPerBatchSize": [[1, 8, 6], [9, 64, 2]]}))
    assert "sets K=6, outside minK 1 to maxK 4" in (over.warning or "")
    backwards = [[1, 8, 4], [64, 9, 2]]
    refused = resolve(annotated({"numSpeculativeTokens": 4, "numSpeculativeTokensPerBatchSize": backwards}))
    assert "which the spec does not allow" in (refused.warning or "")  # the spec's own rules (R21) judge it
    assert "minBatchSize 64 exceeds maxBatchSize 9" in (refused.warning or "")
    off = resolve(annotated({"numSpeculativeTokens": 4, "numSpeculativeTokensPerBatchSize": [[1, 8, 4], [9, 64, 0]]}))
    assert off.warning is None  # no drafting at large batches is a schedule like another


def test_under_a_schedule_a_windows_figures_are_the_profile_of_the_k_in_force() -> None:
    current = status(serving=4)
    current["tuning"][auto.EFFECTIVE_SCHEDULE] = applied.as_ranges(SCHEDULE)
    recommend_only = TuningSettings(mode="Recommend", min_draft_tokens=100)
    # At batch 16 the engine drafts 2 tokens a step: vLLM exports 4 positions, the last two never drafted.
    window = figures(4, (800, 600, 0, 0), 1000, 5.0, batch=16.0)
    change = auto.update(current, recommend_only, [(4, SCHEDULE, window)], auto_now(), 256)
    assert change is not None
    (profile,) = change.patch["tuning"]["profiles"]
    assert (profile["numSpeculativeTokens"], profile["acceptedPerStep"]) == (2, [0.8, 0.6])
    assert profile["decodeBatch"] == pytest.approx(16, rel=0.01)


def auto_now() -> str:
    return "2026-01-01T00:00:00Z"


def bands_measured() -> dict[str, Any]:
    """K 4 and K 2 measured at batch 1 and at batch 16: at 1 a draft token costs 0.2 ms and K 4 is faster (833
    tokens/s per request against 614); at 16 verification grows with the batch and K 2 is (600 against 444)."""
    current = status(serving=4, mode="Recommend")
    recommend_only = TuningSettings(mode="Recommend", min_draft_tokens=100)
    for batch, times in ((1.0, {4: 4.8, 2: 4.4}), (16.0, {4: 9.0, 2: 4.5})):
        for k in (4, 2):
            window = figures(k, (900, 800, 700, 600)[:k], 1000, times[k], batch)
            change = auto.update(current, recommend_only, [(k, (), window)], auto_now(), 256)
            if change is not None:
                current = apply(current, change)
    current["tuning"]["mode"] = "Auto"  # now in Auto, with the evidence of both bands
    return current


def test_auto_applies_a_schedule_when_the_bands_disagree_and_promotes_it_once_it_serves() -> None:
    current = bands_measured()
    advice = current["tuning"]["recommendation"]
    assert advice["numSpeculativeTokensPerBatchSize"] == [
        {"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": 4},
        {"minBatchSize": 5, "maxBatchSize": 256, "numSpeculativeTokens": 2},
    ]
    assert advice["summary"].startswith("by batch +")
    moved = auto.update(current, AUTO, [], LATER, 256)
    assert moved is not None
    tried = Setting(4, ((1, 4, 4), (5, 256, 2)))
    assert moved.apply == tried
    change = moved.patch["tuning"]["lastChange"]
    assert (change["fromK"], change["toK"], change["result"]) == (4, 4, "Trying")
    assert change["toSchedule"] == applied.as_ranges(tried.schedule)
    assert "K=4 -> K by batch size 1-4: K=4, 5-256: K=2 on a canary" in change["message"]
    # The schedule serves on every pod: promoted; and Auto does not apply it again.
    serving = apply(current, moved)
    serving["tuning"][auto.EFFECTIVE_SCHEDULE] = applied.as_ranges(tried.schedule)
    done = auto.update(serving, AUTO, [], LATER, 256)
    assert done is not None
    assert done.patch["tuning"]["lastChange"]["result"] == "Promoted"
    assert done.apply is None
    settled = apply(serving, done)
    assert auto.update(settled, AUTO, [], "2026-01-01T03:00:00Z", 256) is None


def test_a_schedule_measured_slower_is_reverted_to_what_served() -> None:
    current = bands_measured()
    moved = auto.update(current, AUTO, [], LATER, 256)
    assert moved is not None
    trying = apply(current, moved)
    trying["tuning"]["tunedNumSpeculativeTokens"] = 4
    trying["rollout"] = {"rolledBack": {"reason": "SpeedBelowStable", "message": "canary 300 vs 350"}}
    back = auto.update(trying, AUTO, [], LATER, 256)
    assert back is not None
    assert back.apply == Setting(4)  # K=4 alone, as before
    ended = back.patch["tuning"]["lastChange"]
    assert ended["result"] == "Reverted"
    assert ended["message"].startswith("K by batch size 1-4: K=4, 5-256: K=2 reverted to K=4: SpeedBelowStable")
