"""The canary (pure): its size, its Deployment, its verdict and what the status says at each phase."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from specinfer_operator.api.labels import TRACK_LABEL
from specinfer_operator.api.rollout import CanarySettings
from specinfer_operator.api.service import TelemetrySettings
from specinfer_operator.controller import canary
from specinfer_operator.controller.canary import CanaryState
from specinfer_operator.controller.conditions import CANARY, PROMOTING, Observed, Verdict, compute, transitions
from specinfer_operator.measure.window import Counts, Figures
from specinfer_operator.render.children import render
from specinfer_operator.telemetry import observation
from tests.support.builders import cr, example
from tests.support.statuses import DESIRED, LATER, NOW, conditions, deployment, good_status


def figures(config_hash: str, length: float, draft_tokens: int = 5000) -> dict[str, Any]:
    return {"configHash": config_hash, "meanAcceptanceLength": length, "draftTokens": draft_tokens, "podsMeasured": 1}


@pytest.mark.parametrize(
    ("replicas", "settings", "size"),
    [
        (4, CanarySettings(), 1),
        (4, CanarySettings(replicas=3), 3),
        (2, CanarySettings(replicas=5), 2),
        (10, CanarySettings(percent=25), 3),
        (1, CanarySettings(percent=10), 1),
    ],
)
def test_the_canary_is_one_pod_a_number_or_a_share_rounded_up(
    replicas: int, settings: CanarySettings, size: int
) -> None:
    assert settings.size(replicas) == size


def test_the_canary_needs_no_extra_pod_unless_max_surge_allows_it() -> None:
    spec = {**example("ngram")["spec"], "replicas": 3, "rollout": {"strategy": "Canary"}}
    assert canary.stable_replicas(cr(spec), 1) == 2
    surge = {**spec, "rollout": {"strategy": "Canary", "maxSurge": 1}}
    assert canary.stable_replicas(cr(surge), 1) == 3


def test_the_canary_deployment_is_told_apart_by_a_track_label_the_service_ignores() -> None:
    resource = cr({**example("ngram")["spec"], "replicas": 3}, name="demo", namespace="ml")
    children = {o["kind"]: o for o in render(resource)}
    trial_deployment = canary.trial(children["Deployment"], 1)
    assert trial_deployment["metadata"]["name"] == "demo-canary"
    assert trial_deployment["spec"]["replicas"] == 1
    assert trial_deployment["spec"]["selector"]["matchLabels"][TRACK_LABEL] == "canary"
    assert trial_deployment["spec"]["template"]["metadata"]["labels"][TRACK_LABEL] == "canary"
    assert TRACK_LABEL not in children["Service"]["spec"]["selector"]
    assert TRACK_LABEL not in children["Deployment"]["spec"]["selector"]["matchLabels"]  # not modified


def test_only_a_change_from_a_configuration_that_served_goes_through_a_canary() -> None:
    spec = {**example("ngram")["spec"], "replicas": 2, "rollout": {"strategy": "Canary"}}
    served = good_status()
    assert canary.wanted(cr(spec), DESIRED.config_hash, served)
    assert not canary.wanted(cr(spec), "good", served)  # what serves already
    assert not canary.wanted(cr(spec), DESIRED.config_hash, {})  # a first rollout
    assert not canary.wanted(cr({**spec, "replicas": 0}), DESIRED.config_hash, served)
    assert not canary.wanted(cr({**spec, "rollout": {}}), DESIRED.config_hash, served)  # RollingUpdate


def test_the_record_keeps_the_baseline_of_its_start_and_starts_again_for_another_configuration() -> None:
    previous = good_status()
    previous["speculation"]["observed"] = figures("good", 3.6)
    state = CanaryState(DESIRED.config_hash, CANARY, 1, 1, "waiting")
    first = canary.record(previous, state, "good", NOW)
    assert first["baseline"] == figures("good", 3.6)
    assert (first["startTime"], first["phase"], first["stableReplicas"]) == (NOW, CANARY, 1)
    later = {**previous, "speculation": {}, "rollout": {**previous["rollout"], "canary": {**first, "observed": {}}}}
    kept = canary.record(later, replace(state, phase=PROMOTING, message="promoted"), "good", LATER)
    assert (kept["startTime"], kept["baseline"], kept["observed"], kept["phase"]) == (
        NOW,
        first["baseline"],
        {},
        PROMOTING,
    )
    other = canary.record(later, replace(state, config_hash="other"), "good", LATER)
    assert other["startTime"] == LATER
    assert "baseline" not in other
    assert "observed" not in other


def test_the_status_through_a_canary_and_its_promotion() -> None:
    served = good_status()
    record = canary.record(served, CanaryState(DESIRED.config_hash, CANARY, 1, 1, "waiting for evidence"), "good", NOW)
    stable = deployment("good", replicas=1, ready=1, updated=1)
    trial_deployment = deployment(DESIRED.config_hash, replicas=1, ready=1, updated=1)
    during = compute(4, Verdict(True), DESIRED, Observed(stable, [], trial_deployment), served, NOW, None, record)
    assert conditions(during)["Ready"] == ("False", CANARY)
    assert conditions(during)["Progressing"] == ("True", CANARY)
    assert conditions(during)["Degraded"] == ("False", "AsExpected")
    assert during["configHash"] == "good"  # what serves on the stable pods, which telemetry measures
    assert (during["ready"], during["readyReplicas"], during["updatedReplicas"]) == ("2/2", 2, 1)
    assert during["rollout"]["canary"] == record
    assert "canary: configuration" in next(c for c in during["conditions"] if c["type"] == "Ready")["message"]
    # One event says the canary started; Ready's echo of it does not.
    assert [t[:2] for t in transitions(served, during)] == [("Progressing", CANARY)]

    promoting = canary.record(during, CanaryState(DESIRED.config_hash, PROMOTING, 1, 1, "within 0.25"), "good", NOW)
    rolling = deployment(DESIRED.config_hash, replicas=2, ready=1, updated=1)
    after = compute(4, Verdict(True), DESIRED, Observed(rolling, []), during, LATER, None, promoting)
    assert conditions(after)["Ready"] == ("False", PROMOTING)
    assert after["configHash"] == DESIRED.config_hash
    assert after["rollout"]["lastGood"]["configHash"] == "good"
    done = compute(
        4, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), after, LATER, None, promoting
    )
    assert conditions(done)["Ready"] == ("True", "Ready")
    assert "canary" not in done["rollout"]
    assert done["rollout"]["lastGood"]["configHash"] == DESIRED.config_hash


def test_canary_figures_are_written_as_evidence_grows_and_when_they_move() -> None:
    status: dict[str, Any] = {"rollout": {"canary": {"configHash": "new"}}}

    def window(draft_tokens: int, accepted: int) -> Figures:
        return Figures(1, 1, 60, Counts(drafts=draft_tokens // 4, draft_tokens=draft_tokens, accepted=accepted))

    patch = observation.canary_update(status, window(400, 300), 1000, NOW, 300)
    assert patch is not None
    written = patch["rollout"]["canary"]["observed"]
    assert (written["configHash"], written["draftTokens"]) == ("new", 400)
    status["rollout"]["canary"]["observed"] = written
    assert observation.canary_update(status, window(440, 330), 1000, NOW, 300) is None  # same ratios, same tenth
    assert observation.canary_update(status, window(1000, 750), 1000, NOW, 300) is not None  # enough to judge
    status["rollout"]["canary"]["observed"] = observation.observed(
        Figures(1, 1, 60, Counts(drafts=250, draft_tokens=1000, accepted=750)), "new", NOW
    )
    # Past the evidence needed, each tenth more is another comparison for the verdict.
    assert observation.canary_update(status, window(1100, 825), 1000, NOW, 300) is not None
    assert observation.canary_update({"rollout": {}}, window(1000, 750), 1000, NOW, 300) is None


def test_stable_figures_compared_with_a_canary_are_written_as_their_evidence_grows() -> None:
    quiet = TelemetrySettings(min_drafts=10**6)  # LowAcceptance is not judged here

    def window(draft_tokens: int) -> Figures:
        return Figures(
            1, 1, 60, Counts(drafts=draft_tokens // 4, draft_tokens=draft_tokens, accepted=draft_tokens // 2)
        )

    first = observation.update({"configHash": "good"}, window(400), quiet, 1, NOW, 300)
    assert first is not None
    status = {"configHash": "good", "speculation": first.patch["speculation"]}
    assert observation.update(status, window(1000), quiet, 1, NOW, 300) is None  # same ratios
    assert observation.update(status, window(1000), quiet, 1, NOW, 300, need=1000) is not None
    assert observation.update(status, window(440), quiet, 1, NOW, 300, need=1000) is None
    # The stable pods' figures are not rewritten for evidence beyond what a canary needs: every resource with
    # strategy Canary would write them at each tenth, canary or not.
    full = observation.update(status, window(1000), quiet, 1, NOW, 300, need=1000)
    assert full is not None
    status["speculation"] = full.patch["speculation"]
    assert observation.update(status, window(1500), quiet, 1, NOW, 300, need=1000) is None
