"""What resources that come and go leave behind in the operator: 1,000 SpeculativeInferences created and
deleted, 50 at a time, on the local control plane, with the operator's telemetry measuring each while it
lives (every 5 s; nothing answers on the pods' addresses, so every round ends at once with a failed scrape,
and writes it).

After each batch is deleted, the operator's own /metrics must hold no series of the namespace (the
conditions, the figures), and its resident memory must not grow with the batches: what it keeps per resource
goes with the resource. Printed: the series of the namespace while a batch lives and after it went, and the
operator's RSS after batches 1, 5, 10, 15 and 20, next to the target (no series left; at most 4 MiB more RSS
from batch 5 to batch 20, when the caches that are bounded rather than emptied have filled up).

Run with `make bench-churn`.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from bench.operator import Bench, body, free_port, local_cluster, rss_mb
from bench.telemetry import operator, stop
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION

NAMESPACE = "bench-churn"
BATCH, BATCHES = 50, 20
GROWTH = 4.0  # MiB from batch 5 to batch 20
REPORTED = (1, 5, 10, 15, 20)


def series(port: int) -> int:
    """Lines of the operator's /metrics about a resource of the namespace."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(f'namespace="{NAMESPACE}"' in line for line in text.splitlines())


def churning(name: str) -> dict[str, Any]:
    manifest = body(name)
    manifest["spec"]["telemetry"] = {"intervalSeconds": 5, "windowSeconds": 60}
    return manifest


def until(what: str, done: Any, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench-churn: timed out waiting for {what}")
        time.sleep(1)


def batch(bench: Bench, port: int, number: int) -> int:
    """Create a batch, let it be measured, delete it; the series of the namespace while it lived."""
    names = [f"churn-{number}-{i}" for i in range(BATCH)]
    for name in names:
        bench.kube.create(f"{GROUP}/{VERSION}", PLURAL, NAMESPACE, churning(name))
    until("the batch to be Ready", lambda: bench.resources_ready(NAMESPACE) == BATCH)

    def measured() -> bool:
        listed = bench.kube.list(f"{GROUP}/{VERSION}", PLURAL, NAMESPACE)
        return sum(bool(((o.get("status") or {}).get("speculation") or {}).get("observed")) for o in listed) == BATCH

    until("every resource's first figures", measured)
    living = series(port)
    for name in names:
        bench.kube.delete(f"{GROUP}/{VERSION}", PLURAL, NAMESPACE, name)
    until("the batch's pods to go", lambda: not bench.kube.list("v1", "pods", NAMESPACE))
    return living


def main() -> None:
    bench = local_cluster(8, 64)
    bench.namespace(NAMESPACE)
    port = free_port()
    process = operator(port, "--namespace", NAMESPACE)
    rss: dict[int, float] = {}
    try:
        until("the operator's metrics", lambda: _answers(port), 60)
        print(f"{BATCHES} batches of {BATCH} resources, created, measured and deleted")
        print(f"{'batch':>5} {'series while it lived':>22} {'series after':>13} {'operator RSS':>13}")
        for number in range(1, BATCHES + 1):
            living = batch(bench, port, number)
            time.sleep(10)  # two telemetry intervals: a round that was under way has ended
            left = series(port)
            rss[number] = rss_mb(process.pid)[0]
            if number in REPORTED or left:
                print(f"{number:>5} {living:>22} {left:>13} {rss[number]:>9.1f} MiB", flush=True)
    finally:
        stop(process)
        bench.drop(NAMESPACE)
    grown = rss[BATCHES] - rss[5]
    print(f"RSS from batch 5 to batch {BATCHES}: {grown:+.1f} MiB (target <= {GROWTH:g} MiB)")


def _answers(port: int) -> bool:
    try:
        series(port)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    main()
