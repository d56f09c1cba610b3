"""Reconcile's pure parts: whether the cluster can hold what the spec asks for."""

from __future__ import annotations

from dataclasses import replace

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
