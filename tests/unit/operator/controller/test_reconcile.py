"""Reconcile's pure parts: whether the cluster can hold what the spec asks for."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specinfer_operator.controller.reconcile import capacity_problem
from tests.support.statuses import DESIRED


def test_capacity_refuses_pods_no_node_can_hold() -> None:
    nodes = [{"metadata": {"labels": {"pool": "a"}}, "status": {"allocatable": {"huawei.com/Ascend910": "8"}}}]
    big = replace(DESIRED, npus_per_pod=16)
    problem = capacity_problem(big, {}, nodes)
    assert problem is not None
    assert "each pod needs 16 huawei.com/Ascend910, but the largest node has 8" in problem
    assert capacity_problem(DESIRED, {}, nodes) is None
    assert capacity_problem(big, {}, []) is None  # no NPU node at all: let the scheduler say it
    assert capacity_problem(DESIRED, {"pool": "b"}, nodes) is None


def node(npus: int, **allocatable: str) -> dict[str, Any]:
    return {"metadata": {"labels": {}}, "status": {"allocatable": {"huawei.com/Ascend910": str(npus), **allocatable}}}


def test_capacity_refuses_requests_no_node_with_the_npus_can_hold() -> None:
    # examples/eagle3.yaml: 4 NPUs, so 64 CPUs and 4 x 64Gi + 16Gi of /dev/shm; models on a claim, no download.
    assert DESIRED.requests == {"cpu": "64", "memory": "272Gi"}
    one = replace(DESIRED, npus_per_pod=1, requests={"cpu": "16", "memory": "80Gi", "ephemeral-storage": "64Gi"})
    atlas = node(8, cpu="192", memory="1536Gi", **{"ephemeral-storage": "3Ti"})
    assert capacity_problem(one, {}, [atlas]) is None
    small = node(8, cpu="12", memory="64Gi", **{"ephemeral-storage": "3Ti"})
    problem = capacity_problem(one, {}, [small, node(0, cpu="96", memory="1Ti")])
    assert problem == (
        "each pod requests 16 cpu, 80Gi memory besides 1 huawei.com/Ascend910, but no node with that many "
        "huawei.com/Ascend910 has that much allocatable (at most 12 cpu, 64Gi memory): lower resources.cpu (16 per "
        "NPU when unset); resources.memory (64Gi per NPU and sharedMemory when unset); or add larger nodes"
    )
    assert capacity_problem(one, {}, [small, atlas]) is None
    # What a node does not advertise, or not as a quantity, is not held against it.
    assert capacity_problem(one, {}, [node(8), node(8, cpu="a lot", memory="1Ti")]) is None


def test_capacity_counts_the_nodes_with_room_for_a_groups_pods() -> None:
    group = replace(DESIRED, npus_per_pod=8, group_size=2, requests={"cpu": "128", "ephemeral-storage": "1Ti"})
    roomy = node(8, cpu="192", **{"ephemeral-storage": "3Ti"})
    assert capacity_problem(group, {}, [roomy, roomy]) is None
    problem = capacity_problem(group, {}, [roomy, node(8, cpu="192", **{"ephemeral-storage": "500Gi"})])
    assert problem is not None
    assert problem.startswith(
        "each of the 2 pods of a group requests 1Ti ephemeral-storage besides 8 huawei.com/Ascend910, but only 1 "
        "node with that many huawei.com/Ascend910 has that much allocatable (at most 3Ti ephemeral-storage)"
    )
    assert "resources.modelCache (64Gi per NPU of the weights when unset) or set modelCacheClaim" in problem
