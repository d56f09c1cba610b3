"""spec.inferencePool against the real control plane and the Gateway API Inference Extension's own InferencePool
CRD (the version pinned in hack/versions.env, fetched from its Go module by hack/build-binaries.sh): the pool is
created and owned by the resource, every field the operator writes is in the real schema, it selects the stable
and the canary pods, it goes when the spec drops it and with the resource; without the CRD the resource serves
and says what to install, and gets its pool once the CRD is there, without an edit."""

from __future__ import annotations

from typing import Any

import yaml

from hack.kubeclient import Cluster, pods, wait_until
from specinfer_operator.render.children import inference_pool, label_selector
from tests.e2e.conftest import Operator, module_crd
from tests.e2e.test_canary import canary_spec, hashes
from tests.e2e.test_groups import group
from tests.e2e.test_operator import apply, condition, resource, spec, wait_ready, wait_resource
from tests.e2e.test_rollback import events
from tests.support.builders import cr

POOL_CRD = "inferencepools.inference.networking.k8s.io"  # also kubectl's name for them, whatever it has cached
TRACK = "specinfer.io/track"


def install(cluster: Cluster) -> None:
    crd = module_crd("inferencepool-crd", "inferencepools", "GATEWAY_API_INFERENCE_EXTENSION_VERSION")
    cluster.kubectl("apply", "--server-side", "-f", str(crd))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{POOL_CRD}", "--timeout=60s")


def uninstall(cluster: Cluster) -> None:
    cluster.kubectl("delete", "crd", POOL_CRD, "--ignore-not-found", "--wait=true")


def pool_of(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", POOL_CRD, "-n", namespace, name, "-o", "yaml", "--show-managed-fields", check=False)
    loaded: dict[str, Any] | None = yaml.safe_load(found.stdout) if found.returncode == 0 else None
    return loaded


def pooled(obj: dict[str, Any]) -> bool:
    return condition(obj, "InferencePool").get("status") == "True"


def with_pool(body: dict[str, Any], **picker: Any) -> dict[str, Any]:
    return {**body, "inferencePool": {"endpointPickerRef": picker} if picker else {}}


def test_the_pool_selects_stable_and_canary_pods_and_goes_with_the_resource(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    install(cluster)
    apply(cluster, namespace, "gw", with_pool(canary_spec(k=3), name="gateway-epp"))
    apply(cluster, namespace, "dropped", with_pool(spec(replicas=1)))
    good = wait_ready(cluster, namespace, "gw")["status"]["configHash"]
    obj = wait_resource(cluster, namespace, "gw", "InferencePool=True", pooled)
    assert obj["status"]["inferencePool"] == {"name": "gw"}
    assert condition(obj, "InferencePool")["reason"] == "Applied"

    pool = pool_of(cluster, namespace, "gw")
    assert pool is not None
    (owner,) = pool["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "SpeculativeInference",
        "gw",
        obj["metadata"]["uid"],
        True,
    )
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "gateway-epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    managers = {m["manager"] for m in pool["metadata"]["managedFields"]}
    assert managers == {"specinfer-operator"}, "server-side applied under the operator's field manager"

    # Every field the operator may write is in the real schema: strict validation refuses an unknown one, which
    # the operator's own apply would see silently pruned.
    variants = [
        cr(with_pool(spec()), name="a", namespace=namespace, uid="u"),
        cr(with_pool(group(), kind="Gateway", group="gateway.example.com", failureMode="FailOpen"), name="b"),
    ]
    rendered = [inference_pool(c) for c in variants]
    for each in rendered:
        assert each is not None
        each["metadata"].pop("ownerReferences", None)  # no such owner here; the uid is checked by the apply above
        each["metadata"]["namespace"] = namespace
    strict = ("apply", "--dry-run=server", "--validate=strict", "--server-side", "-f", "-")
    dry_run = cluster.kubectl(*strict, stdin=yaml.safe_dump_all(rendered), check=False)
    assert dry_run.returncode == 0, dry_run.stderr

    # A canary beside the stable pods: the pool reaches both, as the Service does.
    apply(cluster, namespace, "gw", with_pool(canary_spec(k=4), name="gateway-epp"))
    obj = wait_resource(cluster, namespace, "gw", "STATUS Canary", lambda o: "canary" in o["status"].get("rollout", {}))
    new = obj["status"]["rollout"]["canary"]["configHash"]
    wait_until("one pod of each configuration", lambda: hashes(cluster, namespace, "gw") == sorted([good, new]))
    selector = label_selector(pool["spec"]["selector"]["matchLabels"])
    selected = cluster.get("pods", "-n", namespace, "-l", selector)["items"]
    assert {p["metadata"]["name"] for p in selected} == {p["metadata"]["name"] for p in pods(cluster, namespace, "gw")}
    assert sorted(p["metadata"]["labels"].get(TRACK, "stable") for p in selected) == ["canary", "stable"]
    assert condition(resource(cluster, namespace, "gw"), "InferencePool")["status"] == "True"

    # A spec that drops the pool deletes it; deleting the resource takes its pool with it.
    wait_resource(cluster, namespace, "dropped", "InferencePool=True", pooled)
    apply(cluster, namespace, "dropped", spec(replicas=1))
    obj = wait_resource(cluster, namespace, "dropped", "no InferencePool", lambda o: not condition(o, "InferencePool"))
    assert "inferencePool" not in obj["status"]
    wait_until("the dropped pool to be deleted", lambda: pool_of(cluster, namespace, "dropped") is None)
    cluster.kubectl("delete", "specinference", "-n", namespace, "gw")
    wait_until("the pool to be collected with its resource", lambda: pool_of(cluster, namespace, "gw") is None)


def test_without_the_crd_the_resource_serves_and_gets_its_pool_once_installed(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    uninstall(cluster)
    apply(cluster, namespace, "early", with_pool(spec(replicas=1)))
    obj = wait_ready(cluster, namespace, "early")
    assert obj["status"]["ready"] == "1/1", "the Deployment does not wait for the pool"
    said = condition(obj, "InferencePool")
    assert (said["status"], said["reason"]) == ("False", "CRDMissing")
    assert "install the Gateway API Inference Extension's CRDs" in said["message"], said["message"]
    assert condition(obj, "ConfigValid")["status"] == "True"
    assert condition(obj, "Degraded")["status"] == "False"
    assert "inferencePool" not in obj["status"]
    wait_until("the Warning event", lambda: "Warning" in events(cluster, namespace, "CRDMissing"))

    install(cluster)
    obj = wait_resource(cluster, namespace, "early", "InferencePool=True once the CRD is there", pooled, timeout=90)
    assert obj["status"]["inferencePool"] == {"name": "early"}
    pool = pool_of(cluster, namespace, "early")
    assert pool is not None
    assert pool["spec"]["endpointPickerRef"]["name"] == "early-epp"
    assert obj["metadata"]["generation"] == 1, "no edit of the spec was needed"
