"""A spec past 128 KiB (where kopf can no longer keep the last handled spec in its annotation) on the real API
server and operator: labels and annotations cost no reconcile, a spec change costs one."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.kubeclient import Cluster, wait_until
from specinfer_operator.manager.diffbase import MAX_BYTES
from tests.e2e.conftest import Operator
from tests.e2e.test_operator import spec, wait_ready

NAME = "large"
# Seconds between two edits, so that the operator sees each as an event of its own rather than one batch
# (kopf batches an object's events for 10 ms): pacing only, nothing is measured by it.
PACE = 1.0


@pytest.fixture
def own_operator(cluster: Cluster, namespace: str, tmp_path: Path, no_shared_operator: None) -> Iterator[Operator]:
    """An operator of this namespace alone: every reconcile it counts is of this test's resource."""
    handle = Operator(cluster.kubeconfig, tmp_path, "--namespace", namespace)
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()


def large(replicas: int) -> dict[str, Any]:
    """A valid spec of about 160 KiB: 40 environment variables of 4,000 characters (the CRD allows 64 of 4,096)."""
    body = spec(replicas=replicas)
    body["runtime"] = {"env": [{"name": f"NOTE_{i}", "value": f"{i:02d}" + "x" * 3998} for i in range(40)]}
    assert len(json.dumps(body)) > MAX_BYTES
    return body


def apply(cluster: Cluster, namespace: str, replicas: int) -> None:
    manifest = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "metadata": {"name": NAME}}
    cluster.kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", stdin=json.dumps({**manifest, "spec": large(replicas)})
    )


def reconciles(operator: Operator) -> float:
    """specinfer_reconciles_total over every result."""
    lines = operator.metrics().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("specinfer_reconciles_total{"))


def test_labels_and_annotations_of_a_large_spec_cost_no_reconcile(
    cluster: Cluster, namespace: str, own_operator: Operator
) -> None:
    apply(cluster, namespace, replicas=1)
    wait_ready(cluster, namespace, NAME, timeout=300)
    before = reconciles(own_operator)
    assert before >= 1
    for i in range(4):
        cluster.kubectl("annotate", "--overwrite", "specinference", "-n", namespace, NAME, f"example.com/note={i}")
        time.sleep(PACE)
        cluster.kubectl("label", "--overwrite", "specinference", "-n", namespace, NAME, f"example.com/team=t{i}")
        time.sleep(PACE)
    # The spec change comes after every edit above: once it is reconciled, the operator has handled them all
    # (one object's events are handled in order).
    apply(cluster, namespace, replicas=2)
    wait_until("the spec change to be reconciled", lambda: reconciles(own_operator) > before, timeout=300)
    ready = wait_ready(cluster, namespace, NAME, timeout=300)
    assert ready["spec"]["replicas"] == 2
    assert reconciles(own_operator) == before + 1
