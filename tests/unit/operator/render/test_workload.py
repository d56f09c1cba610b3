"""Engines over several nodes, as pure logic: the LeaderWorkerSet rendered, a group's counts from its pods,
its canary and its rollback from a ControllerRevision, the capacity check for groups."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from specinfer_operator.controller import arrangement, canary
from specinfer_operator.controller.conditions import Observed
from specinfer_operator.controller.context import desired_of
from specinfer_operator.controller.health import health
from specinfer_operator.controller.reconcile import capacity_problem
from specinfer_operator.render import workload
from specinfer_operator.render.children import RenderDefaults, config_hash, engine_config_json, render
from tests.support.builders import cr, example

SPEC = {**example("multinode/deepseek-v3.2-mtp")["spec"]}
CR = cr(SPEC, name="dsv3", namespace="ml", uid="u-1")
DEFAULTS = RenderDefaults()


def children() -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(CR, DEFAULTS)}


def group_pods(name: str, config: str, groups: int = 1, size: int = 2, ready: bool = True) -> list[dict[str, Any]]:
    state = [{"type": "Ready", "status": "True" if ready else "False"}]
    return [
        {
            "metadata": {
                "name": f"{name}-{g}" + (f"-{r}" if r else ""),
                "labels": {
                    workload.SET_LABEL: name,
                    workload.GROUP_INDEX_LABEL: str(g),
                    workload.WORKER_INDEX_LABEL: str(r),
                },
                "annotations": {"specinfer.io/config-hash": config},
            },
            "status": {"conditions": state},
        }
        for g in range(groups)
        for r in range(size)
    ]


def test_an_engine_over_two_nodes_is_a_leader_worker_set_of_groups() -> None:
    out = children()
    assert "Deployment" not in out
    lws = out["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["metadata"]["name"] == "dsv3-group"  # the Service keeps the resource's name
    assert lws["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    group = lws["spec"]["leaderWorkerTemplate"]
    assert (group["size"], group["restartPolicy"], lws["spec"]["replicas"]) == (2, "RecreateGroupOnPodRestart", 1)
    leader, worker = group["leaderTemplate"]["spec"]["containers"][0], group["workerTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["requests"]["huawei.com/Ascend910"] == "8"  # 16 NPUs over 2 nodes
    assert leader["args"] == worker["args"]
    assert "--tensor-parallel-size" in leader["args"]
    assert leader["args"][leader["args"].index("--tensor-parallel-size") + 1] == "16"
    assert {"readinessProbe", "ports"} <= leader.keys()
    assert not {"readinessProbe", "livenessProbe", "startupProbe", "ports"} & worker.keys()
    pod_ip = {"name": "SPECINFER_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert pod_ip in leader["env"]
    assert pod_ip in worker["env"]
    assert out["Service"]["spec"]["selector"][workload.WORKER_INDEX_LABEL] == "0"
    assert workload.template_hash(lws) == config_hash(CR, DEFAULTS)


def test_one_node_stays_a_deployment_with_the_hash_it_had() -> None:
    single = {**SPEC, "parallelism": {"tensor": 8, "expert": True}}
    out = {o["kind"]: o for o in render(cr(single, name="dsv3"), DEFAULTS)}
    assert out["Deployment"]["metadata"]["name"] == "dsv3"
    assert workload.WORKER_INDEX_LABEL not in out["Service"]["spec"]["selector"]
    container = out["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert all(e["name"] != "SPECINFER_POD_IP" for e in container.get("env", []))
    # An unset nodes is not in the engine config: the configurations of existing resources keep their hashes.
    assert "nodes" not in engine_config_json(cr(single).spec.engine())
    assert '"nodes":2' in engine_config_json(CR.spec.engine())


def test_a_groups_counts_come_from_its_pods() -> None:
    lws = children()["LeaderWorkerSet"]
    current = workload.template_hash(lws) or ""
    two = replace(desired_of(CR, DEFAULTS), replicas=2)
    ready = group_pods("dsv3-group", current, groups=2)
    assert workload.counts(lws, ready) == workload.Counts(2, 2, 2)
    state = health(two, Observed(lws, ready))
    assert (state.ready, state.message) == (True, "2/2 groups serving mtp with K=2")

    half = ready[:3]  # group 1 lost its worker: not a whole group
    assert workload.counts(lws, half) == workload.Counts(2, 1, 1)
    old = group_pods("dsv3-group", "old", groups=2)[:2] + ready[2:]
    assert workload.counts(lws, old) == workload.Counts(2, 2, 1)
    assert health(two, Observed(lws, old)).message == "1/2 groups run the current configuration"
    waking = group_pods("dsv3-group", current, groups=2, ready=False)
    assert workload.counts(lws, waking).ready == 0
    others = group_pods("dsv3-group-canary", current)  # a canary's pods are its own
    assert workload.counts(lws, ready + others) == workload.Counts(2, 2, 2)


def test_a_groups_canary_and_rollback() -> None:
    lws = children()["LeaderWorkerSet"]
    trial = canary.trial(lws, 1)
    assert trial["metadata"]["name"] == "dsv3-group-canary"
    for template in workload.pod_templates(trial):
        assert template["metadata"]["labels"]["specinfer.io/track"] == "canary"
    assert "selector" not in trial["spec"]

    good = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"])
    for template in (good["leaderTemplate"], good["workerTemplate"]):
        template["metadata"]["annotations"]["specinfer.io/config-hash"] = "good"
    revision = {"data": {"spec": {"leaderWorkerTemplate": {**good, "$patch": "replace"}, "networkConfig": {}}}}
    history = workload.history_entries(workload.LEADER_WORKER_SET, [revision])
    back = arrangement.with_templates_of(lws, history, "good")
    assert back is not None
    assert back["spec"]["leaderWorkerTemplate"] == good  # without the patch directive
    assert back["metadata"] == lws["metadata"]
    assert arrangement.with_templates_of(lws, history, "other") is None
    assert workload.history_query(lws) == (
        "apps/v1",
        "controllerrevisions",
        "leaderworkerset.sigs.k8s.io/name=dsv3-group",
    )
    deployment = {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}}}}
    assert workload.history_query(deployment) == ("apps/v1", "replicasets", "a=b")


def test_capacity_counts_the_nodes_a_group_needs() -> None:
    desired = desired_of(CR, DEFAULTS)
    node = {"metadata": {"labels": {}}, "status": {"allocatable": {"huawei.com/Ascend910": "8"}}}
    small = {"metadata": {"labels": {}}, "status": {"allocatable": {"huawei.com/Ascend910": "4"}}}
    assert capacity_problem(desired, {}, [node, node]) is None
    problem = capacity_problem(desired, {}, [node, small])
    assert problem is not None
    assert "a group of 2 pods on 2 nodes with 8 huawei.com/Ascend910 each, but only 1 node has that many" in problem
    wide = replace(desired, npus_per_pod=16)
    assert "spread it over more parallelism.nodes" in (capacity_problem(wide, {}, [node, node]) or "")


def test_workers_are_not_scraped() -> None:
    leader, worker = group_pods("dsv3-group", "h")
    assert workload.serves(leader)
    assert not workload.serves(worker)
    assert workload.serves({"metadata": {"labels": {}}})  # a Deployment's pod
    assert workload.kind_of_pod(worker) == workload.LEADER_WORKER_SET
    assert workload.kind_of_spec({"parallelism": {"nodes": 2}}) == workload.LEADER_WORKER_SET
    assert workload.kind_of_spec({"parallelism": {"nodes": "2"}}) == workload.DEPLOYMENT  # invalid: not a group
