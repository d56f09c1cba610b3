"""The cost of measuring acceptance: 500 resources of 2 pods each, every pod answering /metrics.

1,000 real engines do not fit on one machine, so each simulated pod's address (a loopback IP, see
hack/cluster) is served by a small HTTP server sending a real vLLM /metrics capture from the engine
suite, its counters growing with every scrape at a steady acceptance, as a loaded engine's do
(hack/hostile.py's exposition). The operator scrapes them at its defaults (every 30 s, status refresh
300 s). Figures: the operator's CPU share and RSS with scraping on, next to the same operator with scraping
off (baseline, same run); status writes per minute counted by the API server, next to the bound the design promises
(resources x 60 / refresh) and what writing every round would cost (resources x 60 / interval).
Run with `make bench-telemetry`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.operator import ROOT, Bench, body, line, local_cluster, rss_mb
from hack.hostile import exposition
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION
from specinfer_operator.telemetry.targets import ScrapeConfig

RESOURCES, REPLICAS = 500, 2
# Seconds. Both operators start on the same 500 existing resources (the same resume burst). With scraping,
# the first rounds take baselines, then write the first figures and LowAcceptance verdicts; the steady
# state starts after that, and its measurement spans one status refresh period (300 s).
WARM_UP, MEASURE = 240, 300
DEFAULTS = ScrapeConfig()


async def serve(addresses: list[str], port: int) -> None:
    """Every address answers like a loaded engine: one more round of traffic per scrape."""
    served = dict.fromkeys(addresses, 0)

    def handler(address: str) -> object:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            served[address] += 1
            payload = exposition(served[address])
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n" % len(payload))
            writer.write(b"Connection: close\r\n\r\n" + payload)
            await writer.drain()
            writer.close()

        return handle

    for address in addresses:
        await asyncio.start_server(handler(address), address, port)  # type: ignore[arg-type]
    print("ready", flush=True)
    await asyncio.Event().wait()


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=120)  # kopf finishes its handlers first; 500 resources take a while on 2 cores
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def operator(metrics_port: int, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "specinfer-operator"), "--metrics-bind-address",
         f"127.0.0.1:{metrics_port}", "--metrics-secure=false",
         "--health-port", "18082", "--log-level", "warning", *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def scrapes(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "specinfer_scrapes"
        for s in f.samples
        if s.name.endswith("_total") and s.labels.get("result") == "ok"
    )


def measure(bench: Bench, process: subprocess.Popen[bytes], seconds: float) -> tuple[float, float, float]:
    """(CPU share of one core, RSS MB, status writes per minute) over `seconds`."""
    writes, cpu, start = bench.writes()["speculativeinferences"], cpu_seconds(process.pid), time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    share = (cpu_seconds(process.pid) - cpu) / wall
    per_minute = (bench.writes()["speculativeinferences"] - writes) * 60 / wall
    return share, rss_mb(process.pid)[0], per_minute


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(sys.argv[3:], int(sys.argv[2])))
        return
    bench = local_cluster(32, 64)
    ns = bench.namespace("bench-telemetry")
    process = operator(18091, "--scrape-interval", "0")
    for i in range(RESOURCES):
        manifest = body(f"t-{i}")
        manifest["spec"]["replicas"] = REPLICAS
        bench.kube.create(f"{GROUP}/{VERSION}", PLURAL, ns, manifest)
    while bench.resources_ready(ns) < RESOURCES:
        time.sleep(2)
    pods = bench.kube.list("v1", "pods", ns)
    addresses = sorted({p["status"]["podIP"] for p in pods if p.get("status", {}).get("podIP")})
    assert len(addresses) == RESOURCES * REPLICAS, f"{len(addresses)} distinct pod IPs"
    engines = subprocess.Popen(
        [sys.executable, "-m", "bench.telemetry", "--serve", "8000", *addresses], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert engines.stdout is not None
    assert engines.stdout.readline().strip() == b"ready"
    try:
        # Baseline: the same operator without scraping, restarted like the one measured after it.
        stop(process)
        process = operator(18091, "--scrape-interval", "0")
        time.sleep(60)
        off = measure(bench, process, 120)
        stop(process)
        process = operator(18090)
        time.sleep(WARM_UP)
        before = scrapes(18090)
        on = measure(bench, process, MEASURE)
        scraped = (scrapes(18090) - before) * 60 / MEASURE
    finally:
        stop(process)
        engines.terminate()
        bench.drop(ns)
    print(f"{'':<44} {'scraping on':>16} {'scraping off':>16}")
    line("operator CPU (share of one core)", f"{on[0] * 100:.1f} %", f"{off[0] * 100:.1f} %", "-")
    line("operator RSS", f"{on[1]:.0f} MB", f"{off[1]:.0f} MB", "< 200 MB")
    line("pods scraped per minute", f"{scraped:.0f}", "0", f"{RESOURCES * REPLICAS * 60 / DEFAULTS.interval:.0f}")
    bound = RESOURCES * 60 / DEFAULTS.refresh
    every_round = RESOURCES * 60 / DEFAULTS.interval
    line(
        f"status writes/min ({RESOURCES} steady resources)",
        f"{on[2]:.0f}",
        f"{off[2]:.0f}",
        f"<= {bound:.0f} (every round: {every_round:.0f})",
    )


if __name__ == "__main__":
    main()
