"""The canary against the real control plane: a second Deployment beside the stable one, behind the same
Service, promoted or rolled back by its health and by hand, and the same after an operator restart.
Judging on acceptance measured from real engines is in test_canary_acceptance.py."""

from __future__ import annotations

from typing import Any

import pytest

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import Operator
from tests.e2e.test_operator import apply, condition, resource, spec, wait_ready, wait_resource
from tests.e2e.test_rollback import CRASHLOOP, PREFLIGHT, events

ANNOTATION = "specinfer.io/canary"


def canary_spec(k: int, replicas: int = 2, **extra: Any) -> dict[str, Any]:
    return {**spec(k=k), "replicas": replicas, "rollout": {"strategy": "Canary"}, **extra}


def phase(name: str) -> Any:
    return lambda obj: condition(obj, "Ready").get("reason") == name


def hashes(cluster: Cluster, namespace: str, name: str) -> list[str]:
    return sorted(
        p["metadata"]["annotations"]["specinfer.io/config-hash"]
        for p in pods(cluster, namespace, name)
        if not p["metadata"].get("deletionTimestamp")
    )


def deployments(cluster: Cluster, namespace: str) -> dict[str, int]:
    listed = cluster.get("deployments", "-n", namespace)["items"]
    return {d["metadata"]["name"]: d["spec"]["replicas"] for d in listed}


def test_a_canary_runs_beside_the_stable_pods_until_promoted_by_hand(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    apply(cluster, namespace, "can", canary_spec(k=3))
    good = wait_ready(cluster, namespace, "can")["status"]["configHash"]

    # No engine answers here, so no drafts: the canary waits for evidence, one pod beside one stable pod.
    apply(cluster, namespace, "can", canary_spec(k=4))
    obj = wait_resource(cluster, namespace, "can", "STATUS Canary", phase("Canary"), 60)
    record = obj["status"]["rollout"]["canary"]
    new = record["configHash"]
    assert (record["phase"], record["replicas"], record["stableReplicas"]) == ("Canary", 1, 1)
    assert obj["status"]["configHash"] == good  # what the stable pods serve
    assert condition(obj, "Progressing")["reason"] == "Canary"
    assert condition(obj, "Degraded")["status"] == "False"
    assert deployments(cluster, namespace) == {"can": 1, "can-canary": 1}
    wait_until("one pod of each configuration", lambda: hashes(cluster, namespace, "can") == sorted([good, new]))
    service = cluster.get("service", "-n", namespace, "can")
    assert "specinfer.io/track" not in service["spec"]["selector"]  # the Service reaches both
    table = cluster.kubectl("get", "specinference", "-n", namespace, "can").stdout
    assert "Canary" in table, table
    obj = wait_resource(cluster, namespace, "can", "waiting for evidence", lambda o: "evidence" in str(o), 60)
    assert "waiting for evidence" in condition(obj, "Ready")["message"]

    # Restarted, the operator finds the canary where it was.
    started = record["startTime"]
    operator.kill()
    operator.start()
    applied = 'specinfer_reconciles_total{result="applied"}'
    wait_until("the restarted operator to resume the resource", lambda: applied in operator.metrics())
    obj = resource(cluster, namespace, "can")
    assert obj["status"]["rollout"]["canary"]["startTime"] == started
    assert deployments(cluster, namespace) == {"can": 1, "can-canary": 1}

    # Promoted by hand: every pod moves to the new configuration, the canary goes, the annotation too.
    cluster.kubectl("annotate", "specinference", "-n", namespace, "can", f"{ANNOTATION}=promote")
    done = wait_ready(cluster, namespace, "can")
    assert done["status"]["configHash"] == new
    assert done["status"]["rollout"]["lastGood"]["configHash"] == new
    assert "canary" not in done["status"]["rollout"]
    assert ANNOTATION not in (done["metadata"].get("annotations") or {})
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {"can": 2})
    assert "promoted by hand" in events(cluster, namespace, "Promoting")


@pytest.mark.usefixtures("operator")
def test_a_canary_aborted_by_hand_is_rolled_back(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "abort", canary_spec(k=3))
    good = wait_ready(cluster, namespace, "abort")["status"]["configHash"]
    apply(cluster, namespace, "abort", canary_spec(k=4))
    wait_resource(cluster, namespace, "abort", "STATUS Canary", phase("Canary"), 60)
    cluster.kubectl("annotate", "specinference", "-n", namespace, "abort", f"{ANNOTATION}=abort")
    obj = wait_resource(cluster, namespace, "abort", "STATUS RolledBack", phase("RolledBack"), 60)
    assert obj["status"]["rollout"]["rolledBack"]["reason"] == "AbortedByHand"
    assert "canary" not in obj["status"]["rollout"]
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {"abort": 2})
    wait_until("every pod on the last good configuration", lambda: hashes(cluster, namespace, "abort") == [good] * 2)
    # An action with no canary to act on is dropped, and said so.
    cluster.kubectl("annotate", "specinference", "-n", namespace, "abort", f"{ANNOTATION}=promote")
    wait_until(
        "the ignored action's event",
        lambda: "no canary is in progress" in events(cluster, namespace, "CanaryActionIgnored"),
    )
    assert ANNOTATION not in (resource(cluster, namespace, "abort")["metadata"].get("annotations") or {})


@pytest.mark.usefixtures("operator")
def test_a_canary_whose_pods_crash_is_rolled_back_without_touching_the_stable_pods(
    cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, "crash", canary_spec(k=3, replicas=3))
    good = wait_ready(cluster, namespace, "crash")["status"]["configHash"]
    apply(cluster, namespace, "crash", canary_spec(k=3, replicas=3, runtime={"image": CRASHLOOP}))
    obj = wait_resource(cluster, namespace, "crash", "STATUS RolledBack", phase("RolledBack"), 90)
    assert obj["status"]["rollout"]["rolledBack"]["reason"] == "CrashLoopBackOff"
    assert PREFLIGHT in condition(obj, "Degraded")["message"]
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {"crash": 3})
    wait_until("every pod on the last good configuration", lambda: hashes(cluster, namespace, "crash") == [good] * 3)
