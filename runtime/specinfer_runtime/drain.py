"""The engine container's preStop: let the requests in flight finish before the kubelet stops vLLM.

A pod that leaves (a scale-in, a rollout, a drain) is taken out of its Service's endpoints while its preStop
runs, and its engine gets SIGTERM only after it. So the preStop first waits a few seconds for gateways and
kube-proxy to stop sending new requests, then until the engine has no request running or waiting
(vllm:num_requests_running and vllm:num_requests_waiting, from its own /metrics), within a deadline that
leaves the engine time to exit inside the pod's termination grace period. Whatever happens it exits 0: a
preStop that fails only delays the SIGTERM it precedes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from specinfer_runtime.engine import ENGINE_PORT, LISTEN_ADDRESS_ENV

GAUGES = (b"vllm:num_requests_running", b"vllm:num_requests_waiting")
MAX_BODY = 4 << 20  # bytes of /metrics read at most: the engine's own, but bounded all the same
SETTLE_SECONDS = 5  # for endpoint removal to reach kube-proxy and gateways
MARGIN_SECONDS = 10  # left of the grace period for vLLM to exit after SIGTERM
READ_SECONDS = 5.0  # one look at /metrics at most: a busy engine on a loaded node answers late


def in_flight(body: bytes) -> int | None:
    """Requests running or waiting, summed over the engine's models; None when the body has neither gauge."""
    found, total = False, 0.0
    for line in body.splitlines():
        if line.startswith(b"#"):
            continue
        head, brace, tail = line.partition(b"}")
        name = head.split(b"{", 1)[0] if brace else line.split(b" ", 1)[0]
        if name not in GAUGES:
            continue
        fields = (tail if brace else line[len(name) :]).split()
        try:
            total += float(fields[0])
        except (ValueError, IndexError):
            continue
        found = True
    return round(total) if found else None


def read(url: str, timeout: float) -> bytes | None:
    """The body of `url`, or None when it is slow, unreadable or too large (a busy engine: look again);
    ConnectionRefusedError when nothing listens (the engine is gone)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: bytes = response.read(MAX_BODY + 1)
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            raise error.reason from None
        return None
    except OSError:
        return None
    return body if len(body) <= MAX_BODY else None


def drain(
    url: str,
    timeout: float,
    settle: float = SETTLE_SECONDS,
    fetch: Callable[[str, float], bytes | None] = read,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Wait `settle` seconds, then until nothing is in flight or `timeout` seconds have passed since the
    start; what it found, in a line for the container's log. An engine too busy to answer its /metrics in
    time has requests to finish: it is asked again; one that refuses the connection has stopped."""
    deadline = clock() + timeout
    sleep(min(settle, timeout))
    last: int | None = None
    while clock() < deadline:
        try:
            body = fetch(url, max(0.1, min(READ_SECONDS, deadline - clock())))
        except ConnectionRefusedError:
            return "the engine refuses connections: nothing to wait for"
        last = in_flight(body) if body is not None else last
        if last == 0:
            return "no request in flight"
        sleep(min(1.0, max(0.0, deadline - clock())))
    if last is None:
        return f"the engine did not answer for {timeout:.0f} s: stopping anyway"
    return f"{last} requests still in flight after {timeout:.0f} s: stopping anyway"


def main(args: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="specinfer-drain", description="preStop: wait for the engine's requests in flight to finish"
    )
    parser.add_argument(
        "--host",
        default=os.environ.get(LISTEN_ADDRESS_ENV) or "127.0.0.1",
        help=f"the engine's address: the pod's own loopback, or where {LISTEN_ADDRESS_ENV} has vLLM listen",
    )
    parser.add_argument("--port", type=int, default=ENGINE_PORT)
    parser.add_argument("--timeout", type=float, required=True, help="seconds at most, settling included")
    parser.add_argument("--settle", type=float, default=SETTLE_SECONDS, help="seconds before the first look")
    ns = parser.parse_args(args)
    said = drain(f"http://{ns.host}:{ns.port}/metrics", max(0.0, ns.timeout), max(0.0, ns.settle))
    print(f"specinfer-drain: {said}", file=sys.stderr)


if __name__ == "__main__":
    main()
