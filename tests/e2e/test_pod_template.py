"""The pod settings on the real control plane: the overlay reaches the pods under the operator's fields, the
PodDisruptionBudget follows spec.disruptionBudget, and the garbage collector removes it with the resource. The
pods are sized for the simulated Atlas nodes: the API server's QoS class, the scheduler's placement and the
operator's capacity check all go by the requests the operator renders."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import ROOT
from tests.e2e.test_operator import NPU, apply, condition, serving, wait_ready, wait_resource

EXAMPLE = ROOT / "examples" / "pod" / "ascend-cluster.yaml"


def budget(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "pdb", name, "-n", namespace, "-o", "yaml", check=False)
    loaded: dict[str, Any] | None = yaml.safe_load(found.stdout) if found.returncode == 0 else None
    return loaded


@pytest.mark.usefixtures("operator")
def test_the_pod_template_overlay_reaches_the_pods(cluster: Cluster, namespace: str) -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    name, spec = example["metadata"]["name"], example["spec"]
    spec["podTemplate"]["metadata"]["labels"]["app.kubernetes.io/instance"] = "not-this-one"
    apply(cluster, namespace, name, spec)
    ready = wait_ready(cluster, namespace, name)
    assert (
        "app.kubernetes.io/instance"
        in next(c for c in ready["status"]["conditions"] if c["type"] == "ConfigValid")["message"]
    )  # the operator's label wins, and says so

    pod = pods(cluster, namespace, name)[0]
    assert pod["metadata"]["labels"]["volcano.sh/queue-name"] == "inference"
    assert pod["metadata"]["labels"]["app.kubernetes.io/instance"] == name
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 120
    engine = pod["spec"]["containers"][0]
    assert {"name": "ascend-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True} in engine[
        "volumeMounts"
    ]
    assert engine["env"][-1]["valueFrom"]["secretKeyRef"]["name"] == "vllm-api-key"
    assert engine["resources"]["limits"]["cpu"] == "32"
    assert engine["resources"]["requests"]["cpu"] == "16"
    assert pod["status"]["qosClass"] == "Burstable"  # cpuLimit above cpu, as the example means
    assert engine["startupProbe"]["periodSeconds"] == 20
    hf_cache = next(v for v in pod["spec"]["volumes"] if v["name"] == "hf-cache")
    assert hf_cache["emptyDir"]["sizeLimit"] == "100Gi"
    service = cluster.get("service", "-n", namespace, name)
    assert service["metadata"]["annotations"]["service.beta.kubernetes.io/load-balancer-internal"] == "true"

    pdb = budget(cluster, namespace, name)
    assert pdb is not None
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["metadata"]["ownerReferences"][0]["name"] == name

    # The budget goes when the spec drops it, and comes back with it.
    apply(cluster, namespace, name, {k: v for k, v in spec.items() if k != "disruptionBudget"})
    wait_until("the PodDisruptionBudget to go", lambda: budget(cluster, namespace, name) is None, timeout=30)
    # minAvailable 1 of 2 pods: a budget that keeps every pod would hold node drains, which the tenant policy refuses.
    apply(cluster, namespace, name, {**spec, "replicas": 2, "disruptionBudget": {"minAvailable": 1}})
    wait_until("the PodDisruptionBudget to return", lambda: budget(cluster, namespace, name), timeout=30)

    cluster.kubectl("delete", "specinference", name, "-n", namespace, "--wait=true")
    wait_until("the garbage collector", lambda: budget(cluster, namespace, name) is None, timeout=60)


SIZED = {"model": {"name": "Qwen/Qwen3-8B"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}


def placed(cluster: Cluster, namespace: str, name: str) -> tuple[list[str], list[str]]:
    """The nodes of the Running pods, and the scheduler's messages for the Pending ones."""
    found = pods(cluster, namespace, name)
    running = sorted(p["spec"]["nodeName"] for p in found if p["status"].get("phase") == "Running")
    pending = [
        c.get("message", "")
        for p in found
        if p["status"].get("phase") == "Pending"
        for c in p["status"].get("conditions", [])
        if c["type"] == "PodScheduled" and c["status"] == "False"
    ]
    return running, pending


@pytest.mark.usefixtures("operator")
def test_engine_pods_are_sized_for_an_npu_node(cluster: Cluster, namespace: str) -> None:
    # Nothing said of resources: each NPU's share of the node, limits equal to requests.
    apply(cluster, namespace, "sized", {**SIZED, "replicas": 2})
    wait_ready(cluster, namespace, "sized")
    for pod in pods(cluster, namespace, "sized"):
        assert pod["status"]["qosClass"] == "Guaranteed"  # the API server's verdict
        engine = pod["spec"]["containers"][0]["resources"]
        assert engine["requests"] == {NPU: "1", "cpu": "16", "memory": "80Gi", "ephemeral-storage": "64Gi"}
        assert engine["limits"] == {NPU: "1", "cpu": "16", "memory": "80Gi"}
        hf_cache = next(v for v in pod["spec"]["volumes"] if v["name"] == "hf-cache")
        assert hf_cache["emptyDir"] == {"sizeLimit": "64Gi"}

    # The scheduler goes by them: three 1-NPU pods of 100 CPUs, which two 8-NPU, 192-CPU nodes hold two of.
    apply(cluster, namespace, "sized", {**SIZED, "replicas": 3, "resources": {"cpu": "100"}})

    def two_and_one() -> tuple[list[str], list[str]] | None:
        running, pending = placed(cluster, namespace, "sized")
        return (running, pending) if len(running) == 2 and len(pending) == 1 else None

    running, pending = wait_until("two pods Running, one per node, and the third Pending", two_and_one, timeout=90)
    assert len(set(running)) == 2, running
    assert "Insufficient cpu" in pending[0], pending

    # A sidecar without limits makes the pods Burstable: the operator says so, and the API server agrees.
    sidecar = {
        "name": "shipper",
        "image": "busybox:1.36",
        "resources": {"requests": {"cpu": "100m"}},
        "securityContext": {"runAsNonRoot": True},  # as the default tenant policy requires of sidecars
    }
    apply(cluster, namespace, "sized", {**SIZED, "replicas": 2, "podTemplate": {"spec": {"containers": [sidecar]}}})
    obj = wait_ready(cluster, namespace, "sized")
    assert "so the engine pods are Burstable" in condition(obj, "ConfigValid")["message"]
    wait_until(
        "the pods to roll to Burstable",
        lambda: [p["status"].get("qosClass") for p in pods(cluster, namespace, "sized")] == ["Burstable"] * 2,
        timeout=90,
    )

    # Requests no node with the NPUs can hold are refused before anything is applied, naming the field.
    before = serving(cluster, namespace, "sized")
    apply(cluster, namespace, "sized", {**SIZED, "replicas": 2, "resources": {"cpu": "200"}})
    refused = wait_resource(
        cluster, namespace, "sized", "ConfigValid=False", lambda o: condition(o, "ConfigValid").get("status") == "False"
    )
    said = condition(refused, "ConfigValid")
    assert said["reason"] == "InsufficientNPUCapacity"
    assert (
        f"each pod requests 200 cpu besides 1 {NPU}, but no node with that many {NPU} has that much allocatable "
        "(at most 192 cpu): lower resources.cpu (16 per NPU when unset)"
    ) in said["message"], said["message"]
    assert serving(cluster, namespace, "sized")[1] == before[1]
