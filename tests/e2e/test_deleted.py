"""A resource deleted while its pods are being scraped leaves nothing behind in the operator: its round ends
after the deletion and must not bring back its series, nor may the events of its pods going away."""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.hostile import Server, exposition
from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import Operator
from tests.e2e.test_operator import apply, wait_ready, wait_resource

INTERVAL = 5
CYCLES = 3


class Held:
    """A loaded engine whose answer, once `hold` is set, waits for `release` after the scrape `arrived`."""

    def __init__(self) -> None:
        self.hold, self.arrived, self.release = threading.Event(), threading.Event(), threading.Event()
        self.answered = threading.Event()
        self.rounds = itertools.count(1)

    def __call__(self, conn: socket.socket, stop: threading.Event) -> None:
        if self.hold.is_set():
            self.arrived.set()
            self.release.wait(30)
        body = exposition(next(self.rounds), drift=4)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        if self.release.is_set():
            self.answered.set()


@pytest.fixture
def patient_operator(cluster: Cluster, namespace: str, tmp_path: Path, no_shared_operator: None) -> Iterator[Operator]:
    """An operator of this namespace whose scrapes wait long enough for a deletion to happen in one."""
    handle = Operator(cluster.kubeconfig, tmp_path, "--namespace", namespace, "--scrape-timeout", "40")
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()


def series_of(operator: Operator, name: str) -> list[str]:
    return [line for line in operator.metrics().splitlines() if f'name="{name}"' in line]


def test_a_resource_deleted_mid_round_leaves_no_series(
    cluster: Cluster, namespace: str, patient_operator: Operator
) -> None:
    spec = {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
        "replicas": 1,
        "telemetry": {"intervalSeconds": INTERVAL, "windowSeconds": 60, "minDrafts": 1},
    }
    for cycle in range(CYCLES):
        name = f"gone-{cycle}"
        apply(cluster, namespace, name, spec)
        wait_ready(cluster, namespace, name)
        (pod,) = wait_until(
            "its pod's address", lambda n=name: [p for p in pods(cluster, namespace, n) if p["status"].get("podIP")]
        )
        held = Held()
        with Server(held, pod["status"]["podIP"], 8000):
            wait_resource(
                cluster,
                namespace,
                name,
                "its first figures",
                lambda o: bool(((o.get("status") or {}).get("speculation") or {}).get("observed")),
                timeout=60,
            )
            wait_until(
                "its series",
                lambda n=name: any("specinfer_acceptance_rate" in s for s in series_of(patient_operator, n)),
            )
            held.hold.set()
            assert held.arrived.wait(3 * INTERVAL), "no scrape came"
            cluster.kubectl("delete", "specinference", "-n", namespace, name, "--wait=true")
            wait_until(
                "its series to go with it",
                lambda n=name: not series_of(patient_operator, n),
                timeout=30,
            )
            held.release.set()  # the round in flight ends now, after the deletion
            assert held.answered.wait(30), "the held scrape was not answered"
            wait_until("its pod to go", lambda n=name: not pods(cluster, namespace, n), timeout=60)
        # The round's end, and the events of its pod going away, brought nothing back.
        assert series_of(patient_operator, name) == []
