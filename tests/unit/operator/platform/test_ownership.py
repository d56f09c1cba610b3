"""Which resource made a pod: the chains the operator's workloads make, and the template of the workload
that claims the pod; everything a pod writes about itself (labels, controller references) can be forged."""

from __future__ import annotations

import copy
from typing import Any, cast

from specinfer_operator.api.resource import API_VERSION, KIND
from specinfer_operator.platform.kube import Kube
from specinfer_operator.platform.ownership import Ownership, Runs

NS = "team-a"
ENGINE = {
    "name": "engine",
    "image": "registry.example.com/runtime:1",
    "command": ["specinfer-runtime", "--config", "/etc/specinfer/engine.json", "--"],
    "args": ["--port", "8000"],
    "env": [{"name": "HF_HOME", "value": "/var/cache/huggingface"}],
    "volumeMounts": [{"name": "engine-config", "mountPath": "/etc/specinfer", "readOnly": True}],
}
VOLUMES = [{"name": "engine-config", "configMap": {"name": "web-engine-abc", "defaultMode": 420}}]


def ref(kind: str, name: str, api_version: str = "apps/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{kind}-{name}", "controller": True}


def obj(kind: str, name: str, owner: dict[str, Any] | None, template: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{kind}-{name}", "ownerReferences": [owner] if owner else []}
    return {"kind": kind, "metadata": meta, "spec": {"template": template} if template else {}}


def template(labels: dict[str, str], engine: dict[str, Any] = ENGINE) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": {"containers": [engine], "volumes": VOLUMES}}


def pod(owner: dict[str, Any] | None, labels: dict[str, str], engine: dict[str, Any] = ENGINE) -> dict[str, Any]:
    found = obj("Pod", "p", owner)
    found["metadata"]["labels"] = labels
    found["spec"] = copy.deepcopy(template(labels, engine)["spec"])
    return found


SI = {"apiVersion": API_VERSION, "kind": KIND, "name": "web", "uid": "uid-web", "controller": True}
HASH = {"pod-template-hash": "6d8f9c"}


class Store:
    """The objects of one namespace, as the API server returns them, and how many reads were made."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["kind"].lower() + "s", o["metadata"]["name"]): o for o in objects}
        self.elsewhere: dict[str, Store] = {}  # other namespaces' objects, by namespace
        self.reads = 0

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if namespace != NS:
            return self.elsewhere[str(namespace)].objects.get((plural, name)) if namespace in self.elsewhere else None
        return self.objects.get((plural, name))


def ownership(store: Store, clock: list[float] | None = None) -> Ownership:
    now = clock if clock is not None else [0.0]
    return Ownership(cast(Kube, store), clock=lambda: now[0])


def engine_of(owners: Ownership, found: dict[str, Any]) -> str | None:
    """Whose figures the pod's are: its engine compared with its workload's template."""
    meta = found["metadata"]
    runs = Runs.of(meta.get("labels"), found["spec"])
    return owners.resource_of(NS, meta["ownerReferences"][0] if meta["ownerReferences"] else None, runs, engine=True)


def deployment_chain() -> Store:
    return Store(
        obj("Deployment", "web", SI, template({})),
        obj("ReplicaSet", "web-6d8f9c", ref("Deployment", "web"), template(HASH)),
    )


def test_a_pod_its_replicaset_made_is_the_resources() -> None:
    store = deployment_chain()
    owners = ownership(store)
    for check in (owners.pod_resource, lambda _, found: engine_of(owners, found)):
        assert check(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    reads = store.reads
    assert engine_of(owners, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    assert store.reads == reads  # a steady fleet costs no requests


def test_a_pod_naming_the_resource_itself_is_nobodys() -> None:
    owners = ownership(deployment_chain())
    assert owners.pod_resource(NS, pod(SI, HASH)) is None
    assert engine_of(owners, pod(SI, HASH)) is None


def test_a_pod_naming_the_deployment_directly_is_nobodys() -> None:
    owners = ownership(deployment_chain())
    assert owners.pod_resource(NS, pod(ref("Deployment", "web"), HASH)) is None
    assert engine_of(owners, pod(ref("Deployment", "web"), HASH)) is None


def test_a_pod_naming_the_real_replicaset_without_its_template_hash_is_nobodys() -> None:
    owners = ownership(deployment_chain())
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), {})) is None
    assert engine_of(owners, pod(ref("ReplicaSet", "web-6d8f9c"), {})) is None


def test_a_pod_naming_the_real_replicaset_with_another_engine_is_nobodys() -> None:
    owners = ownership(deployment_chain())
    for change in (
        {"image": "evil:1"},
        {"args": ["--port", "8000", "--x"]},
        {"env": [{"name": "PYTHONPATH", "value": "/x"}]},
    ):
        forged = pod(ref("ReplicaSet", "web-6d8f9c"), HASH, {**ENGINE, **change})
        assert engine_of(owners, forged) is None, change


def test_a_pod_whose_engine_mounts_another_volume_under_the_same_name_is_nobodys() -> None:
    forged = pod(ref("ReplicaSet", "web-6d8f9c"), HASH)
    forged["spec"]["volumes"] = [{"name": "engine-config", "configMap": {"name": "forged", "defaultMode": 420}}]
    assert engine_of(ownership(deployment_chain()), forged) is None


def test_kubernetes_own_additions_to_a_pod_do_not_count() -> None:
    token = {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    real = pod(ref("ReplicaSet", "web-6d8f9c"), HASH)
    real["spec"]["containers"][0]["volumeMounts"].append(token)
    real["spec"]["volumes"].append({"name": "kube-api-access-x", "projected": {"sources": []}})
    assert engine_of(ownership(deployment_chain()), real) == "uid-web"


def group_chain(engine: dict[str, Any] = ENGINE) -> Store:
    lws = ref("LeaderWorkerSet", "web-group", "leaderworkerset.x-k8s.io/v1")
    leader = pod(ref("StatefulSet", "web-group"), {}, {**engine, "env": [*ENGINE["env"], {"name": "LWS_GROUP_SIZE"}]})
    leader["metadata"].update(name="web-group-0", uid="uid-Pod-web-group-0")
    return Store(
        obj("LeaderWorkerSet", "web-group", SI),
        obj("StatefulSet", "web-group", lws, template({}, engine)),
        leader,
        obj("StatefulSet", "web-group-0", ref("Pod", "web-group-0", "v1"), template({}, engine)),
    )


def test_a_groups_leader_and_workers_are_the_resources() -> None:
    owners = ownership(group_chain())
    assert engine_of(owners, pod(ref("StatefulSet", "web-group"), {})) == "uid-web"
    worker = pod(
        ref("StatefulSet", "web-group-0"), {}, {**ENGINE, "env": [*ENGINE["env"], {"name": "LWS_WORKER_INDEX"}]}
    )
    assert engine_of(owners, worker) == "uid-web"
    assert owners.pod_resource(NS, worker) == "uid-web"


def test_a_statefulsets_new_template_is_read_again_after_a_while() -> None:
    store = group_chain()
    clock = [0.0]
    owners = ownership(store, clock)
    assert engine_of(owners, pod(ref("StatefulSet", "web-group"), {})) == "uid-web"
    newer = {**ENGINE, "image": "registry.example.com/runtime:2"}
    store.objects[("statefulsets", "web-group")]["spec"]["template"] = template({}, newer)
    assert engine_of(owners, pod(ref("StatefulSet", "web-group"), {}, newer)) is None  # read 0 s ago
    assert owners.pod_resource(NS, pod(ref("StatefulSet", "web-group"), {}, newer)) == "uid-web"  # counted
    clock[0] = 11.0
    assert engine_of(owners, pod(ref("StatefulSet", "web-group"), {}, newer)) == "uid-web"
    reads = store.reads
    assert engine_of(owners, pod(ref("StatefulSet", "web-group"), {})) is None  # the old template's pod
    assert engine_of(owners, pod(ref("StatefulSet", "web-group"), {})) is None
    assert store.reads == reads  # a forged or old pod makes at most one read per template every 10 s
    assert owners.pod_resource(NS, pod(ref("StatefulSet", "web-group"), {})) == "uid-web"  # still counted


def test_a_deleted_resources_chains_are_forgotten() -> None:
    store = deployment_chain()
    owners = ownership(store)
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    reads = store.reads
    owners.forget(NS, "uid-web")
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    assert store.reads == reads + 2  # its ReplicaSet and Deployment were read again: nothing was kept of them


def missing(kind: str, name: str, like: str) -> dict[str, Any]:
    """A controller reference naming the uid of `like` under a name nothing has."""
    return {**ref(kind, name), "uid": ref(kind, like)["uid"]}


def test_a_pod_elsewhere_naming_a_victims_replicaset_uid_leaves_the_victims_pods_counted() -> None:
    store = deployment_chain()
    store.elsewhere["team-b"] = Store()
    owners = ownership(store)
    forged = pod(missing("ReplicaSet", "gone", like="web-6d8f9c"), HASH)
    forged["metadata"]["namespace"] = "team-b"
    assert owners.pod_resource("team-b", forged) is None
    assert engine_of(owners, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"


def test_a_dead_end_under_a_missing_name_does_not_hide_the_real_replicaset_in_its_namespace() -> None:
    store = deployment_chain()
    owners = ownership(store)
    forged = pod(missing("ReplicaSet", "gone", like="web-6d8f9c"), HASH)
    assert owners.pod_resource(NS, forged) is None
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    reads = store.reads
    for _ in range(3):  # the real link is kept: the forged reference is refused without a read
        assert owners.pod_resource(NS, forged) is None
        assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    assert store.reads == reads


def test_one_namespaces_chains_are_not_forgotten_with_another_namespaces_resource() -> None:
    store = deployment_chain()
    owners = ownership(store)
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    reads = store.reads
    owners.forget("team-b", "uid-web")  # a resource of that uid elsewhere (a forged reference's) was deleted
    assert owners.pod_resource(NS, pod(ref("ReplicaSet", "web-6d8f9c"), HASH)) == "uid-web"
    assert store.reads == reads
