"""The learning loop's steps over a whole life: recording, a run, its canary promoted; a second run rolled back;
a run that fails. Each step is pure: status and what was read in, what to write out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from specinfer_operator.learning.loop import Seen, Step, advance, since
from specinfer_operator.learning.plan import kept
from specinfer_operator.render.training import Kept, training_run
from tests.support.builders import cr

SPEC: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
    "rollout": {"strategy": "Canary"},
    "learning": {"sampling": {"percent": 10}, "triggers": {"minNewSamples": 50, "minIntervalMinutes": 0}},
}
RESOURCE = cr(SPEC)
READY = [{"type": "Ready", "status": "True"}]
T0, T1, T2, T3 = "2026-11-29T10:00:00Z", "2026-11-29T10:10:00Z", "2026-11-29T10:20:00Z", "2026-11-29T10:30:00Z"
RESULT = {"generation": 1, "samples": 80, "tokens": 7355, "trainingSeconds": 55.8}
T1_SECONDS = datetime(2026, 11, 29, 10, 10, tzinfo=UTC).timestamp()


def serving(draft: str, learning: dict[str, Any] | None = None, **rollout: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": READY,
        "speculation": {"draft": draft, "observed": {"meanAcceptanceLength": 1.0, "decodeTokensPerSecond": 50.0}},
        "rollout": {"lastGood": {"draft": draft}, **rollout},
    }
    return {**status, "learning": learning} if learning is not None else status


def completed(message: str) -> Seen:
    job = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    pod = {
        "spec": {"containers": [{"name": "trainer", "terminationMessagePolicy": "File"}]},
        "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": {"message": message}}}]},
    }
    return Seen(job, pod)


def test_a_generation_from_recording_to_promotion() -> None:
    first = advance(RESOURCE, serving("spec"), Seen(requests=499), T0)
    assert (first.start, first.annotation, first.status["draft"]) == (0, None, "spec")
    assert first.status["requestsSinceTraining"] == 499
    assert first.status["since"] == T0

    started = advance(RESOURCE, serving("spec", first.status), Seen(requests=1), T1)
    assert started.start == 1
    (generation,) = started.status["generations"]
    assert generation["phase"] == "Training"
    assert generation["job"] == "demo-draft-1"
    assert generation["replaces"] == "spec"
    assert generation["trigger"] == "50 prompts recorded since the last run (triggers.minNewSamples 50)"
    assert started.status["requestsSinceTraining"] == 0
    assert [e[1] for e in started.events] == ["DraftTraining"]

    running = advance(RESOURCE, serving("spec", started.status), Seen(job={"status": {}}), T1)
    assert (running.start, running.annotation, running.events) == (0, None, [])

    trained = advance(RESOURCE, serving("spec", started.status), completed(json.dumps(RESULT)), T2)
    assert trained.annotation == "1"
    assert trained.status["generations"][-1] | {} == {
        **generation,
        "phase": "Canary",
        "samples": 80,
        "tokens": 7355,
        "trainingSeconds": 55.8,
        "draftPath": "drafts/gen-1",
    }
    assert trained.events[0][:2] == ("Normal", "DraftTrained")

    canary = {"observed": {"meanAcceptanceLength": 2.03, "decodeTokensPerSecond": 90.0}}
    measuring = advance(RESOURCE, serving("spec", trained.status, canary=canary), Seen(), T2)
    assert measuring.status["generations"][-1]["after"] == {"meanAcceptanceLength": 2.03, "decodeTokensPerSecond": 90.0}
    assert measuring.status["generations"][-1]["before"] == {"meanAcceptanceLength": 1.0, "decodeTokensPerSecond": 50.0}
    assert measuring.start == 0  # nothing starts beside a canary, however many requests

    # Promoted while the telemetry still shows the stable configuration: the canary's figures as last read are
    # no more than a glimpse of its traffic, so the generation waits for its own.
    status = serving("gen-1", measuring.status)
    status["rollout"]["lastGood"]["configHash"] = "learned"
    status["speculation"]["observed"]["configHash"] = "stable"
    promoted = advance(RESOURCE, status, Seen(), T3)
    last = promoted.status["generations"][-1]
    assert (last["phase"], last["finishedAt"], promoted.status["draft"]) == ("Promoted", T3, "gen-1")
    assert "after" not in last
    assert "promotedAcceptanceLength" not in promoted.status
    assert promoted.events == [
        (
            "Normal",
            "DraftPromoted",
            "gen-1 serves on every pod: mean acceptance length 1.00 -> 2.03, decode tok/s 50.00 -> 90.00 on its canary",
        )
    ]
    status["learning"] = promoted.status
    assert advance(RESOURCE, status, Seen(requests=500), T3).start == 0  # no run before its own figures


def _canary_of_gen2() -> Step:
    learning = {
        "since": T0,
        "draft": "gen-1",
        "requestsSinceTraining": 0,
        "generations": [
            {"generation": 1, "phase": "Promoted", "job": "demo-draft-1", "replaces": "spec", "startedAt": T0},
            {"generation": 2, "phase": "Training", "job": "demo-draft-2", "replaces": "gen-1", "startedAt": T1},
        ],
    }
    return advance(RESOURCE, serving("gen-1", learning), completed(json.dumps({**RESULT, "generation": 2})), T2)


def test_a_slower_draft_is_rolled_back_to_the_one_it_replaced_and_kept() -> None:
    trained = _canary_of_gen2()
    assert trained.annotation == "2"
    back = {"draft": "gen-2", "reason": "SpeedBelowStable", "message": "0.62x the stable pods' decode speed"}
    ended = advance(RESOURCE, serving("gen-1", trained.status, rolledBack=back), Seen(), T3)
    last = ended.status["generations"][-1]
    assert (last["phase"], last["reason"]) == ("RolledBack", "SpeedBelowStable: 0.62x the stable pods' decode speed")
    assert last["draftPath"] == "drafts/gen-2"  # kept for inspection
    assert ended.annotation == "1"
    assert ended.events[0][:2] == ("Warning", "DraftRolledBack")
    # Generation 3 needs prompts newer than generation 2's start.
    assert since(ended.status, 3) == datetime(2026, 11, 29, 10, 10, tzinfo=UTC).timestamp()


WINDOW = {"oldest": int(datetime(2026, 11, 29, 9, 0, tzinfo=UTC).timestamp()), "newest": int(T1_SECONDS)}


def _rolled_back(result: dict[str, Any]) -> Step:
    learning = {
        "since": T0,
        "draft": "gen-1",
        "generations": [
            {"generation": 1, "phase": "Promoted", "job": "demo-draft-1", "replaces": "spec", "startedAt": T0},
            {"generation": 2, "phase": "Training", "job": "demo-draft-2", "replaces": "gen-1", "startedAt": T1},
        ],
    }
    trained = advance(RESOURCE, serving("gen-1", learning), completed(json.dumps(result)), T2)
    back = {"draft": "gen-2", "reason": "SpeedBelowStable", "message": "0.62x the stable pods' decode speed"}
    return advance(RESOURCE, serving("gen-1", trained.status, rolledBack=back), Seen(), T3)


def test_the_samples_a_rolled_back_generation_learned_from_are_never_trained_on_again() -> None:
    ended = _rolled_back({**RESULT, "generation": 2, **WINDOW})
    assert ended.status["generations"][-1]["window"] == WINDOW
    assert ended.status["quarantine"] == [{"generation": 2, **WINDOW, "samples": 80}]
    assert ended.status["quarantinedSamples"] == 80
    assert "no later run trains on the 80 prompts it learned from" in ended.events[0][2]
    # The next run reads every sample but those of the window, and keeps gen-1 (in force) but not gen-2.
    assert RESOURCE.spec.learning is not None
    retained = kept(RESOURCE.spec.learning, ended.status, in_force=1)
    assert retained == Kept(frozenset({1}), ((WINDOW["oldest"], WINDOW["newest"]),))
    run = training_run(RESOURCE, 3, None, since(ended.status, 3), retained)
    assert run.exclude == [[WINDOW["oldest"], WINDOW["newest"]]]
    assert run.keep == [1]


def test_a_quarantined_window_goes_with_its_samples_at_the_retention_age() -> None:
    ended = _rolled_back({**RESULT, "generation": 2, **WINDOW})
    week_later = "2026-12-06T10:11:00Z"  # retentionHours 168 past the window's newest sample
    aged = advance(RESOURCE, serving("gen-1", ended.status), Seen(), "2026-12-06T10:09:00Z")
    assert aged.status["quarantinedSamples"] == 80
    gone = advance(RESOURCE, serving("gen-1", ended.status), Seen(), week_later)
    assert "quarantine" not in gone.status
    assert gone.status["quarantinedSamples"] == 0


def test_a_result_without_a_window_quarantines_nothing_it_cannot_name() -> None:
    ended = _rolled_back({**RESULT, "generation": 2, "oldest": 5, "newest": 4})  # not a window
    assert "window" not in ended.status["generations"][-1]
    assert "quarantine" not in ended.status


def test_a_failed_run_says_why_and_the_next_waits_for_new_prompts() -> None:
    learning = {"since": T0, "draft": "spec", "requestsSinceTraining": 0, "generations": [
        {"generation": 1, "phase": "Training", "job": "demo-draft-1", "replaces": "spec", "startedAt": T0},
    ]}  # fmt: skip
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}}
    ended = advance(RESOURCE, serving("spec", learning), Seen(failed, None, 10), T1)
    last = ended.status["generations"][-1]
    assert (last["phase"], last["reason"]) == ("Failed", "DeadlineExceeded")
    assert (ended.annotation, ended.start) == (None, 0)
    assert ended.events[0][:2] == ("Warning", "DraftTrainingFailed")
    assert since(ended.status, 1) == 0.0


def test_a_promoted_generation_takes_its_figures_from_every_pod_once_measured() -> None:
    learning = {
        "since": T0,
        "draft": "gen-1",
        "requestsSinceTraining": 0,
        "generations": [
            {"generation": 1, "phase": "Promoted", "job": "demo-draft-1", "replaces": "spec", "startedAt": T0}
        ],
    }
    status = serving("gen-1", learning)
    status["configHash"] = status["rollout"]["lastGood"]["configHash"] = "new"
    evidence = {"configHash": "new", "pods": 2, "podsMeasured": 2, "drafts": 100}  # telemetry.minDrafts: 100
    for unfinished in (
        {"configHash": "old"},  # the figures of the configuration it replaced
        {"podsMeasured": 1},  # a pod not measured yet
        {"drafts": 35, "meanAcceptanceLength": 1.38},  # a first reading: one prompt's drafts
    ):
        status["speculation"]["observed"] = {**evidence, "meanAcceptanceLength": 1.0, **unfinished}
        step = advance(RESOURCE, status, Seen(requests=500), T1)
        assert "after" not in step.status["generations"][-1], unfinished
        assert step.start == 0, unfinished  # nor a run before its own figures
    status["speculation"]["observed"] = {**evidence, "meanAcceptanceLength": 2.1, "decodeTokensPerSecond": 88.0}
    step = advance(RESOURCE, status, Seen(), T1)
    assert step.status["generations"][-1]["after"] == {"meanAcceptanceLength": 2.1, "decodeTokensPerSecond": 88.0}
    assert step.status["promotedAcceptanceLength"] == 2.1


def test_drift_is_judged_on_evidence_of_the_configuration_in_force() -> None:
    """A run on drifted acceptance needs the figures LowAcceptance would judge: every pod, minDrafts drafts."""
    learning = {
        "since": T0,
        "draft": "gen-1",
        "requestsSinceTraining": 0,
        "promotedAcceptanceLength": 2.0,
        "generations": [
            {"generation": 1, "phase": "Promoted", "job": "d-1", "replaces": "spec", "startedAt": T0, "after": {}}
        ],
    }
    triggers = {"minNewSamples": 500, "minIntervalMinutes": 0}
    drifted = cr({**SPEC, "learning": {**SPEC["learning"], "triggers": triggers}})
    status = serving("gen-1", learning)
    status["configHash"] = "in-force"
    evidence = {"configHash": "in-force", "pods": 2, "podsMeasured": 2, "drafts": 100, "meanAcceptanceLength": 1.2}
    for few in ({"drafts": 99}, {"podsMeasured": 1}, {"configHash": "earlier"}):
        status["speculation"]["observed"] = {**evidence, **few}
        assert advance(drifted, status, Seen(requests=500), T1).start == 0, few
    status["speculation"]["observed"] = evidence
    step = advance(drifted, status, Seen(requests=500), T1)
    assert step.start == 2
    assert "mean acceptance length 1.20 is below 1.80" in step.events[0][2]
