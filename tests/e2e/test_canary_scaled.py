"""A scale event during a canary, against the real control plane: the replicas change through the scale subresource
(as an autoscaler writes them) while the canary is being compared with the stable pods. The configuration stays
what it was, both sides are resized, the comparisons made at the old split of the load are dropped, and the verdict
waits for figures measured wholly after the scale, then compares again: the scale neither promotes nor rolls back.
Engines are loopback servers answering steady vLLM counters (hack/hostile.py's engine) behind the kwok pods."""

from __future__ import annotations

from typing import Any

import pytest

from hack.hostile import Server, engine
from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import EAGER_REFRESH
from tests.e2e.test_canary import ANNOTATION, phase
from tests.e2e.test_operator import apply, resource, wait_ready, wait_resource

NAME = "scaled-canary"
INTERVAL = EAGER_REFRESH


def body(k: int, replicas: int = 2) -> dict[str, Any]:
    return {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": k},
        "replicas": replicas,
        # Half the pods on trial; eight comparisons (the most) keep the verdict open while the test scales.
        "rollout": {"strategy": "Canary", "canary": {"percent": 50, "minDraftTokens": 1, "minComparisons": 8}},
        # The engines accept 1.3 tokens per step: no collapse of acceptance here, only the scale.
        "telemetry": {"intervalSeconds": INTERVAL, "windowSeconds": 60, "minDrafts": 1, "minMeanAcceptanceLength": 1},
    }


def serve(cluster: Cluster, namespace: str, servers: list[Server]) -> None:
    """An engine behind every pod of the resource that has none, none behind an address no pod has any more."""
    addresses = {p["status"].get("podIP") for p in pods(cluster, namespace, NAME)} - {None}
    for gone in [s for s in servers if s.host not in addresses]:
        gone.__exit__()
        servers.remove(gone)
    for address in addresses - {s.host for s in servers}:
        servers.append(Server(engine(), str(address), 8000).__enter__())


def record(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = resource(cluster, namespace, NAME)["status"]["rollout"].get("canary") or {}
    return found


@pytest.mark.usefixtures("eager_operator")  # steady engines' figures would otherwise wait for the refresh
def test_a_scale_event_during_a_canary_neither_promotes_nor_rolls_back(
    cluster: Cluster, namespace: str, servers: list[Server]
) -> None:
    apply(cluster, namespace, NAME, body(k=3))
    good = wait_ready(cluster, namespace, NAME)["status"]["configHash"]
    apply(cluster, namespace, NAME, body(k=4))
    wait_resource(cluster, namespace, NAME, "STATUS Canary", phase("Canary"), 60)
    new = record(cluster, namespace)["configHash"]

    def compared() -> dict[str, Any] | None:
        serve(cluster, namespace, servers)
        rollout = resource(cluster, namespace, NAME)["status"]["rollout"]
        assert "canary" in rollout, rollout
        return rollout["canary"] if rollout["canary"].get("comparisons") else None

    before = wait_until("the canary to be compared with the stable pod", compared, 180, 1)
    assert (before["replicas"], before["stableReplicas"]) == (1, 1)

    # The autoscaler's write: two pods on each side now.
    cluster.kubectl("scale", "specinference", "-n", namespace, NAME, "--replicas=4")
    rescaled = wait_until("the canary to see the scale", lambda: record(cluster, namespace).get("scaledTime"), 60)
    after = record(cluster, namespace)
    assert (after["configHash"], after["stableConfigHash"]) == (new, good)  # the same trial, not a new one
    assert after["startTime"] == before["startTime"]
    assert (after["replicas"], after["stableReplicas"]) == (2, 2)

    # Until both sides have a window after the scale the canary waits; then it is compared afresh.
    said: set[str] = set()

    def resumed() -> dict[str, Any] | None:
        serve(cluster, namespace, servers)
        rollout = resource(cluster, namespace, NAME)["status"]["rollout"]
        assert "rolledBack" not in rollout, rollout
        assert rollout["lastGood"]["configHash"] == good, rollout  # not promoted either
        canary: dict[str, Any] = rollout["canary"]
        assert canary["scaledTime"] == rescaled
        said.add(canary["message"].split(": ", 1)[0])
        return canary if canary.get("comparisons") else None

    canary = wait_until("the canary to be compared again after the scale", resumed, 240, 1)
    assert f"waiting for figures measured wholly after the replicas changed at {rescaled}" in said
    assert all(c["measuredTime"] >= rescaled for c in canary["comparisons"])  # none from before the scale
    assert len(pods(cluster, namespace, NAME)) == 4

    cluster.kubectl("annotate", "specinference", "-n", namespace, NAME, f"{ANNOTATION}=promote")
    assert wait_ready(cluster, namespace, NAME)["status"]["configHash"] == new
