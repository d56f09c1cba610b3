"""How a run and its canary ended: the Job's conditions and its pod's termination message, read as untrusted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specinfer_operator.learning.outcome import canary_end, result_of, run_end

RESULT = {"generation": 2, "samples": 80, "tokens": 7355, "trainingSeconds": 55.8, "from": "draft in force"}


def job(kind: str | None, reason: str = "", message: str = "") -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True", "reason": reason, "message": message}] if kind else []
    return {"status": {"conditions": conditions}}


def pod(message: str) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": message}}}]}}


def test_a_completed_run_gives_its_figures() -> None:
    ended = run_end(job("Complete"), pod(json.dumps(RESULT)))
    assert ended is not None
    assert (ended.phase, ended.figures) == ("Succeeded", {"samples": 80, "tokens": 7355, "trainingSeconds": 55.8})
    assert run_end(job(None), None) is None  # still running


def test_a_failed_run_says_why_in_the_pods_words_or_the_jobs() -> None:
    said = run_end(job("Failed", "BackoffLimitExceeded"), pod("no prompt recorded since the last run\nmore"))
    assert said is not None
    assert (said.phase, said.reason) == ("Failed", "no prompt recorded since the last run")
    late = run_end(job("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"), None)
    assert late is not None
    assert late.reason == "DeadlineExceeded: Job was active longer than specified deadline"
    gone = run_end(None, None)
    assert gone is not None
    assert gone.phase == "Failed"


@pytest.mark.parametrize(
    "message",
    [
        "",
        "not json",
        "[" * 5000,
        json.dumps({**RESULT, "samples": -1}),
        json.dumps({**RESULT, "tokens": 1e30}),
        json.dumps({**RESULT, "samples": True}),
        json.dumps({**RESULT, "trainingSeconds": "55"}),
        '{"samples": NaN, "tokens": 1, "trainingSeconds": 1}',
    ],
)
def test_what_is_not_a_result_fails_the_run_and_stays_out_of_the_status(message: str) -> None:
    assert result_of(message) is None
    ended = run_end(job("Complete"), pod(message))
    assert ended is not None
    assert ended.phase == "Failed"
    assert ended.reason.startswith("the Job completed without a result")
    assert len(ended.reason) < 600


def test_the_canary_ends_promoted_or_rolled_back_by_the_draft_it_carried() -> None:
    assert canary_end(2, {"rollout": {"canary": {"configHash": "b"}, "lastGood": {"draft": "gen-1"}}}) is None
    assert canary_end(2, {"rollout": {"lastGood": {"draft": "gen-2"}}}) == ("Promoted", "")
    back = {"draft": "gen-2", "reason": "SpeedBelowStable", "message": "0.81x the stable pods' decode speed"}
    found = canary_end(2, {"rollout": {"lastGood": {"draft": "gen-1"}, "rolledBack": back}})
    assert found == ("RolledBack", "SpeedBelowStable: 0.81x the stable pods' decode speed")
    assert canary_end(2, {"rollout": {"lastGood": {"draft": "spec"}}}) is None
