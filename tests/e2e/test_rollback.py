"""Rollback on failure against the real control plane: a configuration whose pods crash at start (a kwok
Stage gives pods of the image `e2e.specinfer.io/runtime:crashloop` a runtime-style termination message) or
never become Ready (`...:never-ready`) is replaced by the last good one on every replica."""

from __future__ import annotations

from typing import Any

import pytest

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import Operator
from tests.e2e.test_operator import apply, condition, resource, spec, wait_ready, wait_resource

CRASHLOOP = "e2e.specinfer.io/runtime:crashloop"
NEVER_READY = "e2e.specinfer.io/runtime:never-ready"
PREFLIGHT = "preflight: the draft model's vocabulary (32000 tokens) differs from the target's (128256)"


def failing(image: str, method: str = "eagle3", **rollout: Any) -> dict[str, Any]:
    body = spec(k=4)
    body["speculative"] = {**body["speculative"], "method": method}
    return {**body, "runtime": {"image": image}, **({"rollout": rollout} if rollout else {})}


def row(cluster: Cluster, namespace: str, name: str) -> list[str]:
    """The resource's row of `kubectl get specinference`: NAME, METHOD, K, READY, STATUS, ..."""
    return cluster.kubectl("get", "specinference", "-n", namespace, name, "--no-headers").stdout.split()


def degraded_by(reason: str) -> Any:
    return lambda obj: condition(obj, "Degraded").get("reason") == reason


def template_images(cluster: Cluster, namespace: str, name: str) -> list[str]:
    deployment = cluster.get("deployment", "-n", namespace, name)
    return [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]


def events(cluster: Cluster, namespace: str, reason: str) -> str:
    return cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"reason={reason}").stdout


def test_a_configuration_whose_pods_crash_is_rolled_back(cluster: Cluster, namespace: str, operator: Operator) -> None:
    apply(cluster, namespace, "canary", spec(k=3))
    good = wait_ready(cluster, namespace, "canary")
    good_hash, good_images = good["status"]["configHash"], template_images(cluster, namespace, "canary")
    assert good["status"]["rollout"]["lastGood"]["configHash"] == good_hash
    assert good["status"]["rollout"]["lastGood"]["configMap"] == f"canary-engine-{good_hash}"

    apply(cluster, namespace, "canary", failing(CRASHLOOP, method="eagle"))
    obj = wait_resource(cluster, namespace, "canary", "Degraded=RolledBack", degraded_by("RolledBack"), 60)
    degraded = condition(obj, "Degraded")
    assert degraded["status"] == "True"
    assert PREFLIGHT in degraded["message"], degraded["message"]  # the pods' own words
    record = obj["status"]["rollout"]["rolledBack"]
    assert (record["reason"], record["generation"]) == ("CrashLoopBackOff", obj["metadata"]["generation"])
    assert record["configHash"] != good_hash
    assert obj["spec"]["runtime"]["image"] == CRASHLOOP  # the spec stays as the user wrote it
    assert "Warning" in wait_until("the RolledBack event", lambda: events(cluster, namespace, "RolledBack"))

    # Every replica serves the last good configuration again, and the status says what serves.
    served = wait_resource(
        cluster,
        namespace,
        "canary",
        "the last good configuration on every replica",
        lambda o: condition(o, "Progressing").get("reason") == "RolledBack"
        and o["status"].get("readyReplicas") == 2
        and all(p["metadata"]["annotations"]["specinfer.io/config-hash"] == good_hash for p in pods(
            cluster, namespace, "canary")),
        90,
    )  # fmt: skip
    assert template_images(cluster, namespace, "canary") == good_images
    assert (served["status"]["configHash"], served["status"]["speculation"]["numSpeculativeTokens"]) == (good_hash, 3)
    assert condition(served, "Ready")["reason"] == "RolledBack"
    assert row(cluster, namespace, "canary")[:5] == ["canary", "eagle3", "3", "2/2", "RolledBack"]  # not eagle
    assert cluster.get("configmap", "-n", namespace, f"canary-engine-{good_hash}")  # kept for it

    # Restarted, the operator keeps the rollback: it resumes the resource without trying the failed spec.
    operator.kill()
    operator.start()
    applied = 'specinfer_reconciles_total{result="applied"}'
    wait_until("the restarted operator to resume the resource", lambda: applied in operator.metrics())
    assert template_images(cluster, namespace, "canary") == good_images
    after = resource(cluster, namespace, "canary")["status"]
    assert (after["rollout"]["rolledBack"], after["configHash"]) == (record, good_hash)

    # A changed spec is tried.
    apply(cluster, namespace, "canary", spec(k=4))
    recovered = wait_ready(cluster, namespace, "canary")
    assert "rolledBack" not in recovered["status"]["rollout"]
    assert recovered["status"]["rollout"]["lastGood"]["configHash"] == recovered["status"]["configHash"] != good_hash


@pytest.mark.usefixtures("operator")
def test_a_rollout_that_misses_its_deadline_is_rolled_back(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "slow", {**spec(k=3), "rollout": {"progressDeadlineSeconds": 60}})
    good_hash = wait_ready(cluster, namespace, "slow")["status"]["configHash"]
    apply(cluster, namespace, "slow", failing(NEVER_READY, progressDeadlineSeconds=60))
    obj = wait_resource(cluster, namespace, "slow", "Degraded=RolledBack", degraded_by("RolledBack"), 150)
    assert obj["status"]["rollout"]["rolledBack"]["reason"] == "ProgressDeadlineExceeded"
    assert obj["status"]["configHash"] == good_hash


@pytest.mark.usefixtures("operator")
def test_halt_leaves_the_failed_pods_for_a_person(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "halt", spec(k=3))
    wait_ready(cluster, namespace, "halt")
    apply(cluster, namespace, "halt", failing(CRASHLOOP, onFailure="Halt"))
    obj = wait_resource(cluster, namespace, "halt", "Degraded=CrashLoopBackOff", degraded_by("CrashLoopBackOff"), 60)
    assert PREFLIGHT in condition(obj, "Degraded")["message"]
    assert "rolledBack" not in obj["status"].get("rollout", {})
    assert template_images(cluster, namespace, "halt") == [CRASHLOOP]
    assert resource(cluster, namespace, "halt")["status"]["speculation"]["numSpeculativeTokens"] == 4
