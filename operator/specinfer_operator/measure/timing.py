"""What a decode step costs, from vLLM's `/metrics` (pure: text in, counts out).

Acceptance says how many tokens a verification step yields; whether a K pays off also depends on what the
step costs, and that must be measured, not assumed. vLLM observes a request's inter-token latency once per
engine step the request takes part in after its first token, whatever number of tokens the step gave it:
the histogram's count is the number of (request, decode step) pairs and its sum their time, so sum / count
is the mean step time a decoding request sees. Generated tokens minus first tokens (one per request, from
its prefill) over that count is the tokens a request gets per decode step, speculation included; the
count over the engine's iterations is the mean number of requests a step serves (its batch).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from specinfer_operator.measure.acceptance import LABELS, MODEL_LABEL, count
from specinfer_operator.measure.exposition import Sample, samples

STEP_SECONDS = "vllm:inter_token_latency_seconds_sum"
STEPS = "vllm:inter_token_latency_seconds_count"
GENERATED = "vllm:generation_tokens_total"
REQUESTS = "vllm:time_to_first_token_seconds_count"
ITERATIONS = "vllm:iteration_tokens_total_count"
SAMPLES = (STEP_SECONDS, STEPS, GENERATED, REQUESTS, ITERATIONS)


@dataclass(frozen=True)
class Steps:
    """One served model's decode-step counters, summed over its engines."""

    steps: int = 0  # (request, decode step) pairs
    seconds: float = 0.0  # their total time
    generated: int = 0  # tokens generated, first tokens included
    requests: int = 0  # first tokens: one per request that reached decoding
    iterations: int = 0  # engine steps, prefill included


def parse(text: str) -> dict[str, Steps]:
    """Step counters per `model_name`; ValueError when one is not a count (acceptance.count)."""
    return of(samples(text, SAMPLES, LABELS))


def of(found: list[Sample]) -> dict[str, Steps]:
    """Step counters per `model_name` from the samples of the step counters (see parse)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sample in found:
        if sample.name in SAMPLES:
            totals[sample.labels.get(MODEL_LABEL, "")][sample.name] += count(sample)
    return {
        model: Steps(
            steps=round(values[STEPS]),
            seconds=values[STEP_SECONDS],
            generated=round(values[GENERATED]),
            requests=round(values[REQUESTS]),
            iterations=round(values[ITERATIONS]),
        )
        for model, values in totals.items()
    }
