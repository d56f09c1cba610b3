"""Engines a drain or a node failure does not take all at once: a PodDisruptionBudget once the resource may run
several, and the pods spread over nodes, each with a spec field to turn it off."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator.render import workload
from specinfer_operator.render.children import render
from tests.support.builders import cr, example

BASE: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
}
SELECTOR = {"matchLabels": {"app.kubernetes.io/name": "specinfer-engine", "app.kubernetes.io/instance": "demo"}}
SPREAD = {**{"labelSelector": SELECTOR}, "maxSkew": 1, "topologyKey": "kubernetes.io/hostname"}
ACROSS_NODES = [{**SPREAD, "whenUnsatisfiable": "ScheduleAnyway"}]


def objects(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(cr(spec, uid="u1", namespace="ml"))}


def budget(spec: dict[str, Any]) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (objects(spec).get("PodDisruptionBudget") or {}).get("spec")
    return found


def spread(spec: dict[str, Any]) -> list[list[Any]]:
    """The spread constraints of each pod template."""
    return [
        t["spec"].get("topologySpreadConstraints", [])
        for o in objects(spec).values()
        if workload.is_workload(o)
        for t in workload.pod_templates(o)
    ]


def test_one_replica_has_no_budget_and_two_have_one_and_spread_over_nodes() -> None:
    assert budget(BASE) is None
    assert budget({**BASE, "replicas": 2}) == {"selector": SELECTOR, "maxUnavailable": 1}
    assert spread({**BASE, "replicas": 2}) == [ACROSS_NODES]


def test_the_pod_template_does_not_depend_on_the_replicas() -> None:
    # A scale from one engine to two would otherwise replace the one serving while the second loads.
    assert spread(BASE) == spread({**BASE, "replicas": 2}) == [ACROSS_NODES]


def test_a_resource_the_autoscaler_may_scale_to_two_has_its_budget_at_one_replica() -> None:
    scaled = {**BASE, "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "queueDepth": 3}}
    assert budget(scaled) == {"selector": SELECTOR, "maxUnavailable": 1}
    single = {**BASE, "autoscaling": {"minReplicas": 1, "maxReplicas": 1, "queueDepth": 3}}
    assert budget(single) is None


@pytest.mark.parametrize(
    ("settings", "terms"),
    [
        ({}, {"maxUnavailable": 1}),
        ({"maxUnavailable": 2}, {"maxUnavailable": 2}),
        ({"minAvailable": 2}, {"minAvailable": 2}),
        ({"enabled": True, "minAvailable": 0}, {"minAvailable": 0}),
    ],
)
def test_a_budget_that_is_set_is_rendered_as_set_whatever_the_replicas(
    settings: dict[str, Any], terms: dict[str, int]
) -> None:
    assert budget({**BASE, "disruptionBudget": settings}) == {"selector": SELECTOR, **terms}


def test_each_toggle_turns_its_part_off() -> None:
    several = {**BASE, "replicas": 3}
    assert budget({**several, "disruptionBudget": {"enabled": False}}) is None
    assert budget({**several, "disruptionBudget": {"enabled": False, "maxUnavailable": 1}}) is None
    assert spread({**several, "disruptionBudget": {"enabled": False}}) == [ACROSS_NODES]
    unspread = {**several, "placement": {"spreadAcrossNodes": False}}
    assert spread(unspread) == [[]]
    assert budget(unspread) == {"selector": SELECTOR, "maxUnavailable": 1}


def test_the_users_spread_or_anti_affinity_wins() -> None:
    zones = {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    assert spread({**BASE, "replicas": 2, "placement": {"topologySpreadConstraints": [zones]}}) == [
        [{"labelSelector": SELECTOR, **zones}]
    ]
    term = {"topologyKey": "kubernetes.io/hostname", "labelSelector": SELECTOR}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    assert spread({**BASE, "replicas": 2, "placement": {"affinity": anti}}) == [[]]
    # Node affinity says where, not how far apart: the spread stays.
    near: dict[str, Any] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert spread({**BASE, "replicas": 2, "placement": {"affinity": near}}) == [ACROSS_NODES]


def test_groups_spread_all_their_pods_together_under_one_budget() -> None:
    groups = {**example("multinode/deepseek-v3.2-mtp")["spec"], "replicas": 2}
    found = objects(groups)
    assert "LeaderWorkerSet" in found
    # Leaders and workers of every group counted together: a node holds pods of as few groups as it can.
    assert spread(groups) == [ACROSS_NODES, ACROSS_NODES]
    assert found["PodDisruptionBudget"]["spec"] == {"selector": SELECTOR, "maxUnavailable": 1}
