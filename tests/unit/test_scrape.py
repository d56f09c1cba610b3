"""Reading a pod's /metrics over real HTTP on loopback: what a real engine sends, and what a hostile one does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specinfer_operator.scrape import LIMIT, Endpoint, ScrapeError, counter_lines, counts, scrape
from specinfer_operator.timing import Steps
from specinfer_operator.window import Counts

STEP_SAMPLES = (
    "vllm:inter_token_latency_seconds_sum{",
    "vllm:inter_token_latency_seconds_count{",
    "vllm:generation_tokens_total{",
    "vllm:time_to_first_token_seconds_count{",
    "vllm:iteration_tokens_total_count{",
)
REAL = (Path(__file__).parent / "data" / "vllm-metrics-ngram.txt").read_bytes()


class Server:
    """A loopback HTTP server whose /metrics answer the test sets."""

    def __init__(self) -> None:
        self.body: bytes = REAL
        self.status = 200
        self.delay = 0.0
        self.trickle = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(owner.delay)
                self.send_response(owner.status)
                self.end_headers()
                if owner.trickle:  # a byte every 50 ms: each read succeeds, the whole never ends in time
                    for i in range(len(owner.body)):
                        self.wfile.write(owner.body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(0.05)
                else:
                    self.wfile.write(owner.body)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.endpoint = Endpoint("127.0.0.1", self.http.server_address[1])


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    thread = threading.Thread(target=s.http.serve_forever, daemon=True)
    thread.start()
    yield s
    s.http.shutdown()
    s.http.server_close()


def test_a_real_exposition(server: Server) -> None:
    # The step counters as the file has them: inter-token latency count 131 and sum 1.37335..., 192 tokens
    # generated, 4 first tokens, 135 iterations.
    steps = Steps(steps=131, seconds=1.3733576490012638, generated=192, requests=4, iterations=135)
    assert scrape(server.endpoint, timeout=2) == Counts(30, 84, 64, (24, 21, 19), steps)


def test_only_the_counters_reach_the_parser() -> None:
    kept = counter_lines(REAL).splitlines()
    samples = [line for line in kept if not line.startswith("#")]
    assert all("spec_decode_num_" in line or line.startswith(STEP_SAMPLES) for line in samples), samples
    assert not any("_bucket" in line or "_created" in line for line in samples)
    assert len([s for s in samples if "spec_decode" not in s]) == len(STEP_SAMPLES)
    assert len(REAL.splitlines()) > 10 * len(kept)


def test_an_engine_without_speculation_has_no_counters(server: Server) -> None:
    server.body = b"".join(line + b"\n" for line in REAL.splitlines() if b"spec_decode" not in line)
    assert scrape(server.endpoint, timeout=2) is None


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'vllm:spec_decode_num_drafts_total{model_name="m"} -3\n', "not a count"),
        (b'vllm:spec_decode_num_drafts_total{model_name="m"} NaN\n', "not a count"),
        (b'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="999999999"} 1\n', "not a draft position"),
        (b'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="-1"} 1\n', "not a draft position"),
        (b"vllm:spec_decode_num_drafts_total{{{ 1\n", "unreadable"),
        (b"vllm:spec_decode_num_drafts_total \xff\xfe\x00\n", "unreadable"),
    ],
)
def test_garbage_is_one_line_error(body: bytes, said: str) -> None:
    with pytest.raises(ScrapeError, match=said) as raised:
        counts(body)
    assert "\n" not in str(raised.value)
    assert len(str(raised.value)) < 200


def test_a_huge_answer_is_cut_at_the_limit(server: Server) -> None:
    server.body = b"# padding\n" * (LIMIT // 10 + 10)
    with pytest.raises(ScrapeError, match="more than 4 MiB"):
        scrape(server.endpoint, timeout=5)


def test_a_slow_or_trickling_answer_times_out(server: Server) -> None:
    server.delay = 3
    with pytest.raises(ScrapeError, match="timed out"):
        scrape(server.endpoint, timeout=0.5)
    server.delay, server.trickle = 0, True
    started = time.monotonic()
    with pytest.raises(ScrapeError, match=r"took longer than|timed out"):
        scrape(server.endpoint, timeout=0.5)
    assert time.monotonic() - started < 2


def test_http_errors_and_closed_ports(server: Server) -> None:
    server.status = 503
    with pytest.raises(ScrapeError, match="HTTP 503"):
        scrape(server.endpoint, timeout=2)
    with pytest.raises(ScrapeError, match=r"127\.0\.0\.1:1/metrics"):
        scrape(Endpoint("127.0.0.1", 1), timeout=2)
