"""The `/metrics` captures under tests/unit/data/metrics, and a check that they are still what vLLM exports.

Unit tests of windowed acceptance read counters that grow prompt by prompt and restart from zero with the
engine; these captures are real expositions of that. With SPECINFER_CAPTURE_METRICS=<dir> the test writes
them to <dir>; without it, it checks the committed ones against a live engine, so that a vLLM upgrade that
renames a metric or a label, or counts drafts differently, shows here rather than in the parser's users.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hack.engine import PROMPTS, REPO, SKIP_REASON, checked, engine_config, run_engine, venv_variable
from hack.tinymodel import TinyModels

pytestmark = pytest.mark.skipif(venv_variable() is None, reason=SKIP_REASON)

CAPTURE_VARIABLE = "SPECINFER_CAPTURE_METRICS"
COMMITTED = REPO / "tests" / "unit" / "data" / "metrics"
NGRAM_K4 = {"method": "ngram", "numSpeculativeTokens": 4, "ngram": {"promptLookupMin": 2, "promptLookupMax": 4}}
SERIES = PROMPTS[:3]  # prose, YAML, then the repetitive prompt: acceptance differs from one window to the next


@pytest.fixture(scope="module")
def captures(
    engine_venv: Path, models: TinyModels, engine_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """`/metrics` after each of three prompts, then after the first prompt again on a restarted engine."""
    config = engine_config(models, NGRAM_K4)
    checked(config)
    directory = tmp_path_factory.mktemp("ngram-k4")
    path = directory / "engine.json"
    path.write_text(json.dumps(config))
    argv = [str(engine_venv / "bin" / "specinfer-runtime"), "--config", str(path)]
    series = run_engine("ngram-k4", argv, engine_env, SERIES, directory / "engine.log")
    restarted = run_engine("ngram-k4-restarted", argv, engine_env, SERIES[:1], directory / "restarted.log")
    texts = {f"ngram-k4-{n}.txt": text for n, text in enumerate(series.metrics_after, start=1)}
    texts["ngram-k4-restarted-1.txt"] = restarted.metrics_after[0]
    return texts


def label_names(text: str) -> dict[str, set[str]]:
    """Each metric family with the label names its samples carry: what a reader of the text depends on."""
    names: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(text):
        names[family.name] |= {label for sample in family.samples for label in sample.labels}
    return dict(names)


def spec_decode_counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The spec-decode counter samples by name and labels (their `_created` timestamps left out)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("vllm:spec_decode_") and sample.name.endswith("_total")
    }


def test_committed_captures_match_the_engine(captures: dict[str, str]) -> None:
    target = os.environ.get(CAPTURE_VARIABLE)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for name, text in captures.items():
            (Path(target) / name).write_text(text)
        return
    for name, live in captures.items():
        committed = (COMMITTED / name).read_text()
        assert label_names(live) == label_names(committed), name
        assert spec_decode_counters(live) == spec_decode_counters(committed), name
    # A restarted engine counts from zero: the same first prompt gives the same counters.
    first, restarted = captures["ngram-k4-1.txt"], captures["ngram-k4-restarted-1.txt"]
    assert spec_decode_counters(restarted) == spec_decode_counters(first)
