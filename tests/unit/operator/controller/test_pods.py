"""What the operator keeps of an engine pod: what the status reads, bounded whatever the pod carries."""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest

from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION, INSTANCE_LABEL, TEMPLATE_HASH_LABEL
from specinfer_operator.controller.health import pod_problem
from specinfer_operator.controller.pods import MAX_CONTAINERS, MAX_KEPT_BYTES, MAX_TERMINATION, kept
from specinfer_operator.render import workload

REPLICASET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d8f9c", "uid": "u" * 36, "controller": True}


def size(value: Any) -> int:
    """The bytes `value` holds in memory, everything it refers to included."""
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size(k) + size(v) for k, v in value.items())
    if isinstance(value, list):
        return sys.getsizeof(value) + sum(size(v) for v in value)
    return sys.getsizeof(value)


def pod(**meta: Any) -> dict[str, Any]:
    """An engine pod whose engine crash-loops, written the way the kubelet writes it."""
    return {
        "metadata": {
            "name": "web-6d8f9c-x1",
            "namespace": "team-a",
            "uid": "p" * 36,
            "labels": {INSTANCE_LABEL: "web", TEMPLATE_HASH_LABEL: "6d8f9c", "app.kubernetes.io/name": "x"},
            "annotations": {CONFIG_HASH_ANNOTATION: "0123456789", "other": "x"},
            "ownerReferences": [REPLICASET],
            **meta,
        },
        "spec": {
            "containers": [
                {"name": "engine", "image": "i", "terminationMessagePolicy": "File", "env": [{"name": "A"}]},
                {"name": "sidecar", "image": "s", "terminationMessagePolicy": "FallbackToLogsOnError"},
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "not ready"},
            ],
            "containerStatuses": [
                {"name": "sidecar", "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                {
                    "name": "engine",
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 3, "message": "preflight: no NPU"}},
                },
            ],
        },
    }


def test_what_the_status_reads_of_a_pod_is_kept() -> None:
    whole = pod()
    mine = kept(whole)
    assert mine is not None
    assert pod_problem([mine], None) == pod_problem([whole], None)
    assert pod_problem([mine], None) == (
        "CrashLoopBackOff",
        "pod web-6d8f9c-x1 restarted 4 times; last exit: preflight: no NPU",
    )
    assert mine["metadata"]["annotations"] == {CONFIG_HASH_ANNOTATION: "0123456789"}
    assert mine["metadata"]["labels"] == {INSTANCE_LABEL: "web", TEMPLATE_HASH_LABEL: "6d8f9c"}
    assert workload.kind_of_pod(mine) == workload.kind_of_pod(whole)
    assert mine["metadata"]["ownerReferences"] == [REPLICASET]


def test_a_group_is_counted_from_what_is_kept() -> None:
    lws = {"kind": workload.LWS_KIND, "metadata": {"name": "web"}, "spec": {"leaderWorkerTemplate": {"size": 2}}}
    group = []
    for index in ("0", "1"):
        member = pod(name=f"web-0-{index}")
        member["metadata"]["labels"].update(
            {workload.SET_LABEL: "web", workload.GROUP_INDEX_LABEL: "0", workload.WORKER_INDEX_LABEL: index}
        )
        member["metadata"]["ownerReferences"] = [{**REPLICASET, "kind": "StatefulSet"}]
        member["status"]["conditions"][1]["status"] = "True"
        group.append(member)
    mine = [kept(p) for p in group]
    assert all(p is not None for p in mine)
    assert workload.counts(lws, [p for p in mine if p]) == workload.counts(lws, group)
    assert workload.counts(lws, [p for p in mine if p]).ready == 1


@pytest.mark.parametrize(
    "owners",
    [
        [],
        [{**REPLICASET, "controller": False}],
        [{**REPLICASET, "kind": "Deployment"}],
        [{**REPLICASET, "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference"}],
        [{**REPLICASET, "name": "n" * 254}],
        [{**REPLICASET, "uid": "u" * 10_000}],
    ],
)
def test_a_pod_no_chain_of_the_operators_can_have_made_is_not_kept(owners: list[dict[str, Any]]) -> None:
    assert kept(pod(ownerReferences=owners)) is None


def test_labels_and_annotations_of_any_size_keep_the_same() -> None:
    labels = {f"k{i}": "" for i in range(120_000)} | pod()["metadata"]["labels"]  # about 1.4 MiB as JSON
    annotations = {"big": "x" * 250_000} | pod()["metadata"]["annotations"]
    huge = pod(labels=labels, annotations=annotations)
    huge["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "c"}] * 1000
    huge["metadata"]["ownerReferences"].append(REPLICASET)
    assert kept(huge) == kept(pod())
    assert size(kept(huge)["metadata"]) < 4096  # type: ignore[index]


def test_one_pod_costs_at_most_the_documented_bytes_at_worst() -> None:
    wide = "\U0001f600" * 100_000  # every character four bytes in memory
    worst = copy.deepcopy(pod(name=wide, namespace=wide, deletionTimestamp=wide))
    worst["metadata"]["labels"] = dict.fromkeys((INSTANCE_LABEL, TEMPLATE_HASH_LABEL, *workload_labels()), wide)
    worst["metadata"]["annotations"] = {CONFIG_HASH_ANNOTATION: wide}
    worst["metadata"]["ownerReferences"] = [{**REPLICASET, "name": "\U0001f600" * 253, "uid": "\U0001f600" * 253}]
    worst["spec"]["containers"][0]["terminationMessagePolicy"] = wide
    condition = {"status": wide, "reason": wide, "message": wide}
    worst["status"]["conditions"] = [{"type": t, **condition} for t in ("Ready", "PodScheduled")] * 100
    terminated = {"exitCode": 1, "message": wide}
    worst["status"]["containerStatuses"] = [
        {"name": "engine" if i == 0 else f"c{i}", "restartCount": 1, "state": {"waiting": condition}}
        | {"lastState": {"terminated": terminated}}
        for i in range(100)
    ]
    mine = kept(worst)
    assert mine is not None
    assert len(mine["status"]["conditions"]) == 2
    assert len(mine["status"]["containerStatuses"]) == MAX_CONTAINERS
    assert len(mine["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"]) == MAX_TERMINATION
    assert "message" not in mine["status"]["containerStatuses"][1]["lastState"]["terminated"]  # not the engine's
    assert size(mine) <= MAX_KEPT_BYTES


def workload_labels() -> tuple[str, ...]:
    return workload.SET_LABEL, workload.GROUP_INDEX_LABEL, workload.WORKER_INDEX_LABEL
