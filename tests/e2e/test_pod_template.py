"""The pod settings on the real control plane: the overlay reaches the pods under the operator's fields, the
PodDisruptionBudget follows spec.disruptionBudget, and the garbage collector removes it with the resource."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import ROOT
from tests.e2e.test_operator import apply, wait_ready

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
