"""The operator's defaults for the engine pods and training Jobs (the chart's engineDefaults, runtimeImage.pullPolicy
and trainerImage.pullPolicy): applied where a resource sets nothing of its own, never merged into what it sets."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator.api.placement import Toleration
from specinfer_operator.controller.conditions import INSUFFICIENT_NPUS
from specinfer_operator.controller.reconcile import verdict_of
from specinfer_operator.render import workload
from specinfer_operator.render.children import DEFAULT_NPU_RESOURCE as NPU
from specinfer_operator.render.children import RenderDefaults, render
from specinfer_operator.render.training import PRUNE_CONTAINER, TRAINER_CONTAINER, training_job
from tests.support.builders import cr, example, resource

ASCEND = {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}
DEFAULTS = RenderDefaults(
    runtime_pull_policy="Always",
    trainer_pull_policy="Never",
    tolerations=(Toleration.model_validate(ASCEND),),
    node_selector={"accelerator": "huawei-Ascend910"},
)
SPEC: dict[str, Any] = {"model": {"name": "org/target"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}
LEARNING: dict[str, Any] = {
    "model": {"name": "org/target", "source": {"pvc": {"claimName": "models", "subPath": "target"}}},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
    "rollout": {"strategy": "Canary"},
    "learning": {"training": {"npus": 1}},
}


def pods(spec: dict[str, Any], defaults: RenderDefaults = DEFAULTS) -> list[dict[str, Any]]:
    """The pod specs of the engine workload, a Deployment's or a LeaderWorkerSet's leader and workers."""
    kinds = {o["kind"]: o for o in render(cr(spec, uid="u1", namespace="ml"), defaults)}
    found = kinds.get("Deployment") or kinds["LeaderWorkerSet"]
    return [template["spec"] for template in workload.pod_templates(found)]


def job(spec: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = training_job(cr(spec, uid="u1", namespace="ml"), 1, 0, 0.0, DEFAULTS)["spec"]["template"][
        "spec"
    ]
    return pod


@pytest.mark.parametrize("spec", [SPEC, example("multinode/deepseek-v3.2-mtp")["spec"]], ids=["pods", "groups"])
def test_pods_of_a_resource_without_placement_get_the_operators(spec: dict[str, Any]) -> None:
    for pod in pods({**spec, "placement": {}}):
        assert pod["tolerations"] == [ASCEND]
        assert pod["nodeSelector"] == {"accelerator": "huawei-Ascend910"}


def test_a_resources_own_placement_replaces_the_operators_whole() -> None:
    own = {"key": "example.com/team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    (pod,) = pods({**SPEC, "placement": {"tolerations": [own], "nodeSelector": {"pool": "a"}}})
    assert (pod["tolerations"], pod["nodeSelector"]) == ([own], {"pool": "a"})


def test_an_empty_list_or_map_opts_out() -> None:
    (pod,) = pods({**SPEC, "placement": {"tolerations": [], "nodeSelector": {}}})
    assert "tolerations" not in pod
    assert "nodeSelector" not in pod


def test_each_field_falls_back_on_its_own() -> None:
    (pod,) = pods({**SPEC, "placement": {"nodeSelector": {"pool": "a"}}})
    assert (pod["tolerations"], pod["nodeSelector"]) == ([ASCEND], {"pool": "a"})


def test_without_defaults_the_pods_are_as_before() -> None:
    (pod,) = pods(SPEC, RenderDefaults())
    assert "tolerations" not in pod
    assert "nodeSelector" not in pod
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_the_default_image_is_pulled_by_the_operators_policy_an_own_one_by_the_resources() -> None:
    (default,) = pods(SPEC)
    assert default["containers"][0]["imagePullPolicy"] == "Always"
    (own,) = pods({**SPEC, "runtime": {"image": "reg.example.com/rt:1", "imagePullPolicy": "IfNotPresent"}})
    assert own["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_the_training_job_runs_where_the_engines_do_with_the_trainer_images_policy() -> None:
    pod = job(LEARNING)
    assert (pod["tolerations"], pod["nodeSelector"]) == ([ASCEND], {"accelerator": "huawei-Ascend910"})
    containers = {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}
    assert {containers[n]["imagePullPolicy"] for n in (PRUNE_CONTAINER, TRAINER_CONTAINER)} == {"Never"}
    own = {**LEARNING, "learning": {"training": {"npus": 1, "image": "reg.example.com/trainer:1"}}}
    assert {c["imagePullPolicy"] for c in job(own)["containers"]} == {"IfNotPresent"}  # spec.runtime's


def test_the_capacity_check_counts_the_nodes_the_default_node_selector_selects() -> None:
    def node(accelerator: str, npus: int) -> dict[str, Any]:
        return {"metadata": {"labels": {"accelerator": accelerator}}, "status": {"allocatable": {NPU: str(npus)}}}

    body = resource({**SPEC, "parallelism": {"tensor": 8}}, namespace="ml")
    nodes = [node("huawei-Ascend910", 4), node("other", 16)]
    refused, _, _ = verdict_of(body, nodes, DEFAULTS)
    assert (refused.valid, refused.reason) == (False, INSUFFICIENT_NPUS)
    assert "matching the pods' nodeSelector" in refused.message
    assert verdict_of(body, nodes, RenderDefaults())[0].valid
