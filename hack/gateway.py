"""Clients sending requests to a resource's Service as a gateway does, on the local cluster (hack/podengine.py
stands the engines behind its pods)."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
from itertools import count
from typing import Any

from hack.engine import SERVED_NAME
from hack.kubeclient import Cluster
from hack.podengine import Fleet


class Gateway:
    """Clients sending greedy requests as a gateway does, each to the endpoint of the resource's Service with the
    fewest requests in flight (the next one in turn among equals, as Envoy's least-request balancer and the
    inference gateway's picker do): the pods its selector matches that are ready and not terminating, refreshed twice
    a second. That is what the
    EndpointSlice controller publishes; the local cluster has no EndpointSlices (its pod IPs are loopback
    addresses, which the API server refuses in them), so the endpoints are computed from the pods as it does.
    Only endpoints with an engine of `fleet` behind them are sent to. A refresh that fails keeps the endpoints it
    had, as a gateway keeps its last endpoints while its watch reconnects: a thread that died would freeze them."""

    def __init__(self, cluster: Cluster, namespace: str, name: str, fleet: Fleet, prompt: str, tokens: int) -> None:
        self.cluster, self.namespace, self.fleet, self.prompt, self.tokens = cluster, namespace, fleet, prompt, tokens
        selector = cluster.get("service", "-n", namespace, name)["spec"]["selector"]
        self.selector = ",".join(f"{k}={v}" for k, v in selector.items())
        self.endpoints: list[str] = []
        self.completed: dict[str, int] = {}  # requests that completed, by pod
        self.in_flight: dict[str, int] = {}  # requests sent and not answered, by pod
        self.spans: list[tuple[str, float, float]] = []  # pod, start and end of each request that completed
        self.failed: list[str] = []
        self.refresh_failures: list[str] = []
        self.active = 0  # clients sending; the others wait
        self.started = time.monotonic()
        self.stopped, self.guard, self.turn = threading.Event(), threading.Lock(), count()
        self.refresh_once()
        self.threads = [threading.Thread(target=self.refresh, daemon=True)]
        self.threads[0].start()

    @property
    def total(self) -> int:
        return sum(self.completed.values())

    def raise_to(self, concurrency: int) -> None:
        """`concurrency` clients sending from now on (fewer than before: the others hold their requests)."""
        self.active = concurrency
        while len(self.threads) - 1 < concurrency:
            thread = threading.Thread(target=self.client, args=(len(self.threads) - 1,), daemon=True)
            thread.start()
            self.threads.append(thread)

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
            try:
                self.refresh_once()
            except (AssertionError, subprocess.SubprocessError, json.JSONDecodeError) as error:
                with self.guard:
                    self.refresh_failures.append(str(error).strip()[-200:])

    def client(self, number: int) -> None:
        while not self.stopped.is_set():
            name = self.pick() if number < self.active else None
            engine = self.fleet.engines.get(name) if name is not None else None
            if name is None or engine is None:
                if name is not None:
                    self.answered(name)
                self.stopped.wait(0.2)
                continue
            started = time.monotonic()
            try:
                engine.complete(self.prompt, SERVED_NAME, self.tokens)
            except (OSError, http.client.HTTPException, json.JSONDecodeError) as error:
                with self.guard:
                    self.failed.append(f"{name}: {error}")
                continue
            finally:
                self.answered(name)
            with self.guard:
                self.completed[name] = self.completed.get(name, 0) + 1
                self.spans.append((name, started, time.monotonic()))

    def pick(self) -> str | None:
        """The endpoint with an engine and the fewest requests in flight, counted as sent to it."""
        with self.guard:
            names = [n for n in self.endpoints if n in self.fleet.engines]
            if not names:
                return None
            turn = next(self.turn) % len(names)
            name = min(names[turn:] + names[:turn], key=lambda n: self.in_flight.get(n, 0))
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
            return name

    def answered(self, name: str) -> None:
        with self.guard:
            self.in_flight[name] -= 1

    def summary(self) -> str:
        """What each endpoint did so far, for a failure message: completed, in flight, the first completion's
        seconds since the clients started, and the failures."""
        with self.guard:
            first = {n: min(end for m, _, end in self.spans if m == n) - self.started for n in self.completed}
            rows = [
                f"{n}: {self.completed.get(n, 0)} completed, {self.in_flight.get(n, 0)} in flight"
                + (f", first after {first[n]:.0f} s" if n in first else "")
                for n in sorted(set(self.endpoints) | set(self.completed) | set(self.in_flight))
            ]
            return (
                "; ".join(rows)
                + f"; failed: {self.failed[-3:]} ({len(self.failed)} in all)"
                + f"; endpoint refreshes failed: {self.refresh_failures[-2:]} ({len(self.refresh_failures)} in all)"
            )

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=330)
