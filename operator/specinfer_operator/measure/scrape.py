"""Read one engine's spec-decode and step counters from its `/metrics`, treating the answer as untrusted.

Whatever answers on a pod's port may be slow, huge or hostile. One wall-clock deadline covers the whole
exchange (connect, request, interim 1xx answers, status line, headers, body, chunk framing, trailers) and
the parse, which runs on each piece of the body as it is received (exposition.Reader): every receive waits
at most for what is left of it, so a pod that sends a byte at a time, endless `100 Continue`s, a chunk-size
line or trailers that never end holds a scrape no longer than the deadline, and a body that is costly to
read is read within it too. The bytes received in all are bounded, and so are every piece of framing on its
own (h11's incomplete-event limit), the chunks a body comes in, and the pieces (receives) it comes in, with or
without chunks: a body dribbled in tiny TCP segments is refused after a few hundred. The body is never kept:
only the sample lines of the counters the operator reads are, each bounded, so one scrape holds at most MEMORY
bytes whatever the pod sends, and the operator's concurrent scrapes MEMORY times their number.

A scrape that breaks a bound is a ScrapeError with a one-line reason and a `result` for the
`specinfer_scrapes_total` metric; nothing the pod sends is quoted beyond a short, printable excerpt.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import h11

from specinfer_operator.measure import acceptance, timing
from specinfer_operator.measure.exposition import ExpositionError, Reader
from specinfer_operator.measure.window import Counts

LIMIT = 4 << 20  # bytes received in all; a vLLM /metrics is ~60 KiB, a few MiB with many LoRA adapters or models
FRAMING = 16 << 10  # bytes of a status line and headers, a chunk-size line, or trailers
MAX_INTERIM = 4  # 1xx answers before the real one
CHUNK = 64 << 10
# Chunks of a chunked body: a body of one-byte chunks would cost a Python event per byte. vLLM answers with a
# Content-Length; an exporter that chunks writes a few KiB per chunk.
MAX_CHUNKS = 256
# Pieces of any body (a piece per receive, or per chunk), beyond MAX_CHUNKS: one each MIN_PIECE bytes received
# on average. A body sent in tiny segments, each a receive, would cost a Python event per segment whatever its
# framing; a real one arrives in receives of a TCP segment (~1.4 KiB) or more.
MIN_PIECE = 1 << 10
COUNTERS = (*acceptance.COUNTERS, *timing.SAMPLES)  # the samples read; every other line is skipped
# What one scrape holds at most, whatever the pod sends: a receive, h11's buffer (a receive and an incomplete
# framing event), a line that spans two receives joined to the next, and the sample lines kept with their
# parsed samples (measured: tests/unit/operator/measure/test_scrape_memory.py).
MEMORY = 1 << 20

Result = Literal["ok", "timeout", "unreachable", "http_error", "protocol", "too_large", "unreadable"]
RESULTS: tuple[Result, ...] = ("ok", "timeout", "unreachable", "http_error", "protocol", "too_large", "unreadable")


class ScrapeError(Exception):
    """Why a pod's counters could not be read, in one line, and the metric's `result` for it."""

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(" ".join(message.split())[:200])
        self.result = result


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    path: str = "/metrics"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.authority}{self.path}"


class Deadline:
    """What is left of one wall-clock budget; ScrapeError(timeout) once it is spent."""

    def __init__(self, seconds: float, url: str) -> None:
        self.seconds, self.url, self.end = seconds, url, time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise self.spent()
        return remaining

    def spent(self) -> ScrapeError:
        return ScrapeError(f"{self.url} took longer than {self.seconds:g} s", "timeout")


def _receive(sock: socket.socket, deadline: Deadline) -> bytes:
    sock.settimeout(deadline.left())
    try:
        return sock.recv(CHUNK)
    except TimeoutError:
        raise deadline.spent() from None


def _exchange(
    sock: socket.socket, endpoint: Endpoint, deadline: Deadline, limit: int, body: Callable[[bytes], None]
) -> None:
    """GET the endpoint's path on `sock`, giving each piece of the body to `body` as it arrives."""
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=FRAMING)
    request = h11.Request(
        method="GET",
        target=endpoint.path,
        headers=[("Host", endpoint.authority), ("Accept", "text/plain"), ("Connection", "close")],
    )
    sock.settimeout(deadline.left())
    sock.sendall(connection.send(request) + (connection.send(h11.EndOfMessage()) or b""))
    received, interim, chunks, pieces = 0, 0, 0, 0
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = _receive(sock, deadline)
            if not data and not received:
                raise ScrapeError(f"{endpoint.url} closed the connection without an answer", "protocol")
            received += len(data)
            if received > limit:
                raise ScrapeError(f"{endpoint.url} sent more than {limit >> 20} MiB", "too_large")
            connection.receive_data(data)
        elif isinstance(event, h11.InformationalResponse):
            interim += 1
            if interim > MAX_INTERIM:
                raise ScrapeError(f"{endpoint.url} sent more than {MAX_INTERIM} interim (1xx) answers", "protocol")
        elif isinstance(event, h11.Response):
            if event.status_code != 200:
                raise ScrapeError(f"{endpoint.url} answered HTTP {event.status_code}", "http_error")
            declared = dict(event.headers).get(b"content-length", b"0")
            if int(declared) > limit:  # h11 has checked it is a number: no need to read what is announced
                raise ScrapeError(
                    f"{endpoint.url} announced {int(declared) >> 20} MiB, more than {limit >> 20}", "too_large"
                )
        elif isinstance(event, h11.Data):
            chunks += event.chunk_start
            if chunks > MAX_CHUNKS:
                raise ScrapeError(f"{endpoint.url} sent its body in more than {MAX_CHUNKS} chunks", "protocol")
            pieces += 1
            if pieces > MAX_CHUNKS and pieces * MIN_PIECE > received:
                raise ScrapeError(
                    f"{endpoint.url} sent its body in more than {MAX_CHUNKS} pieces of less than "
                    f"{MIN_PIECE >> 10} KiB on average",
                    "too_large",
                )
            body(event.data)
            deadline.left()  # what the piece cost to read counts
        elif isinstance(event, h11.EndOfMessage):
            return
        else:  # h11 reports a closed connection before the end of the answer as a protocol error
            raise ScrapeError(f"{endpoint.url}: unexpected {type(event).__name__} in the answer", "protocol")


def _get(endpoint: Endpoint, deadline: Deadline, limit: int, body: Callable[[bytes], None]) -> None:
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=deadline.left()) as sock:
            _exchange(sock, endpoint, deadline, limit, body)
    except h11.RemoteProtocolError as error:
        raise ScrapeError(f"{endpoint.url}: not an HTTP/1.1 answer: {error}", "protocol") from error
    except TimeoutError:
        raise deadline.spent() from None
    except OSError as error:
        raise ScrapeError(f"{endpoint.url}: {error.strerror or error}", "unreachable") from error


def fetch(endpoint: Endpoint, timeout: float, limit: int = LIMIT) -> bytes:
    """The body of GET /metrics (the endpoint's path) within `timeout` seconds and `limit` bytes received,
    or ScrapeError: for `specinfer tune`, which reads an endpoint its user names and may save the body."""
    body = bytearray()
    _get(endpoint, Deadline(timeout, endpoint.url), limit, body.extend)
    return bytes(body)


def _figures(reader: Reader, feed: Callable[[], None]) -> tuple[Counts, bool]:
    """Feed `reader` (feed), then the counters it read and whether the engine speculates; or ScrapeError."""
    try:
        feed()
        found = reader.close()
        figures, steps = acceptance.of(found), timing.of(found)
    except ExpositionError as error:
        raise ScrapeError(f"unreadable metrics: {error}", "too_large" if error.bound else "unreadable") from error
    except ValueError as error:
        raise ScrapeError(f"unreadable spec-decode metrics: {error}", "unreadable") from error
    if not found:
        raise ScrapeError("no vLLM counters in it: not the /metrics of a vLLM engine", "unreadable")
    return Counts.of(figures.values(), steps.values()), bool(figures)


def read(body: bytes) -> tuple[Counts, bool]:
    """The engine's counters in a whole body, and whether it exports spec-decode counters at all
    (speculation on); or ScrapeError."""
    reader = Reader(COUNTERS, acceptance.LABELS)
    return _figures(reader, lambda: reader.feed(body))


def counts(body: bytes) -> Counts | None:
    """The engine's counters, None when it exports no spec-decode counters (speculation off), or
    ScrapeError."""
    found, speculating = read(body)
    return found if speculating else None


def scrape(endpoint: Endpoint, timeout: float) -> Counts | None:
    """One pod's counters within `timeout` seconds, each piece of the body read as it arrives; None when it
    exports no spec-decode counters."""
    deadline = Deadline(timeout, endpoint.url)
    reader = Reader(COUNTERS, acceptance.LABELS)
    found, speculating = _figures(reader, lambda: _get(endpoint, deadline, LIMIT, reader.feed))
    return found if speculating else None
