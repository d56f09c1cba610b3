"""How a run and its canary ended: the Job's conditions and its pod's termination message, read as untrusted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specinfer_operator.learning.outcome import canary_end, job_pod, result_of, run_end

RESULT = {"generation": 2, "samples": 80, "tokens": 7355, "trainingSeconds": 55.8, "from": "draft in force"}


def job(kind: str | None, reason: str = "", message: str = "") -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True", "reason": reason, "message": message}] if kind else []
    return {"status": {"conditions": conditions}}


def pod(message: str, container: str = "trainer", policy: str = "File", **meta: Any) -> dict[str, Any]:
    """A pod whose `container` ended saying `message` (the trainer writes its own file, policy File)."""
    terminated = {"exitCode": 0, "message": message}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": container, "terminationMessagePolicy": policy}]},
        "status": {"containerStatuses": [{"name": container, "state": {"terminated": terminated}}]},
    }


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


SECRET_LINE = "connecting to postgres://user:password@db.internal/prompts failed"


@pytest.mark.parametrize(
    ("container", "policy"),
    [("istio-proxy", "File"), ("trainer", "FallbackToLogsOnError"), ("istio-proxy", "FallbackToLogsOnError")],
)
def test_only_the_trainers_own_message_is_read(container: str, policy: str) -> None:
    """An injected sidecar's message, or a log tail the kubelet made the message, never reaches the status:
    neither as a failed run's reason nor as a completed run's result."""
    said = pod(SECRET_LINE, container, policy)
    failed = run_end(job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"), said)
    assert failed is not None
    assert failed.reason == "BackoffLimitExceeded: Job has reached the specified backoff limit"
    completed = run_end(job("Complete"), said)
    assert completed is not None
    assert completed.reason == "the Job completed without a result: no message"
    forged = run_end(job("Complete"), pod(json.dumps(RESULT), container, policy))
    assert forged is not None
    assert forged.phase == "Failed"


def test_the_trainers_own_words_are_scrubbed_of_credentials() -> None:
    failed = run_end(job("Failed"), pod(SECRET_LINE))
    assert failed is not None
    assert failed.reason == "connecting to postgres://***@db.internal/prompts failed"
    completed = run_end(job("Complete"), pod(SECRET_LINE))
    assert completed is not None
    assert completed.reason.endswith("postgres://***@db.internal/prompts failed")


JOB_UID = "0b6f7c1e-job"


def made_by(uid: str | None, label: str | None, created: str, message: str) -> dict[str, Any]:
    owners = [{"kind": "Job", "name": "demo-draft-1", "uid": uid, "controller": True}] if uid else []
    labels = {
        "batch.kubernetes.io/job-name": "demo-draft-1",
        **({"batch.kubernetes.io/controller-uid": label} if label else {}),
    }
    return pod(message, creationTimestamp=created, labels=labels, ownerReferences=owners, name=created)


def test_the_result_is_read_from_the_jobs_own_pod() -> None:
    """Anyone who may create a pod can label it with the Job's name: only the pod the Job controls, with its
    uid label, is the run's."""
    own = made_by(JOB_UID, JOB_UID, "2026-12-01T10:00:00Z", json.dumps(RESULT))
    forged = json.dumps({**RESULT, "samples": 999_999_999, "trainingSeconds": 0})
    pods = [
        own,
        made_by(None, None, "2026-12-01T10:05:00Z", forged),  # the Job's name alone, newer
        made_by(None, JOB_UID, "2026-12-01T10:06:00Z", forged),  # its uid label, no controller
        made_by(JOB_UID, None, "2026-12-01T10:07:00Z", forged),  # a controller reference, no uid label
        made_by("another-job", JOB_UID, "2026-12-01T10:08:00Z", forged),
    ]
    the_job = {"metadata": {"uid": JOB_UID}, **job("Complete")}
    assert job_pod(the_job, pods) is own
    ended = run_end(the_job, job_pod(the_job, pods))
    assert ended is not None
    assert ended.figures == {"samples": 80, "tokens": 7355, "trainingSeconds": 55.8}
    assert job_pod(the_job, pods[1:]) is None
