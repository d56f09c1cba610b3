"""The InferencePool of spec.inferencePool: over the pods the Service reaches (stable and canary), on the
engine port, the Endpoint Picker as the spec says or the inferencepool chart names it; owned like every child."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator.api.labels import TRACK_LABEL
from specinfer_operator.render import workload
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, config_hash, engines, inference_pool, render
from specinfer_runtime.engine import ENGINE_PORT
from tests.support.builders import cr, resource

BASE: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
    "replicas": 2,
}
POOLED = {**BASE, "inferencePool": {}}


def pod_labels(wanted: dict[str, Any]) -> list[dict[str, str]]:
    """The labels of every pod template of a workload (a LeaderWorkerSet has a leader's and a workers')."""
    return [t["metadata"]["labels"] for t in workload.pod_templates(wanted)]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_no_pool_unless_the_spec_asks_for_one() -> None:
    assert inference_pool(cr(BASE)) is None
    assert "InferencePool" not in {o["kind"] for o in render(cr(BASE))}


def test_the_pool_is_named_like_the_resource_owned_by_it_and_rendered_last() -> None:
    objects = render(cr(POOLED, uid="u1", namespace="ml"))
    pool = objects[-1]
    assert (pool["apiVersion"], pool["kind"]) == ("inference.networking.k8s.io/v1", "InferencePool")
    assert (pool["metadata"]["name"], pool["metadata"]["namespace"]) == ("demo", "ml")
    (owner,) = pool["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("SpeculativeInference", "u1", True)
    assert pool["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specinfer-operator"


def test_the_pool_selects_stable_and_canary_pods_on_the_engine_port() -> None:
    resource_ = cr(POOLED)
    pool = inference_pool(resource_)
    assert pool is not None
    stable = engines(resource_, RenderDefaults())
    canary = workload.canary(stable, "demo-canary", f"{TRACK_LABEL}=canary", 1)
    selector = pool["spec"]["selector"]["matchLabels"]
    assert all(selects(selector, labels) for labels in pod_labels(stable) + pod_labels(canary))
    assert TRACK_LABEL not in selector
    (container,) = stable["spec"]["template"]["spec"]["containers"]
    (http,) = [p for p in container["ports"] if p["name"] == "http"]
    assert pool["spec"]["targetPorts"] == [{"number": http["containerPort"]}] == [{"number": ENGINE_PORT}]
    assert pool["spec"]["appProtocol"] == "http"


def test_a_pool_of_groups_selects_their_leaders_only() -> None:
    group = cr({**POOLED, "parallelism": {"tensor": 16, "nodes": 2}})
    pool = inference_pool(group)
    assert pool is not None
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector[workload.WORKER_INDEX_LABEL] == "0"
    assert not selects(selector, {**selector, workload.WORKER_INDEX_LABEL: "1"})


def test_the_endpoint_picker_defaults_to_the_inferencepool_charts_and_takes_the_specs() -> None:
    pool = inference_pool(cr(POOLED, name="llama"))
    assert pool is not None
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "llama-epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    picker = {"name": "shared-epp", "port": 9102, "failureMode": "FailOpen"}
    chosen = inference_pool(cr({**BASE, "inferencePool": {"endpointPickerRef": picker}}))
    assert chosen is not None
    ref = chosen["spec"]["endpointPickerRef"]
    assert (ref["name"], ref["port"], ref["failureMode"]) == ("shared-epp", {"number": 9102}, "FailOpen")


def test_asking_for_a_pool_rolls_nothing_out() -> None:
    defaults = RenderDefaults()
    assert config_hash(cr(POOLED), defaults) == config_hash(cr(BASE), defaults)


@pytest.mark.parametrize(
    ("picker", "field"),
    [
        ({"port": 0}, "port"),
        ({"failureMode": "Maybe"}, "failureMode"),
        ({"kind": "1Service"}, "kind"),
        ({"name": "Not_A_Name"}, "name"),
        ({"group": "UPPER.example.com"}, "group"),
        ({"namespace": "other"}, "namespace"),
    ],
)
def test_an_endpoint_picker_the_api_server_would_refuse_is_refused_at_apply(picker: dict[str, Any], field: str) -> None:
    report = check(resource({**BASE, "inferencePool": {"endpointPickerRef": picker}}))
    assert not report.ok
    assert any(field in str(problem) for problem in report.errors), report.errors
