"""What a connection flood on the operator's own ports costs it: a 20 ms heartbeat's lateness, resident memory,
threads, and whether the kubelet's probe still gets through, with 10,000 idle connections and 8 flooding
clients against the metrics (HTTPS) and health ports, beside the same run without them.

The ports are the operator's own (manager.main.endpoints, with its limits, a self-signed certificate and the
token check), in this process; the heartbeat is an asyncio loop in a thread of its own, as kopf's is. The
clients run in a process of their own, from many loopback addresses (as pods in a cluster would): 5,000 idle
connections to each port, opened and held without a byte sent, and 4 clients per port asking back to back
(GET /metrics without a token over TLS, GET /healthz). A prober asks /healthz every 100 ms from 127.0.0.1,
as the kubelet would from its node. Targets (docs/security.md): heartbeat p99 at most 1.5x its quiet figure
plus 20 ms, RSS at most 32 MiB above it, no thread more, and no probe left unanswered for 10 s (the chart's
liveness probe fails the operator after 3 failures 10 s apart).

Run with `make bench-hostile`, or alone with `python -m bench.flood`.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from kubernetes import client

from specinfer_operator.manager.endpoints import Health
from specinfer_operator.manager.main import endpoints
from specinfer_operator.manager.settings import parse

ROOT = Path(__file__).resolve().parents[1]
IDLE, FLOODERS = 10_000, 8
PER_ADDRESS = 40  # idle connections from one source address: 250 addresses in all
SECONDS = 20.0
TICK = 0.02


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def heartbeat(seconds: float) -> list[float]:
    """Lateness of a 20 ms asyncio sleep, in a thread of its own, for `seconds`."""

    async def beat() -> list[float]:
        late, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            before = time.monotonic()
            await asyncio.sleep(TICK)
            late.append(time.monotonic() - before - TICK)
        return late

    found: list[float] = []
    thread = threading.Thread(target=lambda: found.extend(asyncio.run(beat())))
    thread.start()
    thread.join()
    return found


def probes(port: int, stop: threading.Event, answered: list[bool]) -> None:
    """The kubelet's view: /healthz every 100 ms from 127.0.0.1, with its 5 s timeout."""
    while not stop.wait(0.1):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                answered.append(response.status == 200)
        except OSError:
            answered.append(False)


async def flood(metrics: int, health: int) -> None:
    """The hostile clients: idle connections from many addresses, and 8 clients asking back to back."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    held = []
    for n in range(IDLE):
        source = f"127.1.{n // PER_ADDRESS // 250}.{n // PER_ADDRESS % 250 + 1}"
        with contextlib.suppress(OSError):
            held.append(await asyncio.open_connection("127.0.0.1", (metrics, health)[n % 2], local_addr=(source, 0)))

    async def ask(port: int, address: str, context: ssl.SSLContext | None, path: bytes) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, local_addr=(address, 0))
                writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: operator\r\n\r\n")
                await reader.read()
                writer.close()
            except (OSError, ssl.SSLError):
                await asyncio.sleep(0.01)

    print(f"ready {len(held)}", flush=True)
    await asyncio.gather(
        *(ask(metrics, f"127.2.0.{i + 1}", tls, b"/metrics") for i in range(FLOODERS // 2)),
        *(ask(health, f"127.3.0.{i + 1}", None, b"/healthz") for i in range(FLOODERS // 2)),
    )


def longest_silence(answered: list[bool]) -> float:
    """Seconds of the longest run of unanswered probes."""
    longest = run = 0
    for ok in answered:
        run = 0 if ok else run + 1
        longest = max(longest, run)
    return longest * 0.1


def run(metrics: int, health: int, flooded: bool) -> tuple[list[float], float, int, list[bool]]:
    """Heartbeat lateness, RSS at the end, threads at the end, and the probes' answers."""
    clients = None
    if flooded:
        clients = subprocess.Popen(
            [sys.executable, "-m", "bench.flood", "--clients", str(metrics), str(health)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        assert clients.stdout is not None
        print(f"  {clients.stdout.readline().decode().split()[1]} idle connections opened", flush=True)
    stop, answered = threading.Event(), list[bool]()
    prober = threading.Thread(target=probes, args=(health, stop, answered))
    prober.start()
    try:
        late = heartbeat(SECONDS)
        return late, rss_mib(), threading.active_count(), answered
    finally:
        stop.set()
        prober.join()
        if clients is not None:
            clients.terminate()
            clients.wait()


def main() -> None:
    if sys.argv[1:2] == ["--clients"]:
        asyncio.run(flood(int(sys.argv[2]), int(sys.argv[3])))
        return
    metrics, health = free_port(), free_port()
    settings = parse(["--metrics-bind-address", f"127.0.0.1:{metrics}", "--health-port", str(health)])
    # The token check is in place; these clients send none, so the API server is never asked.
    ports = endpoints(settings, client.ApiClient(client.Configuration()), Health())
    ports.start()
    figures = {mode: run(metrics, health, mode == "flooded") for mode in ("quiet", "flooded")}
    ports.stop()

    def p99(values: list[float]) -> float:
        return statistics.quantiles(values, n=100)[98] * 1000

    print(f"{IDLE:,} idle connections and {FLOODERS} flooding clients on the metrics and health ports, {SECONDS:.0f} s")
    print(
        f"{'':<10} {'heartbeat p50':>14} {'heartbeat p99':>14} {'RSS':>10} {'threads':>8} {'probes answered':>16} "
        f"{'longest unanswered':>19}"
    )
    for mode, (late, rss, threads, answered) in figures.items():
        print(
            f"{mode:<10} {statistics.median(late) * 1000:>11.1f} ms {p99(late):>11.1f} ms {rss:>6.0f} MiB "
            f"{threads:>8} {sum(answered):>8}/{len(answered):<7} {longest_silence(answered):>17.1f} s"
        )
    quiet, loud = figures["quiet"], figures["flooded"]
    print(f"heartbeat p99: {p99(loud[0]):.1f} ms against {p99(quiet[0]):.1f} ms (target <= 1.5x + 20 ms)")
    print(f"RSS: {loud[1] - quiet[1]:+.1f} MiB (target <= +32 MiB); threads: {loud[2] - quiet[2]:+d} (target 0)")
    print(
        f"probes: longest unanswered stretch {longest_silence(loud[3]):.1f} s (target < 10 s: the kubelet restarts "
        "the operator after 3 failed probes 10 s apart)"
    )


if __name__ == "__main__":
    main()
