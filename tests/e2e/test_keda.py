"""spec.autoscaling rendered for KEDA (the operator's --keda-prometheus) against the real control plane and KEDA's
own ScaledObject CRD (the version pinned in hack/versions.env, fetched from its Go module by
hack/build-binaries.sh): the operator applies a ScaledObject in place of the HorizontalPodAutoscaler it made before
it was given KEDA, owned by the resource, every field it writes in the real schema; the ScaledObject goes when the
spec drops spec.autoscaling. KEDA's controller is not run here: the HorizontalPodAutoscaler pipeline is, in
test_autoscaling.py, from the same queries."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, wait_until
from tests.e2e.conftest import ROOT, Operator, module_crd
from tests.e2e.test_operator import apply, spec, wait_ready

CRD = "scaledobjects.keda.sh"
PROMETHEUS = "http://127.0.0.1:9090"  # written into the triggers, never dialled: no KEDA runs here
AUTOSCALING = {"maxReplicas": 3, "queueDepth": 4, "kvCacheUsagePercent": 80, "decodeTokensPerSecond": 25}


@pytest.fixture
def keda_crd(cluster: Cluster) -> Iterator[None]:
    crd = module_crd("keda-crd", "keda-scaledobjects", "KEDA_VERSION")
    cluster.kubectl("apply", "--server-side", "-f", str(crd))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    try:
        yield
    finally:
        cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", "--wait=true")


def operator_of(cluster: Cluster, namespace: str, log_dir: Path, *flags: str) -> Operator:
    handle = Operator(cluster.kubeconfig, log_dir, "--namespace", namespace, *flags)
    handle.start()
    return handle


def found(cluster: Cluster, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    got = cluster.kubectl("get", kind, "-n", namespace, name, "-o", "yaml", "--show-managed-fields", check=False)
    loaded: dict[str, Any] | None = yaml.safe_load(got.stdout) if got.returncode == 0 else None
    return loaded


@pytest.mark.usefixtures("keda_crd", "no_shared_operator")
def test_given_keda_the_operator_replaces_its_autoscaler_with_a_scaled_object(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    body = {**spec(replicas=1), "autoscaling": AUTOSCALING}
    del body["replicas"]
    apply(cluster, namespace, "keda", body)

    # Before the platform gives the operator KEDA: a HorizontalPodAutoscaler.
    plain = operator_of(cluster, namespace, tmp_path)
    try:
        obj = wait_ready(cluster, namespace, "keda")
        wait_until("the HorizontalPodAutoscaler", lambda: found(cluster, "hpa", namespace, "keda"))
    finally:
        plain.stop()

    keda = operator_of(cluster, namespace, tmp_path, "--keda-prometheus", PROMETHEUS)
    try:
        scaled = wait_until("the ScaledObject", lambda: found(cluster, CRD, namespace, "keda"), 60)
        wait_until("the HorizontalPodAutoscaler to go", lambda: found(cluster, "hpa", namespace, "keda") is None, 60)
        (owner,) = scaled["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("SpeculativeInference", "keda", obj["metadata"]["uid"])
        assert {m["manager"] for m in scaled["metadata"]["managedFields"]} == {"specinfer-operator"}
        assert scaled["spec"]["scaleTargetRef"]["kind"] == "SpeculativeInference"
        triggers = {t["name"]: t for t in scaled["spec"]["triggers"]}
        assert sorted(triggers) == ["decode-milliseconds-per-token", "kv-cache-usage-percent", "queue-depth"]
        assert f'namespace="{namespace}",name="keda"' in triggers["queue-depth"]["metadata"]["query"]
        assert triggers["kv-cache-usage-percent"]["metadata"]["threshold"] == "80"

        # Every field the operator writes is in KEDA's schema: strict validation refuses an unknown one, which the
        # operator's own apply would see silently pruned.
        scaled.pop("status", None)
        for key in ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "ownerReferences"):
            scaled["metadata"].pop(key, None)
        strict = ("apply", "--dry-run=server", "--validate=strict", "--server-side", "--force-conflicts", "-f", "-")
        dry_run = cluster.kubectl(*strict, stdin=yaml.safe_dump(scaled), check=False)
        assert dry_run.returncode == 0, dry_run.stderr
        rendered = render(namespace, body)
        dry_run = cluster.kubectl(*strict, stdin=yaml.safe_dump(rendered), check=False)
        assert dry_run.returncode == 0, dry_run.stderr

        # The spec drops autoscaling: the ScaledObject goes, replicas stay where the autoscaler left them.
        apply(cluster, namespace, "keda", {**spec(replicas=1)})
        wait_until("the ScaledObject to go", lambda: found(cluster, CRD, namespace, "keda") is None, 60)
    finally:
        keda.stop()


def render(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """What `specinfer render --keda-prometheus` prints for the resource: its ScaledObject."""
    manifest = {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "metadata": {"name": "rendered", "namespace": namespace},
        "spec": body,
    }
    printed = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "specinfer"), "render", "--keda-prometheus", PROMETHEUS, "-"],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    scaled: list[dict[str, Any]] = [o for o in yaml.safe_load_all(printed) if o["kind"] == "ScaledObject"]
    (only,) = scaled
    return only
