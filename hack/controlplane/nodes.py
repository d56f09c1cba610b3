"""The simulated Ascend NPU nodes and kwok, which plays their kubelets: the Node objects (labels, NPU
resources, a loopback pod CIDR each), keeping them as asked on the local cluster, and what a restarted
kwok needs done first. Shared by `up` (the local cluster) and `fake-nodes` (another cluster).
"""

import concurrent.futures
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeAlias

from .console import die, log
from .kubeapi import Api, JsonObject
from .layout import HACK_DIR, VERSIONS, StateDir, binpath

# Pod IPs are loopback addresses, so a real process bound to a simulated pod's IP (127.101.0.5:8000)
# is reachable at that IP from this machine (Linux routes all of 127.0.0.0/8 to lo). Fake node i gets
# spec.podCIDR 127.(100+i).0.0/16; kwok hands out IPs from it (base+1, base+2, ... reusing released
# ones, see kwok v0.8.0 pkg/kwok/controllers/utils.go ipPool). The ranges stay clear of 127.0.0.0/16,
# where every component listens. POD_CIDR is kwok's --cidr, used only for a fake node without
# spec.podCIDR (e.g. one created by hand).
POD_CIDR = "127.99.0.0/16"
# `fake-nodes` (another cluster, e.g. kind) leaves spec.podCIDR to that cluster: a controller-manager with
# --allocate-node-cidrs (kind's) refuses to start while a node has a pod CIDR outside its --cluster-cidr.
OTHER_CLUSTER_POD_CIDR = "10.244.0.0/16"
NODE_CIDR_FIRST = 100  # second octet of node 0's range
MAX_NODES = 256 - NODE_CIDR_FIRST  # 127.100.0.0/16 .. 127.255.0.0/16
NODE_PREFIX = "ascend-node-"
FAKE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
OWNER_LABEL = ("specinfer.io/fake-node", "true")
NPU_RESOURCE = "huawei.com/Ascend910"
CPU_PER_NPU, MEMORY_GIB_PER_NPU, DISK_GIB_PER_NPU = 24, 192, 384

# How before_kwok_start reaches a cluster: over an Api (the local one) or kubectl (another one).
Get: TypeAlias = Callable[[str], tuple[int | None, JsonObject]]  # path -> (status, body)
Delete: TypeAlias = Callable[[str], object]  # path
PatchPodStatus: TypeAlias = Callable[[str, str, JsonObject], object]  # namespace, name, strategic-merge patch


def kwok_argv(state: StateDir, kubeconfig: str, port: int, cidr: str) -> list[str]:
    """kwok simulating the kubelet of every node annotated as fake, against any cluster."""
    stages = state.path("kwok-stages.yaml")
    shutil.copyfile(os.path.join(HACK_DIR, "kwok-stages.yaml"), stages)
    return [
        binpath("kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE_ANNOTATION[0]}={FAKE_ANNOTATION[1]}",
        f"--server-address=127.0.0.1:{port}",
        f"--node-port={port}",
        "--node-ip=127.0.0.1",
        f"--cidr={cidr}",
        "--node-lease-duration-seconds=40",
    ]


def node_labels(name: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "arm64",
        "type": "kwok",
        OWNER_LABEL[0]: OWNER_LABEL[1],
        "node.kubernetes.io/instance-type": "atlas-800t-a2",
        # Labels the Ascend device plugin / MindCluster put on Atlas 800T A2 (910B) servers.
        "accelerator": "huawei-Ascend910",
        "accelerator-type": "module-910b-8",
        "host-arch": "huawei-arm",
        "node.kubernetes.io/npu.chip.name": "910B3",
        "workerselector": "dls-worker-node",
    }


def gibibytes(n: int) -> str:
    """n GiB as the API server writes it back (the largest whole unit)."""
    return f"{n // 1024}Ti" if n % 1024 == 0 else f"{n}Gi"


def node_resources(npus: int) -> dict[str, str]:
    """What an Atlas 800 A2 node offers for each of its NPUs (8 of them: 192 cores, 1.5 TiB of memory, 3 TiB of
    disk for the kubelet), so that the engine pods, sized per NPU, fit nodes of any NPU count as they would."""
    return {
        "cpu": str(CPU_PER_NPU * npus),
        "memory": gibibytes(MEMORY_GIB_PER_NPU * npus),
        "pods": "110",
        "ephemeral-storage": gibibytes(DISK_GIB_PER_NPU * npus),
        NPU_RESOURCE: str(npus),
    }


def node_pod_cidr(i: int) -> str:
    return f"127.{NODE_CIDR_FIRST + i}.0.0/16"


def node_pod_cidrs(node: JsonObject) -> list[str]:
    spec = node.get("spec") or {}
    cidrs: list[str] = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    return cidrs


def node_object(i: int, npus: int, pod_cidr: str | None = None) -> JsonObject:
    name = f"{NODE_PREFIX}{i}"
    res = node_resources(npus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name),
            "annotations": {FAKE_ANNOTATION[0]: FAKE_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
        },
        # kwok takes the pod IPs from here (see POD_CIDR); immutable once set.
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]} if pod_cidr else {},
        "status": {
            "capacity": res,
            "allocatable": dict(res),
            "addresses": [
                {"type": "InternalIP", "address": f"10.10.0.{i + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "arm64",
                "operatingSystem": "linux",
                "kubeletVersion": VERSIONS["KUBERNETES_VERSION"],
                "kubeProxyVersion": VERSIONS["KUBERNETES_VERSION"],
                "containerRuntimeVersion": f"kwok-{VERSIONS['KWOK_VERSION']}",
                "kernelVersion": "5.10.0-kwok",
                "osImage": "EulerOS 2.0 (SP10) [kwok fake]",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def owned_nodes_path() -> str:
    return f"/api/v1/nodes?labelSelector={OWNER_LABEL[0]}%3D{OWNER_LABEL[1]}"


def ensure_nodes(api: Api, n: int, npus: int, first: int = 0) -> list[str]:
    """Fake nodes first..first+n-1 with npus each (surplus ones deleted, wrong pod CIDRs recreated); their names."""
    want = {f"{NODE_PREFIX}{i}": i for i in range(first, first + n)}
    code, lst = api.req("GET", owned_nodes_path())
    if code != 200:
        die(f"listing nodes failed: {code} {lst}")
    have: dict[str, JsonObject] = {it["metadata"]["name"]: it for it in lst.get("items", [])}
    for name in have:
        if name not in want:
            log(f"deleting surplus fake node {name}")
            api.req("DELETE", f"/api/v1/nodes/{name}")
    for name, i in want.items():
        obj = node_object(i, npus, node_pod_cidr(i))
        if name in have and node_pod_cidrs(have[name]) != obj["spec"]["podCIDRs"]:
            recreate_node(api, have.pop(name), obj)
        if name not in have:
            code, body = api.req("POST", "/api/v1/nodes", obj)
            if code not in (200, 201, 409):
                die(f"creating node {name} failed: {code} {body}")
        else:
            cur = have[name].get("status", {}).get("allocatable", {})
            if cur != obj["status"]["allocatable"]:
                patch = {"status": {"capacity": obj["status"]["capacity"], "allocatable": obj["status"]["allocatable"]}}
                code, body = api.req("PATCH", f"/api/v1/nodes/{name}/status", patch, "application/merge-patch+json")
                if code != 200:
                    die(f"patching node {name} status failed: {code} {body}")
    return list(want)


def recreate_node(api: Api, node: JsonObject, obj: JsonObject) -> None:
    """A fake node from an older hack/cluster (or edited by hand) with another pod CIDR: spec.podCIDR is
    immutable, so delete and recreate it, unless pods are bound to it (they would lose their node)."""
    name, have, want = node["metadata"]["name"], node_pod_cidrs(node), obj["spec"]["podCIDRs"]
    code, pods = api.req("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}")
    if code != 200:
        die(f"listing pods on node {name} failed: {code} {pods}")
    bound = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods.get("items", [])]
    if bound:
        die(
            f"fake node {name} has pod CIDR {','.join(have) or '(none)'}, not {','.join(want)}; spec.podCIDR is "
            f"immutable, so the node must be recreated, but {len(bound)} pod(s) are bound to it "
            f"({', '.join(bound[:5])}{', ...' if len(bound) > 5 else ''}). Delete them (or run "
            "`hack/cluster down`) and rerun `hack/cluster up`."
        )
    log(f"recreating fake node {name}: pod CIDR {','.join(have) or '(none)'} -> {','.join(want)}")
    code, body = api.req("DELETE", f"/api/v1/nodes/{name}")
    if code not in (200, 202, 404):
        die(f"deleting node {name} failed: {code} {body}")
    deadline = time.time() + 30
    while api.req("GET", f"/api/v1/nodes/{name}")[0] != 404:
        if time.time() > deadline:
            die(f"node {name} still exists 30s after it was deleted")
        time.sleep(0.2)


def before_kwok_start(get: Get, delete: Delete, patch_pod_status: PatchPodStatus) -> None:
    """Make a kwok (re)started on a cluster with live fake pods start clean. get(path) -> (code, body),
    delete(path), patch_pod_status(namespace, name, strategic-merge patch).

    kwok keeps its pod IP pools in memory and learns nothing from existing pods: it would hand their IPs
    out again, and put them back in the pool when those pods go, so live pods would share IPs. So clear
    the IPs of pods on fake nodes (running ones back to Pending/not Ready: kwok's pod-ready stage gives
    them fresh IPs). And delete the fake nodes' Leases, held by the dead kwok, which the new one would
    otherwise only take over when they expire (40 s), leaving the nodes and their pods unserved."""
    code, nodes = get("/api/v1/nodes")
    code2, pods = get("/api/v1/pods")
    if code != 200 or code2 != 200:
        return
    fake = {
        n["metadata"]["name"]
        for n in nodes.get("items", [])
        if (n["metadata"].get("annotations") or {}).get(FAKE_ANNOTATION[0]) == FAKE_ANNOTATION[1]
    }
    for name in sorted(fake):
        delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
    held = [
        p
        for p in pods.get("items", [])
        if p["spec"].get("nodeName") in fake
        and not p["spec"].get("hostNetwork")
        and (p.get("status") or {}).get("podIP")
    ]

    def clear(p: JsonObject) -> None:
        status: dict[str, Any] = {"podIP": None, "podIPs": None}
        if p["status"].get("phase") not in ("Succeeded", "Failed"):  # terminal phases are final
            status.update(
                phase="Pending",
                conditions=[{"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}],
            )
        patch_pod_status(p["metadata"]["namespace"], p["metadata"]["name"], {"status": status})

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(clear, held))
    if held:
        log(
            f"cleared the pod IPs of {len(held)} pod(s) on fake nodes: kwok keeps its IP pools in memory, "
            "so a restarted kwok would hand them out again; it now gives those pods fresh, distinct IPs"
        )


def api_ops(api: Api) -> tuple[Get, Delete, PatchPodStatus]:
    """before_kwok_start's get, delete and patch_pod_status over an Api."""

    def get(path: str) -> tuple[int | None, JsonObject]:
        return api.req("GET", path)

    def delete(path: str) -> object:
        return api.req("DELETE", path)

    def patch_pod_status(ns: str, name: str, body: JsonObject) -> object:
        path = f"/api/v1/namespaces/{ns}/pods/{name}/status"
        return api.req("PATCH", path, body, "application/strategic-merge-patch+json")

    return get, delete, patch_pod_status


def kubectl_ops(kubectl: list[str]) -> tuple[Get, Delete, PatchPodStatus]:
    """before_kwok_start's get, delete and patch_pod_status with kubectl (argv up to the verb)."""

    def get(path: str) -> tuple[int | None, JsonObject]:
        r = subprocess.run([*kubectl, "get", "--raw", path], capture_output=True, text=True)
        return (200, json.loads(r.stdout)) if r.returncode == 0 else (None, {})

    def delete(path: str) -> object:
        return subprocess.run([*kubectl, "delete", "--raw", path], capture_output=True)

    def patch_pod_status(ns: str, name: str, body: JsonObject) -> object:
        patch = ["--subresource=status", "--type=strategic", "-p", json.dumps(body)]
        return subprocess.run([*kubectl, "patch", "pod", "-n", ns, name, *patch], capture_output=True)

    return get, delete, patch_pod_status


def nodes_ready(api: Api, names: list[str]) -> bool:
    code, lst = api.req("GET", owned_nodes_path())
    if code != 200:
        return False
    ready = set()
    for it in lst.get("items", []):
        for c in it.get("status", {}).get("conditions", []) or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                ready.add(it["metadata"]["name"])
    return set(names) <= ready
