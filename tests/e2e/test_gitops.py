"""Health as GitOps tools compute it, on status objects the operator really wrote: the shipped Argo CD Lua
health check (in Argo CD's Lua runtime) and kstatus (what Flux and cli-utils use)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hack.kubeclient import Cluster
from tests.e2e.conftest import ROOT
from tests.e2e.test_operator import apply, condition, spec, wait_ready, wait_resource

ARGOCD_HEALTH = ROOT / "gitops" / "argocd" / "health.lua"


def health(tools: dict[str, Path], objects: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(Argo CD status, Argo CD message, kstatus status, kstatus message) of each object."""
    payload = json.dumps(objects)

    def run(*args: str) -> list[dict[str, str]]:
        out = subprocess.run(
            [str(tools["healthcheck"]), *args], input=payload, capture_output=True, text=True, check=True
        )
        results: list[dict[str, str]] = json.loads(out.stdout)
        return results

    argo, kstatus = run("argocd", str(ARGOCD_HEALTH)), run("kstatus")
    return [(a["status"], a["message"], k["status"], k["message"]) for a, k in zip(argo, kstatus, strict=True)]


def watched(stream: str) -> list[dict[str, Any]]:
    """The objects of a `kubectl get -w -o json` stream (JSON documents back to back)."""
    decoder, objects, at = json.JSONDecoder(), [], 0
    while at < len(stream):
        if stream[at].isspace():
            at += 1
            continue
        obj, at = decoder.raw_decode(stream, at)
        objects.append(obj)
    return objects


@pytest.mark.usefixtures("operator")
def test_health_follows_a_rollout(cluster: Cluster, namespace: str, gitops_tools: dict[str, Path]) -> None:
    apply(cluster, namespace, "flux", spec(k=3, replicas=1))
    wait_ready(cluster, namespace, "flux")
    watch = subprocess.Popen(
        [
            cluster.kubectl_path,
            "--kubeconfig",
            cluster.kubeconfig,
            "get",
            "specinference",
            "flux",
            "-n",
            namespace,
            "--watch",
            "-o",
            "json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        apply(cluster, namespace, "flux", spec(k=4, replicas=1))
        final = wait_ready(cluster, namespace, "flux")
    finally:
        watch.terminate()
        stream, _ = watch.communicate(timeout=10)
    seen = [o for o in watched(stream) if o["metadata"]["generation"] == 2]
    assert seen, "the watch saw no object of the new generation"
    verdicts = health(gitops_tools, seen)
    assert ("Progressing", "InProgress") in {(argo, kstatus) for argo, _, kstatus, _ in verdicts}
    assert all(argo in ("Progressing", "Healthy") for argo, _, _, _ in verdicts), verdicts
    assert all(kstatus in ("InProgress", "Current") for _, _, kstatus, _ in verdicts), verdicts
    ((argo, message, kstatus, _),) = health(gitops_tools, [final])
    assert (argo, kstatus) == ("Healthy", "Current")
    assert message == "Ready: 1/1 pods serving eagle3 with K=4"


@pytest.mark.usefixtures("operator")
def test_a_spec_the_cluster_cannot_run_fails_health(
    cluster: Cluster, namespace: str, gitops_tools: dict[str, Path]
) -> None:
    apply(cluster, namespace, "toobig", spec(tensor=16, replicas=1))

    refused = wait_resource(
        cluster, namespace, "toobig", "the verdict", lambda o: o.get("status", {}).get("observedGeneration") == 1
    )
    ((argo, message, kstatus, kmessage),) = health(gitops_tools, [refused])
    assert (argo, kstatus) == ("Degraded", "Failed")
    assert message.startswith("InvalidConfig: ")
    assert "each pod needs 16 huawei.com/Ascend910" in message
    assert "each pod needs 16" in kmessage


@pytest.mark.usefixtures("operator")
def test_unschedulable_pods_degrade_health_but_keep_reconciling(
    cluster: Cluster, namespace: str, gitops_tools: dict[str, Path]
) -> None:
    """More 8-NPU pods than the two nodes hold: Argo CD shows Degraded, kstatus waits (it may free up)."""
    apply(cluster, namespace, "crowded", spec(tensor=8, replicas=3))

    stuck = wait_resource(
        cluster, namespace, "crowded", "Unschedulable", lambda o: condition(o, "Ready").get("reason") == "Unschedulable"
    )
    ((argo, message, kstatus, _),) = health(gitops_tools, [stuck])
    assert (argo, kstatus) == ("Degraded", "InProgress")
    assert message == "Unschedulable: 0/2 nodes have 8 free huawei.com/Ascend910"
