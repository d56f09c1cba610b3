"""Speculative-decoding acceptance figures from vLLM's `/metrics` (pure: text in, figures out).

vLLM exports raw counters only; whether speculation pays off is read from ratios of them. Computing the
ratios here, with vLLM's own definitions, gives the status, benchmarks and tests one reading of them:

- acceptance rate = accepted tokens / draft tokens
- mean acceptance length = 1 + accepted tokens / drafts (tokens gained per verification step, the
  target's own bonus token included)
- per-position rate p = accepted tokens at draft position p / drafts
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from specinfer_operator.measure.exposition import Sample, samples

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POSITION)
MODEL_LABEL = "model_name"
POSITION_LABEL = "position"
LABELS = (MODEL_LABEL, POSITION_LABEL)  # the labels read; every other is checked and dropped
# Draft positions are below K (at most 14 on Ascend); a position label beyond this comes from a broken or
# hostile exporter and would otherwise size a tuple.
MAX_POSITIONS = 64
# No engine counts past 2^53 (a float's exact integers): a larger value is garbage, and sums of such
# values would overflow what the status can hold.
MAX_COUNT = float(1 << 53)


def count(sample: Sample) -> float:
    """A sample's value as a count; ValueError when it is not one (negative, NaN, infinite, absurd)."""
    if not math.isfinite(sample.value) or not 0 <= sample.value <= MAX_COUNT:
        raise ValueError(f"{sample.name} is {sample.value:g}, not a count")
    return sample.value


@dataclass(frozen=True)
class Acceptance:
    """Acceptance of one served model, summed over its engines (data-parallel ranks export one series each).

    The ratios are None while nothing was drafted: 0/0 is no evidence either way.
    """

    model: str
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    position_rates: tuple[float, ...] | None

    @classmethod
    def from_counts(
        cls, model: str, drafts: int, draft_tokens: int, accepted_tokens: int, accepted_per_position: tuple[int, ...]
    ) -> Acceptance:
        """The figures of raw counter values, with vLLM's definitions of the ratios."""
        return cls(
            model=model,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted_tokens,
            accepted_per_position=accepted_per_position,
            acceptance_rate=accepted_tokens / draft_tokens if draft_tokens else None,
            mean_acceptance_length=1 + accepted_tokens / drafts if drafts else None,
            position_rates=tuple(n / drafts for n in accepted_per_position) if drafts else None,
        )


def _position(label: str | None) -> int:
    if label is None or not label.isdigit() or int(label) >= MAX_POSITIONS:
        raise ValueError(f"position label {label!r} is not a draft position (0 to {MAX_POSITIONS - 1})")
    return int(label)


def parse(text: str) -> dict[str, Acceptance]:
    """Acceptance per `model_name` found in a Prometheus text exposition; models without the speculative
    counters (an engine running without speculation) are absent. ValueError when a speculative counter is
    not a count or a position label is not a draft position (exposition.ExpositionError, a ValueError,
    when a line breaks the format or a bound)."""
    return of(samples(text, COUNTERS, LABELS))


def of(found: list[Sample]) -> dict[str, Acceptance]:
    """Acceptance per `model_name` from the samples of the spec-decode counters (see parse)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    per_position: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for sample in found:
        if sample.name not in COUNTERS:
            continue
        model = sample.labels.get(MODEL_LABEL, "")
        totals[model][sample.name] += count(sample)
        if sample.name == ACCEPTED_PER_POSITION:
            per_position[model][_position(sample.labels.get(POSITION_LABEL))] += sample.value
    result = {}
    for model, counts in totals.items():
        positions = per_position[model]
        width = max(positions) + 1 if positions else 0
        result[model] = Acceptance.from_counts(
            model,
            drafts=round(counts[DRAFTS]),
            draft_tokens=round(counts[DRAFT_TOKENS]),
            accepted_tokens=round(counts[ACCEPTED]),
            accepted_per_position=tuple(round(positions[p]) for p in range(width)),
        )
    return result


def acceptance(text: str, model: str) -> Acceptance | None:
    """Acceptance of one served model, None when it exports no speculative counters."""
    return parse(text).get(model)
