"""The operator against a real control plane: reconcile, rollouts, refusals, drift, GC, resilience."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import CLUSTER, NODES, NPUS_PER_NODE, ROOT, Operator, admission_policy

NPU = "huawei.com/Ascend910"


def spec(k: int = 3, tensor: int = 1, replicas: int = 2) -> dict[str, Any]:
    return {
        "model": {"name": "meta-llama/Meta-Llama-3.1-8B-Instruct"},
        "parallelism": {"tensor": tensor},
        "speculative": {"method": "eagle3", "numSpeculativeTokens": k, "draftModel": {"name": "org/eagle3"}},
        "graph": {"mode": "FULL_DECODE_ONLY", "captureSizes": [(k + 1) * n for n in (1, 2, 3, 4)]},
        "replicas": replicas,
    }


def apply(cluster: Cluster, namespace: str, name: str, body: dict[str, Any], check: bool = True) -> str:
    manifest = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "metadata": {"name": name}}
    result = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump({**manifest, "spec": body}), check=check
    )
    return result.stderr


def resource(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.get("specinference", "-n", namespace, name)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def wait_resource(
    cluster: Cluster,
    namespace: str,
    name: str,
    what: str,
    accept: Callable[[dict[str, Any]], bool],
    timeout: float = 60,
) -> dict[str, Any]:
    """The resource, once `accept` holds for it; a timeout shows its last status."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        obj = resource(cluster, namespace, name)
        last["status"] = obj.get("status")
        return obj if accept(obj) else None

    try:
        found: dict[str, Any] = wait_until(what, check, timeout=timeout)
    except AssertionError as error:
        raise AssertionError(f"{error}; the last status: {json.dumps(last.get('status'), indent=1)}") from None
    return found


def wait_reason(
    cluster: Cluster, namespace: str, name: str, kind: str, reason: str, timeout: float = 60
) -> dict[str, Any]:
    """The resource, once its condition `kind` has `reason`."""
    return wait_resource(
        cluster, namespace, name, f"{kind} {reason}", lambda o: condition(o, kind).get("reason") == reason, timeout
    )


def wait_ready(cluster: Cluster, namespace: str, name: str, timeout: float = 90) -> dict[str, Any]:
    """Ready=True for the current generation, with every pod on the current configuration."""

    def ready(obj: dict[str, Any]) -> bool:
        current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
        return current and condition(obj, "Ready").get("status") == "True"

    return wait_resource(cluster, namespace, name, f"{name} to be Ready", ready, timeout)


def serving(cluster: Cluster, namespace: str, name: str) -> tuple[dict[str, Any], set[str]]:
    """The Deployment and the uids of its pods: what a refused spec must leave as it is."""
    return cluster.get("deployment", "-n", namespace, name), {
        p["metadata"]["uid"] for p in pods(cluster, namespace, name)
    }


def engine_args(pod: dict[str, Any]) -> str:
    return " ".join(pod["spec"]["containers"][0]["args"])


@pytest.mark.usefixtures("operator")
def test_create_runs_pods_on_fake_ascend_nodes_and_reports_ready(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "llama", spec(tensor=4))
    obj = wait_ready(cluster, namespace, "llama")
    status = obj["status"]
    assert status["ready"] == "2/2"
    rendered = {k: v for k, v in status["speculation"].items() if k != "observed"}  # simulated pods answer no scrape
    assert rendered == {
        "method": "eagle3",
        "numSpeculativeTokens": 3,
        "captureSizes": [4, 8, 12, 16],
        "adaptivity": "StaticK",
        "image": "registry.example.com/specinfer-runtime:test",  # the operator's --runtime-image
    }
    assert status["endpoint"] == f"http://llama.{namespace}.svc:8000"
    assert condition(obj, "ConfigValid")["status"] == "True"
    running = pods(cluster, namespace, "llama")
    assert [p["status"]["phase"] for p in running] == ["Running", "Running"]
    for pod in running:
        assert pod["spec"]["nodeName"].startswith("ascend-node-")
        assert pod["spec"]["containers"][0]["resources"]["limits"][NPU] == "4"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    # kubectl wait works as users expect
    cluster.kubectl("wait", "--for=condition=Ready", "specinference/llama", "-n", namespace, "--timeout=10s")
    table = cluster.kubectl("get", "specinference", "-n", namespace).stdout.splitlines()[1].split()
    assert table[:5] == ["llama", "eagle3", "3", "2/2", "Ready"]
    events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=llama").stdout
    assert "RolloutComplete" in events


@pytest.mark.usefixtures("operator")
def test_changing_k_rolls_out_new_pods(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "roll", spec(k=3))
    before = wait_ready(cluster, namespace, "roll")
    old = {p["metadata"]["name"] for p in pods(cluster, namespace, "roll")}
    apply(cluster, namespace, "roll", spec(k=4))
    after = wait_ready(cluster, namespace, "roll")
    assert after["status"]["configHash"] != before["status"]["configHash"]
    assert after["status"]["speculation"]["numSpeculativeTokens"] == 4
    assert after["status"]["speculation"]["captureSizes"] == [5, 10, 15, 20]
    new = pods(cluster, namespace, "roll")
    assert {p["metadata"]["name"] for p in new}.isdisjoint(old)
    for pod in new:
        assert '"num_speculative_tokens":4' in engine_args(pod)
        assert '"cudagraph_capture_sizes":[5,10,15,20]' in engine_args(pod)
    deployment = cluster.get("deployment", "-n", namespace, "roll")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    config_maps = cluster.get("configmaps", "-n", namespace, "-l", "app.kubernetes.io/instance=roll")["items"]
    assert {c["metadata"]["name"] for c in config_maps} >= {f"roll-engine-{after['status']['configHash']}"}


@pytest.mark.usefixtures("operator")
def test_invalid_change_is_refused_by_the_api_server(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "guarded", spec(k=3))
    wait_ready(cluster, namespace, "guarded")
    bad = spec(k=3)
    bad["graph"]["captureSizes"] = [5, 10]
    error = apply(cluster, namespace, "guarded", bad, check=False)
    assert "every capture size must be a multiple of K+1 = 4" in error
    assert resource(cluster, namespace, "guarded")["spec"]["graph"]["captureSizes"] == [4, 8, 12, 16]


@pytest.mark.usefixtures("operator")
def test_change_the_cluster_cannot_run_leaves_the_deployment_untouched(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "keep", spec(tensor=2))
    wait_ready(cluster, namespace, "keep")
    before, serving_pods = serving(cluster, namespace, "keep")
    apply(cluster, namespace, "keep", spec(tensor=16))

    obj = wait_resource(
        cluster,
        namespace,
        "keep",
        "ConfigValid=False",
        lambda o: condition(o, "ConfigValid").get("status") == "False",
        30,
    )
    assert condition(obj, "ConfigValid")["reason"] == "InsufficientNPUCapacity"
    assert (
        "each pod needs 16 huawei.com/Ascend910, but the largest node has 8" in condition(obj, "ConfigValid")["message"]
    )
    assert condition(obj, "Degraded")["reason"] == "InvalidConfig"
    assert obj["status"]["speculation"]["numSpeculativeTokens"] == 3
    time.sleep(2)
    after, now_serving = serving(cluster, namespace, "keep")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"] == before["spec"]
    assert now_serving == serving_pods
    events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "type=Warning").stdout
    assert "InsufficientNPUCapacity" in events


def registry_policy(namespace: str) -> str:
    """A cluster policy of the kind platforms run: Deployments in this namespace may only pull from
    registry.example.com."""
    rule = {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["deployments"],
    }
    return yaml.safe_dump_all(
        admission_policy(
            f"registry-only-{namespace}",
            namespace,
            rule,
            "object.spec.template.spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
            "images must come from registry.example.com",
        )
    )


@pytest.mark.usefixtures("operator")
def test_a_child_the_api_server_refuses_leaves_the_deployment_untouched(cluster: Cluster, namespace: str) -> None:
    """The spec is valid but a cluster policy refuses the Deployment: ConfigValid says so with the API server's
    words, nothing serving changes, and once the policy is gone the operator applies it by itself."""
    apply(cluster, namespace, "policed", spec(k=3))
    wait_ready(cluster, namespace, "policed")
    before, serving_pods = serving(cluster, namespace, "policed")
    policy = enforce_registry_policy(cluster, namespace)
    try:
        moved = {**spec(k=4), "runtime": {"image": "elsewhere.example.org/runtime:2"}}
        apply(cluster, namespace, "policed", moved)
        obj = wait_resource(
            cluster,
            namespace,
            "policed",
            "ConfigValid=False",
            lambda o: condition(o, "ConfigValid").get("reason") == "ApplyRejected",
            30,
        )
        message = condition(obj, "ConfigValid")["message"]
        assert message.startswith("the API server refused the Deployment policed: ")
        assert "images must come from registry.example.com" in message
        assert condition(obj, "Degraded")["status"] == "True"
        assert obj["status"]["speculation"]["numSpeculativeTokens"] == 3  # what still serves
        after, now_serving = serving(cluster, namespace, "policed")
        assert after["spec"] == before["spec"]
        assert now_serving == serving_pods
        config_maps = cluster.get("configmaps", "-n", namespace, "-l", "app.kubernetes.io/instance=policed")["items"]
        assert [c["metadata"]["name"] for c in config_maps] == [f"policed-engine-{before_hash(before)}"]
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait", stdin=policy)
    # The operator retries such a resource every 30 seconds: the cause was outside the spec.
    recovered = wait_ready(cluster, namespace, "policed", timeout=90)
    assert recovered["status"]["speculation"]["numSpeculativeTokens"] == 4
    assert condition(recovered, "ConfigValid")["status"] == "True"


def enforce_registry_policy(cluster: Cluster, namespace: str) -> str:
    """Apply the registry policy and wait until the API server enforces it; its manifest, to delete."""
    policy = registry_policy(namespace)
    cluster.kubectl("apply", "-f", "-", stdin=policy)
    probe = ("create", "deployment", "probe", "-n", namespace, "--image=elsewhere/x", "--dry-run=server")
    wait_until("the registry policy", lambda: "registry.example.com" in cluster.kubectl(*probe, check=False).stderr)
    return policy


@pytest.mark.usefixtures("operator")
def test_a_first_apply_the_api_server_refuses_is_reported(cluster: Cluster, namespace: str) -> None:
    """Nothing serves yet, so the children are applied without a dry run first: a refusal is reported all
    the same, with the API server's words, and no Deployment exists."""
    policy = enforce_registry_policy(cluster, namespace)
    try:
        apply(cluster, namespace, "first", {**spec(k=3), "runtime": {"image": "elsewhere.example.org/runtime:2"}})
        obj = wait_resource(
            cluster,
            namespace,
            "first",
            "ConfigValid=False",
            lambda o: condition(o, "ConfigValid").get("reason") == "ApplyRejected",
            30,
        )
        message = condition(obj, "ConfigValid")["message"]
        assert message.startswith("the API server refused the Deployment first: "), message
        assert "images must come from registry.example.com" in message
        assert "configHash" not in obj["status"]
        assert cluster.kubectl("get", "deployment", "first", "-n", namespace, check=False).returncode != 0
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait", stdin=policy)


def before_hash(deployment: dict[str, Any]) -> str:
    hash_: str = deployment["spec"]["template"]["metadata"]["annotations"]["specinfer.io/config-hash"]
    return hash_


@pytest.mark.usefixtures("operator")
def test_not_enough_free_npus_is_reported_as_unschedulable(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "greedy", spec(tensor=8, replicas=3))

    def unschedulable() -> dict[str, Any] | None:
        ready = condition(resource(cluster, namespace, "greedy"), "Ready")
        return ready if ready.get("reason") == "Unschedulable" else None

    ready = wait_until("Ready reason Unschedulable", unschedulable, timeout=60)
    assert ready["message"] == "0/2 nodes have 8 free huawei.com/Ascend910"
    # The two pods that fit become ready on their own time, possibly after the third is reported.
    counted = wait_resource(
        cluster, namespace, "greedy", "2 pods ready", lambda o: o["status"].get("ready") == "2/3", timeout=60
    )
    assert counted["status"]["ready"] == "2/3"
    table = cluster.kubectl("get", "specinference", "-n", namespace).stdout
    assert "Unschedulable" in table


@pytest.mark.usefixtures("operator")
def test_manual_edits_of_the_deployment_are_reverted(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "drift", spec())
    wait_ready(cluster, namespace, "drift")
    patch = [
        {"op": "replace", "path": "/spec/replicas", "value": 4},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args/2", "value": "/tampered"},
    ]
    cluster.kubectl("patch", "deployment", "drift", "-n", namespace, "--type=json", "-p", json.dumps(patch))

    def restored() -> bool:
        deployment = cluster.get("deployment", "-n", namespace, "drift")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return bool(deployment["spec"]["replicas"] == 2 and args[2] == "meta-llama/Meta-Llama-3.1-8B-Instruct")

    wait_until("the operator to revert the edit", restored, timeout=30)
    wait_ready(cluster, namespace, "drift")


@pytest.mark.usefixtures("operator")
def test_delete_garbage_collects_every_child(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, "gone", spec())
    wait_ready(cluster, namespace, "gone")
    cluster.kubectl("delete", "specinference", "gone", "-n", namespace, "--wait=true")

    def children() -> list[str]:
        out = cluster.kubectl(
            "get", "deployments,replicasets,pods,services,configmaps", "-n", namespace,
            "-l", "app.kubernetes.io/instance=gone", "-o", "name",
        ).stdout  # fmt: skip
        return out.split()

    wait_until("the children to be garbage-collected", lambda: children() == [], timeout=60)


def test_operator_killed_mid_rollout_converges_after_restart(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    apply(cluster, namespace, "phoenix", spec(k=3, replicas=2))
    wait_ready(cluster, namespace, "phoenix")
    apply(cluster, namespace, "phoenix", spec(k=5, replicas=2))
    wait_until(
        "the rollout to start",
        lambda: resource(cluster, namespace, "phoenix")["status"]["observedGeneration"] == 2,
        timeout=30,
    )
    operator.kill()
    apply(cluster, namespace, "phoenix", spec(k=6, replicas=2))  # a change the dead operator never saw
    operator.start()
    obj = wait_ready(cluster, namespace, "phoenix")
    assert obj["status"]["speculation"]["numSpeculativeTokens"] == 6
    assert all('"num_speculative_tokens":6' in engine_args(p) for p in pods(cluster, namespace, "phoenix"))


def _local_apiserver_pid() -> int | None:
    if os.environ.get("SPECINFER_E2E_KUBECONFIG"):
        return None
    env = subprocess.run([str(CLUSTER), "env"], capture_output=True, text=True, check=True).stdout
    kubeconfig = next(line.split("=", 1)[1] for line in env.splitlines() if "KUBECONFIG" in line)
    state = os.path.dirname(kubeconfig.strip("'\""))
    with open(os.path.join(state, "run", "kube-apiserver.pid")) as pid:
        return int(pid.read().strip())


@pytest.mark.usefixtures("operator")
def test_operator_recovers_when_the_api_server_comes_back(cluster: Cluster, namespace: str) -> None:
    pid = _local_apiserver_pid()
    if pid is None:
        pytest.skip("stops the API server of the local control plane only")
    apply(cluster, namespace, "outage", spec(k=3))
    wait_ready(cluster, namespace, "outage")
    os.kill(pid, signal.SIGKILL)
    time.sleep(5)
    subprocess.run(
        [str(CLUSTER), "up", "--nodes", str(NODES), "--npus", str(NPUS_PER_NODE)], check=True, capture_output=True
    )
    apply(cluster, namespace, "outage", spec(k=4))
    obj = wait_ready(cluster, namespace, "outage", timeout=120)
    assert obj["status"]["speculation"]["numSpeculativeTokens"] == 4


def test_operator_metrics(cluster: Cluster, namespace: str, operator: Operator) -> None:
    apply(cluster, namespace, "counted", spec())
    wait_ready(cluster, namespace, "counted")
    text = operator.metrics()
    assert 'specinfer_reconciles_total{result="applied"}' in text
    assert "specinfer_reconcile_duration_seconds_bucket" in text
    assert 'specinfer_resources{condition="Ready",status="True"}' in text
    assert f'specinfer_resource_condition{{condition="Ready",name="counted",namespace="{namespace}"}} 1.0' in text
    assert "specinfer_rollouts_started_total" in text


def test_two_replicas_with_leader_election_take_turns(
    cluster: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Only the Lease holder reconciles; when it dies, the standby takes over."""
    flags = ("--leader-election", "--leader-election-namespace", namespace, "--namespace", namespace)
    logs = tmp_path_factory.mktemp("replicas")
    first, second = Operator(cluster.kubeconfig, logs, *flags), Operator(cluster.kubeconfig, logs, *flags)
    first.start()
    second.start()
    try:
        lease = cluster.get("lease", "-n", namespace, "specinfer-operator")
        assert lease["spec"]["holderIdentity"].endswith(f"_{first.process.pid if first.process else 0}")
        assert wait_until("the standby to answer liveness probes", second.health) == "standby\n"
        apply(cluster, namespace, "ha", spec(k=3))
        wait_ready(cluster, namespace, "ha")
        assert "specinfer_reconciles_total" in first.metrics()
        assert "specinfer_reconciles_total{" not in second.metrics(), "the standby must not reconcile"
        first.kill()
        wait_until("the standby to lead", lambda: "standby" not in second.health() and second.health(), timeout=60)
        apply(cluster, namespace, "ha", spec(k=4))
        obj = wait_ready(cluster, namespace, "ha", timeout=90)
        assert obj["status"]["speculation"]["numSpeculativeTokens"] == 4
        holder = cluster.get("lease", "-n", namespace, "specinfer-operator")["spec"]["holderIdentity"]
        assert holder.endswith(f"_{second.process.pid if second.process else 0}")
    finally:
        first.stop()
        second.stop()


def bind_claim(cluster: Cluster, namespace: str, claim: str, volume: str, size: str, access: str) -> None:
    """A PersistentVolumeClaim and the hostPath PersistentVolume bound to it (kwok mounts neither: a pod that
    names the claim only needs it bound to be scheduled)."""
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": [access],
            "storageClassName": "e2e",
            "hostPath": {"path": f"/data/{claim}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": [access], "storageClassName": "e2e", "resources": {"requests": {"storage": size}}},
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([pv, pvc]))


@pytest.mark.usefixtures("operator")
def test_writable_volume_example_reaches_ready(cluster: Cluster, namespace: str) -> None:
    """extract_hidden_states mounts a writable PVC: its rendered readOnly: false is omitted by the API
    server, which must not read as drift (the status once stayed at 0/1 forever)."""
    bind_claim(cluster, namespace, "eagle-training-data", f"{namespace}-hidden", "1Ti", "ReadWriteOnce")
    try:
        example = yaml.safe_load((ROOT / "examples" / "extract-hidden-states.yaml").read_text())
        apply(cluster, namespace, "hidden", example["spec"])
        obj = wait_ready(cluster, namespace, "hidden", timeout=60)
        speculation = obj["status"]["speculation"]
        assert (speculation["method"], speculation["numSpeculativeTokens"]) == ("extract_hidden_states", 1)
    finally:
        cluster.kubectl("delete", "pv", f"{namespace}-hidden", "--wait=false", check=False)
