"""The CRD as users meet it: kubectl output, explain, and NPU scheduling on simulated Ascend nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from hack.kubeclient import Cluster, wait_until
from tests.e2e.test_operator import apply, spec, wait_ready

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NPU = "huawei.com/Ascend910"


@pytest.mark.usefixtures("operator")
def test_kubectl_get_prints_the_columns(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "ngram.yaml"), "-f", str(EXAMPLES / "eagle3.yaml"))
    expected = [["llama3-eagle3", "eagle3"], ["llama3-ngram", "ngram"]]

    def listing() -> list[str] | None:
        """The rows once the operator has written what serves: METHOD reads the status, not the spec."""
        lines = cluster.kubectl("get", "specinference", "-n", namespace).stdout.splitlines()
        return lines if sorted(row.split()[:2] for row in lines[1:]) == expected else None

    header, *rows = wait_until("both rows to name their method from the status", listing)
    assert header.split() == [
        "NAME",
        "METHOD",
        "K",
        "READY",
        "STATUS",
        "ACCEPT-LEN",
        "TUNING",
        "AUTOSCALE",
        "OBJECTIVE",
        "DRAFT",
        "AGE",
    ]
    tuning = header.index("TUNING")
    # No tuning, autoscaling or learning configured: no advice, no replica range, no objective, no draft generation.
    assert {row[tuning : header.index("AGE")].strip() for row in rows} == {""}
    wide = cluster.kubectl("get", "specinf", "-n", namespace, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-5:] == ["ACCEPT", "MEASURED", "ADAPTIVITY", "DECODE-TOK/S", "VLLM-ASCEND"]


def test_kubectl_explain_shows_the_descriptions(cluster: Cluster) -> None:
    out = " ".join(cluster.kubectl("explain", "specinference.spec.speculative").stdout.split())  # unwrap
    assert "numSpeculativeTokens" in out
    assert "num_speculative_tokens" in out
    assert "At most 14: vLLM-Ascend's attention verifies K+1 tokens per decode round" in out
    field = cluster.kubectl("explain", "specinference.spec.graph.captureSizes").stdout
    assert "cudagraph_capture_sizes" in field


def test_kubectl_apply_refuses_with_our_message(cluster: Cluster, namespace: str) -> None:
    bad = (EXAMPLES / "eagle3.yaml").read_text().replace("captureSizes: [4, 8, 12, 16]", "captureSizes: [5, 10]")
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    assert "spec.graph.captureSizes" in result.stderr
    assert "every capture size must be a multiple of K+1 = 4" in result.stderr


def _npu_deployment(name: str, npus: int) -> client.V1Deployment:
    labels = {"app": name}
    container = client.V1Container(
        name="engine",
        image="registry.invalid/engine:none",  # never pulled: kwok simulates the kubelet
        resources=client.V1ResourceRequirements(requests={NPU: str(npus)}, limits={NPU: str(npus)}),
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels), spec=client.V1PodSpec(containers=[container])
            ),
        ),
    )


def _pods(cluster: Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", namespace, "-l", f"app={app}")["items"]
    return items


def _conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}


def test_eight_npus_schedule_on_a_fake_ascend_node(cluster: Cluster, namespace: str) -> None:
    cluster.apps.create_namespaced_deployment(namespace, _npu_deployment("eight", 8))

    def ready_pod() -> dict[str, Any] | None:
        for pod in _pods(cluster, namespace, "eight"):
            ready = _conditions(pod).get("Ready", {}).get("status")
            if pod["status"].get("phase") == "Running" and ready == "True":
                return pod
        return None

    pod = wait_until("the 8-NPU pod to be Running and Ready", ready_pod, timeout=90)
    node = cluster.get("node", pod["spec"]["nodeName"])
    assert node["status"]["allocatable"][NPU] == "8"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_more_npus_than_any_node_stays_pending(cluster: Cluster, namespace: str) -> None:
    cluster.apps.create_namespaced_deployment(namespace, _npu_deployment("sixteen", 16))

    def unschedulable() -> str | None:
        for pod in _pods(cluster, namespace, "sixteen"):
            scheduled = _conditions(pod).get("PodScheduled", {})
            if scheduled.get("reason") == "Unschedulable":
                return str(scheduled["message"])
        return None

    message = wait_until("the 16-NPU pod to be reported Unschedulable", unschedulable, timeout=60)
    assert f"Insufficient {NPU}" in message
    (pod,) = _pods(cluster, namespace, "sixteen")
    assert pod["status"]["phase"] == "Pending"


@pytest.mark.usefixtures("operator")
def test_kubectl_describe_tells_the_story_in_events(cluster: Cluster, namespace: str) -> None:
    """Each notable transition is an Event: accepted, serving, rolled out, a refused change."""
    apply(cluster, namespace, "story", spec(k=3, replicas=1))
    wait_ready(cluster, namespace, "story")
    apply(cluster, namespace, "story", spec(k=3, tensor=16, replicas=1))

    def events() -> dict[str, str]:
        described = cluster.kubectl("describe", "specinference", "-n", namespace, "story").stdout
        table = described.split("Events:", 1)[1].strip().splitlines()[2:]  # after the header and its rule
        return {row[1]: row[0] for row in (line.split(None, 4) for line in table) if len(row) == 5}

    # kopf posts events one at a time, retrying failures: events of namespaces deleted by earlier tests
    # can hold the queue for a while.
    seen = wait_until("the refusal's event", lambda: "InsufficientNPUCapacity" in events() and events(), timeout=150)
    expected = {"Valid": "Normal", "Ready": "Normal", "RolloutComplete": "Normal", "InsufficientNPUCapacity": "Warning"}
    assert {reason: seen.get(reason) for reason in expected} == expected, seen
    assert "InvalidConfig" not in seen, "a refused spec is one ConfigValid warning"
