"""Read one engine's spec-decode and step counters from its `/metrics`, treating the answer as untrusted.

The text comes from a pod: whatever answers on its port may be slow, huge or garbage. The read is bounded
in time (one deadline for connect, headers and body together) and in size, and only the counter lines
reach the Prometheus parser (the spec-decode counters, and the sums and counts of the step histograms),
so its cost is bounded by the few lines vLLM exports per draft position, not by the latency histograms'
buckets that make up most of a real exposition.
"""

from __future__ import annotations

import http.client
import socket
import time
from dataclasses import dataclass

from specinfer_operator import timing
from specinfer_operator.acceptance import COUNTERS, parse
from specinfer_operator.window import Counts

LIMIT = 4 << 20  # bytes; a vLLM /metrics is ~60 KiB, a few MiB with many LoRA adapters or models
CHUNK = 64 << 10
# Families whose TYPE and HELP lines are kept, and the samples kept: the spec-decode counters and the
# step counters, never the histograms' buckets.
FAMILIES = (*(name.removesuffix("_total") for name in COUNTERS), *timing.FAMILIES)
SAMPLES = frozenset((*COUNTERS, *timing.SAMPLES))
# A malformed line is reported with its start, never in full.
QUOTE = 80


class ScrapeError(Exception):
    """Why a pod's counters could not be read, in one line."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    path: str = "/metrics"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"


def fetch(endpoint: Endpoint, timeout: float, limit: int = LIMIT) -> bytes:
    """The body of GET /metrics (the endpoint's path), within `timeout` seconds and `limit` bytes, or
    ScrapeError."""
    deadline = time.monotonic() + timeout
    connection = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    try:
        connection.request("GET", endpoint.path, headers={"Accept": "text/plain"})
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


def counter_lines(body: bytes) -> str:
    """The samples of the spec-decode counters and the step counters, with their families' TYPE/HELP
    comments."""
    keep = []
    for raw in body.decode("utf-8", errors="replace").splitlines():
        line = raw.lstrip()
        if line.startswith(("# TYPE ", "# HELP ")):
            if line[7:].startswith(FAMILIES):
                keep.append(line)
        elif line.split("{", 1)[0].split(" ", 1)[0] in SAMPLES:
            keep.append(line)
    return "\n".join(keep) + "\n"


def read(body: bytes) -> tuple[Counts, bool]:
    """The engine's counters, and whether it exports spec-decode counters at all (speculation on); or
    ScrapeError."""
    text = counter_lines(body)
    try:
        figures = parse(text)
        steps = timing.parse(text)
    except Exception as error:  # the Prometheus parser raises several types on malformed input
        raise ScrapeError(f"unreadable spec-decode metrics: {str(error)[:QUOTE]}") from error
    return Counts.of(figures.values(), steps.values()), bool(figures)


def counts(body: bytes) -> Counts | None:
    """The engine's counters, None when it exports no spec-decode counters (speculation off), or
    ScrapeError."""
    found, speculating = read(body)
    return found if speculating else None


def scrape(endpoint: Endpoint, timeout: float) -> Counts | None:
    return counts(fetch(endpoint, timeout))
