"""Engines over several nodes against the real control plane and a real LeaderWorkerSet controller (built from
its Go module by hack/build-binaries.sh, its webhooks served on loopback): tensor parallelism 16 on the
simulated 8-NPU nodes is one group of two pods on two nodes; a new configuration rolls the group, a failing
one is rolled back from the LeaderWorkerSet's own history; a group that cannot fit says why; deletion leaves
nothing; and without LeaderWorkerSet a multi-node spec is refused with what to install, while single-node
ones run as before."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import CLUSTER, Operator
from tests.e2e.test_operator import apply, condition, resource, spec, wait_ready, wait_resource
from tests.e2e.test_rollback import CRASHLOOP, PREFLIGHT, degraded_by
from tests.support.cli import specinfer

SET_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
CONFIG_HASH = "specinfer.io/config-hash"


def group(k: int = 3, tensor: int = 16, nodes: int = 2, **extra: Any) -> dict[str, Any]:
    """spec() as one engine over `nodes` nodes: 16 NPUs on the simulated 8-NPU nodes take two."""
    body = spec(k=k, tensor=tensor, replicas=1)
    return {**body, "parallelism": {"tensor": tensor, "nodes": nodes}, **extra}


def invalid(obj: dict[str, Any]) -> bool:
    return condition(obj, "ConfigValid").get("status") == "False"


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0].get("env", [])}


def by_rank(cluster: Cluster, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["labels"][WORKER_INDEX]: p for p in pods(cluster, namespace, name)}


def sized_for_a_node(cluster: Cluster, namespace: str, obj: dict[str, Any], tmp_path: Path) -> None:
    """Each pod of the group is sized for its node (Guaranteed, its download's disk requested), and a group
    downloading into emptyDirs is told to use modelCacheClaim: in ConfigValid, in its event, and by validate."""
    for pod in pods(cluster, namespace, obj["metadata"]["name"]):
        assert pod["status"]["qosClass"] == "Guaranteed"
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert (requests["cpu"], requests["memory"], requests["ephemeral-storage"]) == ("128", "528Gi", "1Ti")
    said = condition(obj, "ConfigValid")
    assert said["reason"] == "ValidWithWarnings"
    warning = "spec.resources.modelCacheClaim: not set: each of the 2 pods of a group downloads the Hub models"
    assert warning in said["message"], said["message"]
    field = f"involvedObject.name={obj['metadata']['name']},reason=ValidWithWarnings"

    def posted() -> list[str]:
        listed = cluster.get("events", "-n", namespace, "--field-selector", field)
        return [event["message"] for event in listed["items"] if warning in event["message"]]

    wait_until("the ValidWithWarnings event", posted, timeout=150)  # kopf posts events one at a time
    manifest = tmp_path / "group.yaml"
    name = obj["metadata"]["name"]
    stored = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {"name": name}, "spec": obj["spec"]}
    manifest.write_text(yaml.safe_dump(stored))
    validated = specinfer("validate", str(manifest))
    assert (validated.returncode, warning in validated.stderr) == (0, True), validated.stdout + validated.stderr


def test_a_group_spans_nodes_rolls_and_rolls_back(
    cluster: Cluster, namespace: str, operator: Operator, tmp_path: Path
) -> None:
    apply(cluster, namespace, "big", group(k=3))
    obj = wait_ready(cluster, namespace, "big")
    assert obj["status"]["ready"] == "1/1"
    assert condition(obj, "Ready")["message"] == "1/1 groups serving eagle3 with K=3"
    lws = cluster.get("leaderworkerset", "-n", namespace, "big-group")
    assert lws["metadata"]["ownerReferences"][0]["name"] == "big"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2

    ranks = by_rank(cluster, namespace, "big")
    assert sorted(ranks) == ["0", "1"]
    assert len({p["spec"]["nodeName"] for p in ranks.values()}) == 2, "one pod on each node"
    first = obj["status"]["configHash"]
    for rank, pod in ranks.items():
        engine = pod["spec"]["containers"][0]
        assert engine["resources"]["requests"]["huawei.com/Ascend910"] == "8"
        assert engine["args"] == ranks["0"]["spec"]["containers"][0]["args"]  # the rank is the runtime's to add
        variables = env_of(pod)
        assert (variables["LWS_WORKER_INDEX"], variables["LWS_GROUP_SIZE"]) == (rank, "2")
        assert variables["LWS_LEADER_ADDRESS"] == f"big-group-0.big-group.{namespace}"
        assert variables["SPECINFER_POD_IP"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
        assert pod["metadata"]["annotations"][CONFIG_HASH] == first
    assert "readinessProbe" in ranks["0"]["spec"]["containers"][0]
    sized_for_a_node(cluster, namespace, obj, tmp_path)
    assert "readinessProbe" not in ranks["1"]["spec"]["containers"][0], "workers run headless"
    service = cluster.get("service", "-n", namespace, "big")
    assert service["spec"]["selector"][WORKER_INDEX] == "0", "the Service reaches the leaders only"
    listed = cluster.kubectl("get", "specinference", "-n", namespace, "big").stdout
    assert {"1/1", "Ready"} <= set(listed.split()), listed

    # A new configuration rolls the whole group.
    apply(cluster, namespace, "big", group(k=4))
    obj = wait_ready(cluster, namespace, "big")
    second = obj["status"]["configHash"]
    assert second != first
    rolled = by_rank(cluster, namespace, "big")
    assert sorted(rolled) == ["0", "1"]
    assert {p["metadata"]["annotations"][CONFIG_HASH] for p in rolled.values()} == {second}
    assert {p["metadata"]["uid"] for p in rolled.values()}.isdisjoint(p["metadata"]["uid"] for p in ranks.values())

    # A configuration whose pods crash is rolled back to the last good one, from the LeaderWorkerSet's revisions.
    apply(cluster, namespace, "big", group(k=4, runtime={"image": CRASHLOOP}))
    obj = wait_resource(cluster, namespace, "big", "Degraded=RolledBack", degraded_by("RolledBack"), 90)
    assert PREFLIGHT in condition(obj, "Degraded")["message"]
    wait_until(
        "the last good configuration on the whole group again",
        lambda: (
            {p["metadata"]["annotations"][CONFIG_HASH] for p in pods(cluster, namespace, "big")} == {second}
            and len(pods(cluster, namespace, "big")) == 2
        ),
        timeout=90,
    )
    images = {c["image"] for t in ("leaderTemplate", "workerTemplate") for c in template(cluster, namespace, t)}
    assert CRASHLOOP not in images

    # A group that cannot fit: three pods of 8 NPUs, two nodes.
    apply(cluster, namespace, "huge", group(tensor=24, nodes=3))
    refused = wait_resource(cluster, namespace, "huge", "ConfigValid=False", invalid)
    said = condition(refused, "ConfigValid")
    assert said["reason"] == "InsufficientNPUCapacity"
    fits = "group of 3 pods on 3 nodes with 8 huawei.com/Ascend910 each, but only 2 nodes have that many"
    assert fits in said["message"], said["message"]
    assert cluster.kubectl("get", "leaderworkerset", "-n", namespace, "huge-group", check=False).returncode != 0

    # Deleting the resource removes the group, its StatefulSets, Services, pods and engine configs.
    cluster.kubectl("delete", "specinference", "-n", namespace, "big", "huge")
    kinds = "leaderworkerset,statefulset,service,pod,configmap,controllerrevision"

    def gone() -> bool:
        left = cluster.kubectl("get", kinds, "-n", namespace, "-o", "name").stdout.split()
        return left == ["configmap/kube-root-ca.crt"]

    wait_until("every child of the group to be collected", gone, timeout=60)


def test_a_groups_canary_runs_in_a_second_leader_worker_set(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    apply(cluster, namespace, "cg", group(k=3, rollout={"strategy": "Canary"}))
    good = wait_ready(cluster, namespace, "cg")["status"]["configHash"]

    # One group and no room beside it: the canary takes the group's nodes, judged against the last good figures.
    apply(cluster, namespace, "cg", group(k=4, rollout={"strategy": "Canary"}))
    obj = wait_resource(cluster, namespace, "cg", "STATUS Canary", lambda o: "canary" in o["status"].get("rollout", {}))
    record = obj["status"]["rollout"]["canary"]
    assert (record["replicas"], record["stableReplicas"]) == (1, 0)
    new = record["configHash"]

    def sets() -> dict[str, int]:
        return {s["metadata"]["name"]: s["spec"]["replicas"] for s in cluster.get("lws", "-n", namespace)["items"]}

    wait_until(
        "the canary's LeaderWorkerSet beside the stable one", lambda: sets() == {"cg-group": 0, "cg-group-canary": 1}
    )
    wait_until(
        "the canary group on the new configuration",
        lambda: (
            sorted(p["metadata"]["labels"].get("specinfer.io/track", "") for p in pods(cluster, namespace, "cg"))
            == ["canary", "canary"]
            and {p["metadata"]["annotations"][CONFIG_HASH] for p in pods(cluster, namespace, "cg")} == {new}
        ),
    )

    cluster.kubectl("annotate", "specinference", "-n", namespace, "cg", "specinfer.io/canary=promote")
    done = wait_ready(cluster, namespace, "cg")
    assert (done["status"]["configHash"], done["status"]["rollout"]["lastGood"]["configHash"]) == (new, new)
    assert new != good
    wait_until("the canary's LeaderWorkerSet to go", lambda: sets() == {"cg-group": 1})


def template(cluster: Cluster, namespace: str, which: str) -> list[dict[str, Any]]:
    lws = cluster.get("leaderworkerset", "-n", namespace, "big-group")
    containers: list[dict[str, Any]] = lws["spec"]["leaderWorkerTemplate"][which]["spec"]["containers"]
    return containers


def leader_worker_set(state: str) -> None:
    subprocess.run([str(CLUSTER), "lws", state], check=True)


@pytest.mark.skipif(bool(os.environ.get("SPECINFER_E2E_KUBECONFIG")), reason="removes LeaderWorkerSet: local cluster")
def test_without_leaderworkerset_a_group_waits_for_it(cluster: Cluster, namespace: str, operator: Operator) -> None:
    leader_worker_set("off")
    try:
        apply(cluster, namespace, "big", group())
        apply(cluster, namespace, "small", spec(replicas=1))
        refused = wait_resource(cluster, namespace, "big", "ConfigValid=False", invalid)
        said = condition(refused, "ConfigValid")
        assert said["reason"] == "LeaderWorkerSetMissing"
        assert "install LeaderWorkerSet (sigs.k8s.io/lws" in said["message"], said["message"]
        assert wait_ready(cluster, namespace, "small")["status"]["ready"] == "1/1", "single-node specs run as before"
        cluster.kubectl("delete", "specinference", "-n", namespace, "small")  # its NPU would leave no node whole
    finally:
        leader_worker_set("on")
    # Installed: the refused spec is tried again and rolls out, without a change to it.
    assert wait_ready(cluster, namespace, "big", timeout=90)["status"]["ready"] == "1/1"
    assert condition(resource(cluster, namespace, "big"), "ConfigValid")["status"] == "True"
