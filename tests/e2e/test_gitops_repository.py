"""gitops/ on the real API server: the Argo CD and Flux objects against their own CRDs, the overlays with the
chart's tenant policy bound, and the production overlay's answer to the autoscaler (the HorizontalPodAutoscaler
the operator renders from spec.autoscaling) owning spec.replicas, applied the ways Argo CD (client-side apply)
and Flux (server-side apply, forcing conflicts) apply it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from hack.kubeclient import Cluster, wait_until
from tests.e2e.conftest import ROOT, Operator
from tests.e2e.test_tenancy import chart_policy, dry_run

GITOPS = ROOT / "gitops"
STRICT = ("apply", "--dry-run=server", "--validate=strict", "--server-side", "-f", "-")
FLUX = ("apply", "--server-side", "--force-conflicts", "--field-manager=kustomize-controller", "-f", "-")


def built(cluster: Cluster, path: str, namespace: str) -> list[dict[str, Any]]:
    """`kubectl kustomize gitops/PATH`, every object moved into `namespace` (the test's own)."""
    out = subprocess.run(
        [cluster.kubectl_path, "kustomize", str(GITOPS / path)], capture_output=True, text=True, check=True
    ).stdout
    objects = [o for o in yaml.safe_load_all(out) if o]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    return objects


def install_crds(cluster: Cluster, directory: Path) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory))
    for crd in yaml.safe_load_all("".join(p.read_text() for p in sorted(directory.glob("*.yaml")))):
        name = f"crd/{crd['metadata']['name']}"
        # kubectl wait fails at once on a CRD whose status has no conditions yet: ask until it holds one.
        wait_until(
            f"{name} Established",
            lambda name=name: cluster.kubectl("wait", "--for=condition=Established", name, check=False).returncode == 0,
        )


def test_the_argo_cd_and_flux_objects_pass_their_crds(
    cluster: Cluster, namespace: str, gitops_tools: dict[str, Path]
) -> None:
    install_crds(cluster, gitops_tools["gitops-crds"])
    kinds = set()
    for path in ("argocd", "flux", "flux/operator"):
        objects = built(cluster, path, namespace)
        kinds |= {o["kind"] for o in objects}
        result = cluster.kubectl(*STRICT, stdin=yaml.safe_dump_all(objects), check=False)
        assert result.returncode == 0, f"{path}: {result.stderr}"
    assert kinds == {"Application", "GitRepository", "OCIRepository", "Kustomization", "HelmRelease"}
    # The schemas are enforced: a misspelt field of either tool is refused.
    production = next(o for o in built(cluster, "argocd", namespace) if o["metadata"]["name"] == "llm-production")
    production["spec"]["ignoreDifference"] = production["spec"].pop("ignoreDifferences")
    refused = cluster.kubectl(*STRICT, stdin=yaml.safe_dump(production), check=False)
    assert refused.returncode != 0
    assert "spec.ignoreDifference" in refused.stderr, refused.stderr
    (release,) = [
        r for r in built(cluster, "flux/operator", namespace) if r["metadata"]["name"] == "specinfer-operator"
    ]
    release["spec"]["dependOn"] = release["spec"].pop("dependsOn")
    refused = cluster.kubectl(*STRICT, stdin=yaml.safe_dump(release), check=False)
    assert refused.returncode != 0
    assert "spec.dependOn" in refused.stderr, refused.stderr


def test_the_overlays_pass_the_api_server_and_the_charts_tenant_policy(cluster: Cluster, namespace: str) -> None:
    installed = chart_policy(cluster, f"gitops-{namespace}", namespace, {})
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installed))
    try:
        probe = {**built(cluster, "resources/overlays/staging", namespace)[0], "metadata": {"name": "probe"}}
        probe["spec"] = {
            **probe["spec"],
            "podTemplate": {"spec": {"volumes": [{"name": "x", "hostPath": {"path": "/x"}}]}},
        }
        wait_until("the tenant policy bound", lambda: dry_run(cluster, namespace, probe))
        for overlay in ("staging", "production"):
            objects = built(cluster, f"resources/overlays/{overlay}", namespace)
            result = cluster.kubectl(*STRICT, stdin=yaml.safe_dump_all(objects), check=False)
            assert result.returncode == 0, f"{overlay}: {result.stderr}"
            assert "Warning" not in result.stderr, result.stderr
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(installed), check=False)


def autoscaler(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "hpa", "-n", namespace, "llama3", "-o", "json", check=False)
    if found.returncode != 0:
        return None
    hpa: dict[str, Any] = json.loads(found.stdout)
    return hpa


def counted(cluster: Cluster, namespace: str) -> tuple[int, int]:
    """spec.replicas of the production resource, and its generation (which any change of the count moves)."""
    obj = cluster.get("specinference", "-n", namespace, "llama3")
    return obj["spec"]["replicas"], obj["metadata"]["generation"]


def applied(cluster: Cluster, how: tuple[str, ...], obj: dict[str, Any]) -> int:
    """spec.replicas as the API server answers the apply: what the object holds right after it."""
    answer = json.loads(cluster.kubectl(*how, "-o", "json", stdin=yaml.safe_dump(obj)).stdout)
    replicas: int = answer["spec"]["replicas"]
    return replicas


def test_the_autoscaler_scales_through_the_scale_subresource_and_keeps_its_count_through_argo_cd_and_flux(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    production = built(cluster, "resources/overlays/production", namespace)
    (resource,) = [o for o in production if o["kind"] == "SpeculativeInference"]
    assert "replicas" not in resource["spec"]
    cluster.kubectl(*FLUX, stdin=yaml.safe_dump_all(production))
    # The operator renders the autoscaler; the real HPA controller scales through the scale subresource: the CRD's
    # default of 1 is below minReplicas.
    hpa = wait_until("the operator to render the autoscaler", lambda: autoscaler(cluster, namespace), timeout=120)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": resource["apiVersion"],
        "kind": resource["kind"],
        "name": "llama3",
    }
    minimum = hpa["spec"]["minReplicas"]
    assert minimum == resource["spec"]["autoscaling"]["minReplicas"]
    wait_until(f"the HPA to scale to {minimum}", lambda: counted(cluster, namespace)[0] == minimum, timeout=120)
    scale = json.loads(
        cluster.kubectl(
            "get", "--raw", f"/apis/specinfer.io/v1alpha1/namespaces/{namespace}/speculativeinferences/llama3/scale"
        ).stdout
    )
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", minimum)
    scaled = counted(cluster, namespace)
    cluster.kubectl(*FLUX, stdin=yaml.safe_dump(resource))  # Flux's reconcile
    assert counted(cluster, namespace) == scaled  # the same generation: not reset, even for a moment
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(resource))  # Argo CD's default (client-side) sync
    assert counted(cluster, namespace) == scaled
    # The manifest with spec.replicas, as the base has it: each reconcile would set the HPA's count back.
    assert applied(cluster, FLUX, {**resource, "spec": {**resource["spec"], "replicas": 1}}) == 1


def test_moving_a_count_flux_applied_to_the_hpa_needs_a_handover(cluster: Cluster, namespace: str) -> None:
    """The commit that removes spec.replicas from a resource Flux applied before: server-side apply removes a
    field its only owner stops applying, and the CRD's default (1) takes its place, unless another field
    manager owns it first (docs/gitops.md)."""
    (resource,) = [
        o for o in built(cluster, "resources/overlays/production", namespace) if o["kind"] == "SpeculativeInference"
    ]
    counted_by_git = {**resource, "spec": {**resource["spec"], "replicas": 3}}
    assert applied(cluster, FLUX, counted_by_git) == 3
    assert applied(cluster, FLUX, resource) == 1  # without the handover: down to the default
    assert applied(cluster, FLUX, counted_by_git) == 3
    handover = {
        "apiVersion": resource["apiVersion"],
        "kind": resource["kind"],
        "metadata": {"name": "llama3", "namespace": namespace},
        "spec": {"replicas": 3},
    }
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=handover-to-hpa", "-f", "-", stdin=yaml.safe_dump(handover)
    )
    generation = counted(cluster, namespace)[1]
    assert applied(cluster, FLUX, resource) == 3
    assert counted(cluster, namespace) == (3, generation)
