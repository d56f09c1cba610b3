"""What the operator keeps of the pods its watch brings, on the real API server: anyone who may create pods
(or a ReplicaSet) may give them the operator's labels, as large as the API server accepts, and a controller
reference naming any uid. Neither may grow the operator's memory past its documented bound, nor make one
namespace's objects decide whether another namespace's pods are their resource's."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from hack.hostile import Server, engine
from hack.kubeclient import Cluster, wait_until
from specinfer_operator.api.labels import INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGER
from specinfer_operator.controller.pods import MAX_KEPT_BYTES
from tests.e2e.conftest import Operator
from tests.e2e.test_forged_pods import figures, made_by_workload
from tests.e2e.test_hostile_pods import metric
from tests.e2e.test_operator import apply, wait_ready, wait_resource

INTERVAL = 5
BULK = 16  # pods of the largest kind
LABELS = 40_000  # `kNNNNN: ""`: as many as fit beside their managed fields under etcd's 1.5 MiB request limit
ANNOTATION = 250_000  # characters: the API server's limit on a pod's annotations is 256 KiB
# What the operator may hold above its memory before the pods: what it keeps of BULK pods at worst, and room
# for the event being read at the time (the watch buffers at most MAX_DOCUMENT_BYTES of one and parses it only
# within MAX_VALUES: a few MiB) and for what the allocator keeps of it. The pods come one at a time, as the
# issue's did: the test waits for each to be scheduled.
BOUND = BULK * MAX_KEPT_BYTES + 48 * 2**20


def spec(replicas: int) -> dict[str, Any]:
    return {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
        "replicas": replicas,
        "telemetry": {"intervalSeconds": INTERVAL, "windowSeconds": 60, "minDrafts": 1},
    }


def rss(operator: Operator) -> int:
    """The operator process's resident memory, in bytes."""
    assert operator.process is not None
    for line in Path(f"/proc/{operator.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def settled(operator: Operator) -> int:
    """The operator's resident memory once it stops moving (two readings 3 s apart within 1 MiB)."""
    last = [rss(operator)]

    def still() -> int | None:
        time.sleep(3)
        last.append(rss(operator))
        return last[-1] if abs(last[-1] - last[-2]) < 2**20 else None

    settled_rss: int = wait_until("the operator's memory to settle", still, timeout=180)
    return settled_rss


def dropped(operator: Operator) -> float:
    """Pod events and list items the operator dropped unread, over its bounds."""
    reasons = ('reason="too_large"', 'reason="too_many_values"')
    return sum(metric(operator, "specinfer_pod_events_refused_total", reason) for reason in reasons)


def largest_pods(namespace: str, instance: str) -> dict[str, Any]:
    """A ReplicaSet (anyone who may create one) of BULK Pending pods labelled as `instance`'s engines, each
    with as many labels and as large annotations as the API server accepts."""
    labels = {MANAGED_BY_LABEL: MANAGER, INSTANCE_LABEL: instance, "bulk": "yes"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "bulk", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"bulk": "yes"}},
            "template": {
                "metadata": {
                    "labels": {**{f"k{i:05d}": "" for i in range(LABELS)}, **labels},
                    "annotations": {"filler": "x" * ANNOTATION},
                },
                "spec": {
                    "containers": [{"name": "engine", "image": "busybox"}],
                    "nodeSelector": {"e2e.specinfer.io/nowhere": "true"},  # Pending, as the were
                    "automountServiceAccountToken": False,
                },
            },
        },
    }


def test_the_largest_labelled_pods_leave_the_operators_memory_within_its_bound(
    cluster: Cluster, namespace: str, operator: Operator
) -> None:
    apply(cluster, namespace, "legit", spec(replicas=1))
    wait_ready(cluster, namespace, "legit")
    before, refused = settled(operator), dropped(operator)

    cluster.kubectl("create", "-f", "-", stdin=json.dumps(largest_pods(namespace, "legit")))

    def scheduled(count: int) -> bool:
        shown = '{range .items[*]}{.metadata.name} {.status.conditions[*].type}{"\\n"}{end}'
        found = cluster.kubectl("get", "pods", "-n", namespace, "-l", "bulk=yes", "-o", f"jsonpath={shown}")
        lines = found.stdout.splitlines()
        return len(lines) == count and all("PodScheduled" in line for line in lines)

    for count in range(1, BULK + 1):
        cluster.kubectl("scale", "replicaset", "bulk", "-n", namespace, f"--replicas={count}")
        wait_until(f"{count} Pending pods of the largest kind", lambda count=count: scheduled(count), timeout=120)
    # The resource beside them still reconciles: it scales, and its status counts only its own pods.
    apply(cluster, namespace, "legit", spec(replicas=2))
    obj = wait_ready(cluster, namespace, "legit")
    assert obj["status"]["replicas"] == 2, obj["status"]

    after = settled(operator)
    grown = f"+{(after - before) / 2**20:.1f} MiB for {BULK} pods (bound {BOUND / 2**20:.1f} MiB)"
    print(f"the operator's settled RSS: {grown}")
    assert after - before <= BOUND, grown
    # Not one of them was read: each of their events was over the bounds, and counted.
    assert dropped(operator) - refused >= BULK

    # A restart lists them all at once (a list of 20 MiB): it is read item by item, under the same bounds.
    operator.stop()
    operator.start()
    wait_ready(cluster, namespace, "legit")
    restarted = settled(operator)
    print(f"the restarted operator's settled RSS: {(restarted - before) / 2**20:+.1f} MiB against the first's")
    assert restarted - before <= BOUND
    assert dropped(operator) >= BULK


def test_a_pod_elsewhere_naming_a_victims_replicaset_uid_leaves_its_pods_measured(
    cluster: Cluster, namespace: str, namespaces: list[str], operator: Operator, servers: list[Server]
) -> None:
    apply(cluster, namespace, "victim", spec(replicas=2))
    wait_ready(cluster, namespace, "victim")
    real = wait_until(
        "the two engines", lambda: engines if len(engines := made_by_workload(cluster, namespace)) == 2 else None
    )
    for pod in real:
        servers.append(Server(engine(), pod["status"]["podIP"], 8000).__enter__())
    wait_resource(cluster, namespace, "victim", "the real figures", lambda o: figures(o).get("podsMeasured") == 2, 60)
    replicaset = next(r for r in real[0]["metadata"]["ownerReferences"] if r["kind"] == "ReplicaSet")

    other = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    namespaces.append(other)
    wait_until(
        f"the default ServiceAccount in {other}",
        lambda: cluster.core.list_namespaced_service_account(other, field_selector="metadata.name=default").items,
    )
    apply(cluster, other, "attacker", spec(replicas=0))
    wait_ready(cluster, other, "attacker")

    # The victim's pods were read more than 10 s ago: a template check that fails (the forged pod has no
    # pod-template hash) reads the link again. Every 2 s for six intervals, a pod of the attacker's whose
    # controller names the victim's ReplicaSet uid under a name nothing has in the attacker's namespace: each
    # event has the attacker's status refreshed, and so its chain followed.
    foreign = metric(operator, "specinfer_scrapes_total", 'result="foreign"')
    ended, rounds, measured = time.monotonic() + 6 * INTERVAL, 0, 0
    while time.monotonic() < ended:
        cluster.kubectl("create", "-n", other, "-f", "-", stdin=yaml.safe_dump(forged(replicaset)))
        rounds += 1
        measured += figures(cluster.get("specinference", "-n", namespace, "victim")).get("podsMeasured") == 2
        time.sleep(2)
    assert metric(operator, "specinfer_scrapes_total", 'result="foreign"') == foreign
    assert figures(cluster.get("specinference", "-n", namespace, "victim")).get("podsMeasured") == 2
    assert 2 * measured > rounds, f"both engines measured in {measured} checks of {rounds}"


def forged(replicaset: dict[str, Any]) -> dict[str, Any]:
    """A Pending pod of the attacker's whose controller reference names `replicaset`'s uid under "missing"."""
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "missing", "uid": replicaset["uid"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "forged-",
            "labels": {MANAGED_BY_LABEL: MANAGER, INSTANCE_LABEL: "attacker"},
            "ownerReferences": [{**ref, "controller": True}],
        },
        "spec": {
            "containers": [{"name": "engine", "image": "busybox"}],
            "nodeSelector": {"e2e.specinfer.io/nowhere": "true"},
            "automountServiceAccountToken": False,
        },
    }
