"""Read one engine's spec-decode counters from its `/metrics`, treating the answer as untrusted.

The text comes from a pod: whatever answers on its port may be slow, huge or garbage. The read is bounded
in time (one deadline for connect, headers and body together) and in size, and only the spec-decode lines
reach the Prometheus parser, so its cost is bounded by the few lines vLLM exports per draft position,
not by the latency histograms that make up most of a real exposition.
"""

from __future__ import annotations

import http.client
import socket
import time
from dataclasses import dataclass

from specinfer_operator.acceptance import COUNTERS, parse
from specinfer_operator.window import Counts

LIMIT = 4 << 20  # bytes; a vLLM /metrics is ~60 KiB, a few MiB with many LoRA adapters or models
CHUNK = 64 << 10
FAMILIES = tuple(name.removesuffix("_total") for name in COUNTERS)
# A malformed line is reported with its start, never in full.
QUOTE = 80


class ScrapeError(Exception):
    """Why a pod's counters could not be read, in one line."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"


def fetch(endpoint: Endpoint, timeout: float, limit: int = LIMIT) -> bytes:
    """The body of GET /metrics, within `timeout` seconds and `limit` bytes, or ScrapeError."""
    deadline = time.monotonic() + timeout
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        connection.request("GET", "/metrics", headers={"Accept": "text/plain"})
        response = connection.getresponse()
        if response.status != 200:
            raise ScrapeError(f"{endpoint.url} answered HTTP {response.status}")
        body = bytearray()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ScrapeError(f"{endpoint.url} took longer than {timeout:g} s")
            if connection.sock is not None:
                connection.sock.settimeout(remaining)
            chunk = response.read1(CHUNK)  # one receive: a trickling sender cannot hold it past the deadline
            if not chunk:
                return bytes(body)
            body += chunk
            if len(body) > limit:
                raise ScrapeError(f"{endpoint.url} sent more than {limit >> 20} MiB")
    except (OSError, http.client.HTTPException) as error:
        said = "timed out" if isinstance(error, socket.timeout) else (str(error) or type(error).__name__)
        raise ScrapeError(f"{endpoint.url}: {said}"[:200]) from error
    finally:
        connection.close()


def spec_decode_lines(body: bytes) -> str:
    """The lines of the four spec-decode families (samples and their TYPE/HELP comments)."""
    keep = []
    for raw in body.decode("utf-8", errors="replace").splitlines():
        line = raw.lstrip()
        name = line[7:] if line.startswith(("# TYPE ", "# HELP ")) else line
        if name.startswith(FAMILIES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def counts(body: bytes) -> Counts | None:
    """The engine's counters, None when it exports none (speculation off), or ScrapeError."""
    text = spec_decode_lines(body)
    try:
        figures = parse(text)
    except Exception as error:  # the Prometheus parser raises several types on malformed input
        raise ScrapeError(f"unreadable spec-decode metrics: {str(error)[:QUOTE]}") from error
    return Counts.of(figures.values()) if figures else None


def scrape(endpoint: Endpoint, timeout: float) -> Counts | None:
    return counts(fetch(endpoint, timeout))
