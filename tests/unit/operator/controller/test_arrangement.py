"""Rollback on failure (pure): the last good configuration, failures, the restored Deployment, the status."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specinfer_operator.controller import arrangement
from specinfer_operator.controller.conditions import Observed, Verdict, compute, transitions
from specinfer_operator.controller.health import health
from tests.support.builders import engine_pod
from tests.support.statuses import DESIRED, GOOD, NOW, conditions, deployment, good_status

LATER = "2026-01-01T00:10:00Z"
PREFLIGHT = "preflight: the draft's vocabulary (32000) differs from the target's (128256)"


def pod(config_hash: str, waiting: str | None = None, message: str = "") -> dict[str, Any]:
    return engine_pod(f"pod-{config_hash}", config_hash, waiting, message)


def test_a_configuration_serving_everywhere_becomes_the_last_good_one() -> None:
    status = good_status()
    assert status["rollout"] == {
        "lastGood": {
            "configHash": "good",
            "configMap": "x-engine-good",
            "method": "ngram",
            "numSpeculativeTokens": 4,
            "captureSizes": [4, 8, 12, 16],
            "adaptivity": "StaticK",
            "family": GOOD.family,
            "image": GOOD.image,
            "time": NOW,
        }
    }
    # A rollout under way keeps it; once the new configuration serves everywhere it replaces it.
    rolling = compute(4, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash, ready=1), []), status, LATER)
    assert rolling["rollout"] == status["rollout"]
    done = compute(4, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), rolling, LATER)
    assert done["rollout"]["lastGood"]["configHash"] == DESIRED.config_hash
    assert done["rollout"]["lastGood"]["time"] == LATER


def test_failures_are_the_new_configurations_own() -> None:
    live = Observed(deployment(DESIRED.config_hash, ready=1, updated=1), [pod("good"), pod(DESIRED.config_hash)])
    assert arrangement.failure(DESIRED, live, health(DESIRED, live)) is None  # still starting
    crashing = Observed(live.deployment, [pod("good"), pod(DESIRED.config_hash, "CrashLoopBackOff", PREFLIGHT)])
    reason, message = arrangement.failure(DESIRED, crashing, health(DESIRED, crashing)) or ("", "")
    assert reason == "CrashLoopBackOff"
    assert PREFLIGHT in message
    # A first failed pull may be the registry's hiccup: the kubelet retries before it counts.
    pulling = Observed(live.deployment, [pod(DESIRED.config_hash, "ErrImagePull")])
    assert arrangement.failure(DESIRED, pulling, health(DESIRED, pulling)) is None
    backoff = Observed(live.deployment, [pod(DESIRED.config_hash, "ImagePullBackOff")])
    assert (arrangement.failure(DESIRED, backoff, health(DESIRED, backoff)) or ("",))[0] == "ImagePullBackOff"
    # An old pod crashing is not the new configuration's doing.
    old_crash = Observed(live.deployment, [pod("good", "CrashLoopBackOff", "oom"), pod(DESIRED.config_hash)])
    assert arrangement.failure(DESIRED, old_crash, health(DESIRED, old_crash)) is None
    late = deployment(DESIRED.config_hash, ready=1, updated=1)
    late["status"]["conditions"] = [{"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "slow"}]
    stuck = Observed(late, [pod("good"), pod(DESIRED.config_hash)])
    assert arrangement.failure(DESIRED, stuck, health(DESIRED, stuck)) == ("ProgressDeadlineExceeded", "slow")


def test_a_rollback_needs_a_different_last_good_configuration() -> None:
    crashing = Observed(deployment(DESIRED.config_hash, ready=1), [pod(DESIRED.config_hash, "CrashLoopBackOff", "x")])
    state = health(DESIRED, crashing)
    record = arrangement.decide_rollback(good_status(), DESIRED, crashing, state, 4, LATER)
    assert record == {
        "configHash": DESIRED.config_hash,
        "generation": 4,
        "edit": DESIRED.edit,
        "reason": "CrashLoopBackOff",
        "message": record["message"] if record else "",
        "time": LATER,
    }
    assert arrangement.decide_rollback({}, DESIRED, crashing, state, 4, LATER) is None  # nothing served before
    first = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), {}, NOW)
    assert arrangement.decide_rollback(first, DESIRED, crashing, state, 4, LATER) is None  # it was this one


def test_a_rollback_holds_for_its_spec_and_configuration_only() -> None:
    bad = replace(DESIRED, config_hash="bad", edit="e1")
    record = {"configHash": "bad", "generation": 4, "edit": "e1"}
    status = {**good_status(), "rollout": {"rolledBack": record}}
    assert arrangement.rollback_in_force(status, 4, bad) == record
    # The autoscaler wrote replicas: a new generation, the same edit; the failed configuration is not tried again.
    assert arrangement.rollback_in_force(status, 5, bad) == record
    assert arrangement.rollback_in_force(status, 5, replace(bad, edit="e2")) is None  # the spec was edited: try again
    assert arrangement.rollback_in_force(status, 4, replace(bad, config_hash="good")) is None  # Auto moved K back
    # A record written before edits were recorded goes by generation.
    older = {**good_status(), "rollout": {"rolledBack": {"configHash": "bad", "generation": 4}}}
    assert arrangement.rollback_in_force(older, 4, bad) is not None
    assert arrangement.rollback_in_force(older, 5, bad) is None


def test_the_restored_deployment_has_the_last_good_template() -> None:
    wanted = {"kind": "Deployment", "spec": {"replicas": 2, "template": {"metadata": {"labels": {"a": "b"}}}}}
    good_template: dict[str, Any] = {
        "metadata": {
            "labels": {"a": "b", "pod-template-hash": "5d8f"},
            "annotations": {"specinfer.io/config-hash": "good"},
        },
        "spec": {"containers": [{"name": "engine", "image": "runtime:1"}]},
    }
    other = {"spec": {"template": {"metadata": {"annotations": {"specinfer.io/config-hash": "bad"}}}}}
    back = arrangement.with_templates_of(wanted, [other, {"spec": {"template": good_template}}], "good")
    assert back is not None
    assert back["spec"]["replicas"] == 2  # the spec's own settings stay
    assert back["spec"]["template"]["metadata"]["labels"] == {"a": "b"}  # the controller adds its hash back
    assert back["spec"]["template"]["spec"] == good_template["spec"]
    assert "pod-template-hash" in good_template["metadata"]["labels"]  # the ReplicaSet is not modified
    assert arrangement.with_templates_of(wanted, [other], "good") is None
    # The live Deployment already running it serves as well (no ReplicaSet read while rolled back).
    live = {"spec": {"replicas": 2, "template": back["spec"]["template"]}}
    assert arrangement.with_templates_of(wanted, [live], "good") == back


def test_the_status_of_a_rolled_back_resource_describes_what_serves() -> None:
    previous = good_status()
    record = {
        "configHash": DESIRED.config_hash,
        "generation": 4,
        "edit": DESIRED.edit,
        "reason": "CrashLoopBackOff",
        "message": f"pod p restarted 4 times; last exit: {PREFLIGHT}",
        "time": LATER,
    }
    restoring = Observed(deployment("good", ready=1, updated=1), [])
    status = compute(4, Verdict(True), DESIRED, restoring, previous, LATER, record)
    assert conditions(status)["Ready"] == ("False", "RolledBack")
    assert conditions(status)["Degraded"] == ("True", "RolledBack")
    assert conditions(status)["Progressing"] == ("True", "RollingBack")
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert PREFLIGHT in degraded["message"]
    assert "restoring the last good configuration good (ngram, K=4)" in degraded["message"]
    assert (status["configHash"], status["speculation"]["method"]) == ("good", "ngram")  # what serves
    assert status["rollout"]["rolledBack"] == record
    assert status["rollout"]["lastGood"] == previous["rollout"]["lastGood"]
    assert transitions(previous, status) == [("Degraded", "RolledBack", degraded["message"])]  # one Warning
    served = compute(4, Verdict(True), DESIRED, Observed(deployment("good"), []), status, LATER, record)
    assert conditions(served)["Progressing"] == ("False", "RolledBack")
    again = next(c for c in served["conditions"] if c["type"] == "Progressing")["message"]
    assert "serves again" in again
    assert transitions(status, served) == [("Progressing", "RolledBack", again)]  # and one when it is done
    # A new generation: the record is gone and the status describes the new spec again.
    retried = compute(5, Verdict(True), DESIRED, Observed(deployment("good"), []), served, LATER)
    assert "rolledBack" not in retried["rollout"]
    assert retried["configHash"] == DESIRED.config_hash


def refused_by(message: str) -> Observed:
    """A rollout whose new ReplicaSet's pods the API server refuses (the Deployment's ReplicaFailure)."""
    live = deployment(DESIRED.config_hash, ready=0, updated=0)
    live["status"]["conditions"] = [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message}
    ]
    return Observed(live, [])


def test_pods_that_pod_security_refuses_are_the_configurations_failure_in_the_api_servers_words() -> None:
    words = (
        'pods "demo-6d8f-x2" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "driver")'
    )
    refused = refused_by(words)
    state = health(DESIRED, refused)
    assert (state.reason, state.degraded) == ("FailedCreate", True)
    assert state.message == f"the ReplicaSet cannot create pods: {words}"
    assert arrangement.failure(DESIRED, refused, state) == ("FailedCreate", state.message)
    # A quota may free up: no rollback for it, only Degraded.
    quota = refused_by('pods "demo-6d8f-x2" is forbidden: exceeded quota: npus, requested: huawei.com/Ascend910=8')
    assert arrangement.failure(DESIRED, quota, health(DESIRED, quota)) is None
