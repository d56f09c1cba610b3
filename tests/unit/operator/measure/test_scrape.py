"""Reading a pod's /metrics over real HTTP on loopback: what a real engine sends, and what a hostile one does."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hack.hostile import BEHAVIOURS, CHUNKED, OK_HEAD, REAL, Behaviour, answer, send, serving
from specinfer_operator.measure.acceptance import COUNTERS, LABELS
from specinfer_operator.measure.exposition import samples
from specinfer_operator.measure.scrape import COUNTERS as READ
from specinfer_operator.measure.scrape import LIMIT, Endpoint, ScrapeError, counts, scrape
from specinfer_operator.measure.timing import Steps
from specinfer_operator.measure.window import Counts

TIMEOUT = 0.5  # for the pods that never finish: what ends their scrape is the deadline
UNHURRIED = 60.0  # for the others: what ends their scrape is their own error, however busy the machine


def endpoint(server_port: int) -> Endpoint:
    return Endpoint("127.0.0.1", server_port)


def test_a_real_exposition() -> None:
    # The step counters as the file has them: inter-token latency count 131 and sum 1.37335..., 192 tokens
    # generated, 4 first tokens, 135 iterations.
    steps = Steps(steps=131, seconds=1.3733576490012638, generated=192, requests=4, iterations=135)
    with serving(answer(REAL)) as server:
        assert scrape(endpoint(server.port), timeout=UNHURRIED) == Counts(30, 84, 64, (24, 21, 19), steps)


def test_a_chunked_answer_with_trailers_reads_the_same() -> None:
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(REAL[i : i + 1000]), REAL[i : i + 1000]) for i in range(0, len(REAL), 1000)
    )
    with serving(answer(REAL)) as plain, serving(send(CHUNKED + chunks + b"0\r\nX-Trailer: 1\r\n\r\n")) as chunked:
        assert scrape(endpoint(chunked.port), timeout=UNHURRIED) == scrape(endpoint(plain.port), timeout=UNHURRIED)


def test_the_linear_reader_agrees_with_prometheus_client_on_real_captures() -> None:
    text = REAL.decode()
    expected = [
        (s.name, {k: v for k, v in s.labels.items() if k in LABELS}, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in READ
    ]
    assert [(s.name, s.labels, s.value) for s in samples(text, READ, LABELS)] == expected
    assert len(expected) > len(COUNTERS)


def test_an_engine_without_speculation_has_no_counters() -> None:
    body = b"".join(line + b"\n" for line in REAL.splitlines() if b"spec_decode" not in line)
    with serving(answer(body)) as server:
        assert scrape(endpoint(server.port), timeout=UNHURRIED) is None


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'vllm:spec_decode_num_drafts_total{model_name="m"} -3\n', "not a count"),
        (b'vllm:spec_decode_num_drafts_total{model_name="m"} NaN\n', "not a count"),
        (b'vllm:spec_decode_num_drafts_total{model_name="m"} 1e17\n', "not a count"),
        (b'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="999999999"} 1\n', "not a draft position"),
        (b'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="-1"} 1\n', "not a draft position"),
        (b"vllm:spec_decode_num_drafts_total{{{} 1\n", "malformed labels"),
        (b'vllm:spec_decode_num_drafts_total{a="b" 1\n', "unclosed labels"),
        (b"vllm:spec_decode_num_drafts_total 1_000\n", "no value"),
        (b"vllm:spec_decode_num_drafts_total \xff\xfe\x00\n", "no value"),
    ],
)
def test_garbage_is_one_line_error(body: bytes, said: str) -> None:
    with pytest.raises(ScrapeError, match=said) as raised:
        counts(body)
    assert "\n" not in str(raised.value)
    assert len(str(raised.value)) <= 200


@pytest.mark.parametrize(("name", "behaviour", "said", "result"), BEHAVIOURS, ids=[b[0] for b in BEHAVIOURS])
def test_a_hostile_pod_is_a_failed_scrape_within_the_deadline(
    name: str, behaviour: Behaviour, said: str, result: str
) -> None:
    timeout = TIMEOUT if result == "timeout" else UNHURRIED
    with serving(behaviour) as server:
        started = time.monotonic()
        with pytest.raises(ScrapeError, match=said) as raised:
            scrape(endpoint(server.port), timeout=timeout)
        took = time.monotonic() - started
    message = str(raised.value)
    assert raised.value.result == result
    assert "\n" not in message
    assert len(message) <= 200
    assert message.isprintable()
    # The deadline is a bound, not a speed: generous, but far from "still running after 25 s".
    assert result != "timeout" or took < TIMEOUT + 10, f"{name}: {took:.1f} s"


def test_the_limit_counts_every_byte_received() -> None:
    """A body read until the connection closes (no length announced) is cut at the limit."""
    unannounced = send(OK_HEAD + b"\r\n" + b"# padding\n" * (LIMIT // 10 + 10))
    with serving(unannounced) as server, pytest.raises(ScrapeError, match="sent more than 4 MiB"):
        scrape(endpoint(server.port), timeout=UNHURRIED)


def test_closed_ports_are_unreachable() -> None:
    with serving(answer(REAL)) as server:
        port = server.port
    with pytest.raises(ScrapeError, match=rf"127\.0\.0\.1:{port}/metrics") as raised:
        scrape(endpoint(port), timeout=UNHURRIED)
    assert raised.value.result == "unreachable"
