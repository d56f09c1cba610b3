"""The engine's preStop: it waits for the requests in flight (vLLM's running and waiting gauges) to reach zero,
within its deadline, after letting endpoint removal settle; a clock and a fetch are given, so no test waits."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from specinfer_runtime.drain import MAX_BODY, drain, in_flight, read

REAL = (Path(__file__).resolve().parents[1] / "data" / "vllm-metrics-ngram.txt").read_bytes()


def gauges(running: float, waiting: float) -> bytes:
    return REAL.replace(
        b'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
        f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}'.encode(),
    ).replace(
        b'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
        f'vllm:num_requests_waiting{{engine="0",model_name="tiny"}} {waiting}'.encode(),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_in_flight_counts_running_and_waiting_requests_of_a_real_engine() -> None:
    assert in_flight(REAL) == 0
    assert in_flight(gauges(3.0, 2.0)) == 5
    assert in_flight(b"# nothing here\nvllm:other 1\n") is None
    assert in_flight(b'vllm:num_requests_running 2\nvllm:num_requests_running{x="y"} oops\n') == 2


def test_it_waits_until_the_requests_in_flight_are_done() -> None:
    clock = Clock()
    answers = iter([gauges(2, 1), gauges(1, 0), gauges(0, 0)])
    said = drain("http://engine/metrics", 50, 5, lambda url, timeout: next(answers), clock, clock.sleep)
    assert said == "no request in flight"
    assert clock.now == 7  # the settling, then a second between looks


def test_it_stops_waiting_at_its_deadline() -> None:
    clock = Clock()
    said = drain("http://engine/metrics", 20, 5, lambda url, timeout: gauges(1, 0), clock, clock.sleep)
    assert said == "1 requests still in flight after 20 s: stopping anyway"
    assert clock.now == 20


def refused(url: str, timeout: float) -> bytes | None:
    raise ConnectionRefusedError(url)


def test_an_engine_that_refuses_connections_is_not_waited_for() -> None:
    clock = Clock()
    said = drain("http://engine/metrics", 50, 5, refused, clock, clock.sleep)
    assert said == "the engine refuses connections: nothing to wait for"
    assert clock.now == 5


def test_an_engine_too_busy_to_answer_is_asked_again() -> None:
    """A look that times out is an engine with work to finish, not a stopped one (found by the scale-in test:
    three engines on two cores answered a drain's /metrics late)."""
    clock = Clock()
    answers = iter([None, None, gauges(1, 0), None, gauges(0, 0)])
    said = drain("http://engine/metrics", 50, 5, lambda url, timeout: next(answers), clock, clock.sleep)
    assert said == "no request in flight"
    clock = Clock()
    said = drain("http://engine/metrics", 20, 5, lambda url, timeout: None, clock, clock.sleep)
    assert said == "the engine did not answer for 20 s: stopping anyway"


def test_read_tells_a_stopped_engine_from_a_slow_one() -> None:
    """Nothing listening on a loopback port: refused. A server that accepts and never answers: None."""
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(ConnectionRefusedError):
        read(f"http://127.0.0.1:{port}/metrics", 5)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        assert read(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics", 0.2) is None


@pytest.fixture
def oversized() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"#" * (MAX_BODY + 10))

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()


def test_a_body_beyond_the_bound_is_not_read(oversized: str) -> None:
    assert read(oversized, 30) is None
