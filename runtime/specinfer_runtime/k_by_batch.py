"""K by batch size (vLLM: `num_speculative_tokens_per_batch_size`): the ranges, the K in force at each batch
size, and the capture sizes a schedule needs in the full graph modes."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.graph import BATCHES, FULL_MODE
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS, OWN_SCHEDULE, SCHEDULE, K

# The longest schedule: vLLM takes any number of ranges; its own examples use four. The bound keeps the
# capture-size rules, which look up each batch size's range, within the API server's CEL cost budget.
MAX_SCHEDULE_RANGES = 8


class BatchSizeRange(Section):
    """One range of a per-batch-size schedule: steps whose batch holds minBatchSize to maxBatchSize
    sequences (inclusive) draft numSpeculativeTokens tokens per sequence."""

    min_batch_size: int = Field(ge=1, le=65536, description="Smallest batch size of the range (inclusive).")
    max_batch_size: int = Field(ge=1, le=65536, description="Largest batch size of the range (inclusive).")
    num_speculative_tokens: int = Field(
        ge=0,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description="K for these batch sizes, at most speculative.numSpeculativeTokens; 0 turns speculation off "
        "for them (verification then costs more than it gives).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R21",
            rule="self.minBatchSize <= self.maxBatchSize",
            message="minBatchSize %d exceeds maxBatchSize %d: a range runs from its smallest batch size to its "
            "largest, both included",
            args=("self.minBatchSize", "self.maxBatchSize"),
            field_path=".minBatchSize",
        ),
    )


def _distinct_starts(ranges: list[BatchSizeRange]) -> list[BatchSizeRange]:
    """Refuse two ranges starting at the same batch size, as the API server does for a list keyed by it."""
    seen: set[int] = set()
    for item in ranges:
        if item.min_batch_size in seen:
            raise ValueError(f'Duplicate value: {{"minBatchSize":{item.min_batch_size}}}')
        seen.add(item.min_batch_size)
    return ranges


Schedule = Annotated[
    list[BatchSizeRange],
    AfterValidator(_distinct_starts),
    Field(
        min_length=1,
        max_length=MAX_SCHEDULE_RANGES,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["minBatchSize"]},
    ),
]

SPECULATIVE_RULES = (
    Rule(
        id="R21",
        rule=f"!has({OWN_SCHEDULE}) || {OWN_SCHEDULE}.map(r, r.minBatchSize).isSorted()",
        message="numSpeculativeTokensPerBatchSize starts its ranges at batch sizes %s: list them from the "
        "smallest batch size up",
        args=(f"{OWN_SCHEDULE}.map(r, r.minBatchSize)",),
        field_path=".numSpeculativeTokensPerBatchSize",
    ),
    Rule(
        id="R21",
        rule=f"!has({OWN_SCHEDULE}) || {OWN_SCHEDULE}.all(r, {OWN_SCHEDULE}.all(q, "
        "q.minBatchSize <= r.minBatchSize || q.minBatchSize > r.maxBatchSize))",
        message="ranges overlap: %s (as [minBatchSize, maxBatchSize]) hold batch sizes a later range starts "
        "at; end each range before the next one starts",
        args=(
            f"{OWN_SCHEDULE}.filter(r, {OWN_SCHEDULE}.exists(q, q.minBatchSize > r.minBatchSize "
            "&& q.minBatchSize <= r.maxBatchSize)).map(r, [r.minBatchSize, r.maxBatchSize])",
        ),
        field_path=".numSpeculativeTokensPerBatchSize",
    ),
    Rule(
        id="R21",
        rule=f"!has({OWN_SCHEDULE}) || {OWN_SCHEDULE}.exists(r, r.minBatchSize == 1)",
        message="no range starts at batch size 1 (the first starts at %d): vLLM needs a K for every batch "
        "size, so start the first range at 1",
        args=(f"{OWN_SCHEDULE}.map(r, r.minBatchSize).min()",),
        field_path=".numSpeculativeTokensPerBatchSize",
    ),
    Rule(
        id="R21",
        rule=f"!has({OWN_SCHEDULE}) || self.method != 'extract_hidden_states'",
        message="extract_hidden_states drafts nothing (its K is 1 and only marks the step): remove "
        "numSpeculativeTokensPerBatchSize",
        field_path=".numSpeculativeTokensPerBatchSize",
        reason="FieldValueForbidden",
    ),
)


def in_force(r: str, n: str) -> str:
    """CEL: schedule range `r` sets the K of batch size `n`: the last range starting at or below it, since
    vLLM keeps a range's K through a gap after it and past the last range."""
    later = f"q.minBatchSize > {r}.minBatchSize && q.minBatchSize <= {n}"
    return f"({r}.minBatchSize <= {n} && !{SCHEDULE}.exists(q, {later}))"


def k_at(n: str) -> str:
    """CEL: the K of batch size `n` under the schedule (the range in force is unique, so its sum is its K)."""
    return f"{SCHEDULE}.filter(r, {in_force('r', n)}).map(r, r.numSpeculativeTokens).sum()"


def decode_size(n: str) -> str:
    """CEL: tokens in a decode step of `n` sequences, each verifying its drafts and one token more."""
    return f"({n} * ((has({SCHEDULE}) ? {k_at(n)} : {K}) + 1))"


# Capture sizes to render for graph.maxBatchSize: one decode step per batch size (CEL, evaluated by the
# renderer, so that the rules and the rendered sizes read the schedule the same way).
COMPUTED_CAPTURE_SIZES = f"{BATCHES}.filter(n, n <= self.graph.maxBatchSize).map(n, {decode_size('n')})"
# A batch size up to the largest capture size whose decode step has no capture size (explicit sizes, schedule).
_MISSING = (
    f"(!has(self.scheduling.maxNumSeqs) || n <= self.scheduling.maxNumSeqs) "
    f"&& self.graph.captureSizes.exists(t, t >= {decode_size('n')}) && !({decode_size('n')} in self.graph.captureSizes)"
)


ENGINE_RULES = (
    Rule(
        id="R22",
        rule=f"!has({SCHEDULE}) || !has(self.graph.captureSizes) || !({FULL_MODE}) || self.graph.captureSizes.all("
        f"s, {SCHEDULE}.exists(r, s % (r.numSpeculativeTokens + 1) == 0 "
        f"&& {in_force('r', 's / (r.numSpeculativeTokens + 1)')}))",
        message="capture sizes %s are no decode step's size under numSpeculativeTokensPerBatchSize in graph mode "
        "%s: a step of n sequences verifies n x (K+1) tokens, K being that of batch size n; drop them, or set "
        "graph.maxBatchSize and let the operator compute the sizes",
        args=(
            f"self.graph.captureSizes.filter(s, !{SCHEDULE}.exists(r, s % (r.numSpeculativeTokens + 1) == 0 "
            f"&& {in_force('r', 's / (r.numSpeculativeTokens + 1)')}))",
            "self.graph.mode",
        ),
        field_path=".graph.captureSizes",
    ),
    Rule(
        id="R22",
        rule=f"!has({SCHEDULE}) || !has(self.graph.captureSizes) || !({FULL_MODE}) || !{BATCHES}.exists(n, {_MISSING})",
        message="capture sizes miss %s, the decode steps of batch sizes %s under numSpeculativeTokensPerBatchSize "
        "(n x (K+1), K being that of batch size n): every batch size up to the largest captured one needs its "
        "size; add them, or set graph.maxBatchSize and let the operator compute the sizes",
        args=(
            f"{BATCHES}.filter(n, {_MISSING}).map(n, {decode_size('n')})",
            f"{BATCHES}.filter(n, {_MISSING})",
        ),
        field_path=".graph.captureSizes",
    ),
    Rule(
        id="R22",
        rule=f"!has({SCHEDULE}) || {SCHEDULE}.all(r, r.numSpeculativeTokens <= {K})",
        message="ranges %s (as [minBatchSize, maxBatchSize, K]) draft more than numSpeculativeTokens %d, the "
        "largest K the engine is built for: lower their K or raise numSpeculativeTokens",
        args=(
            f"{SCHEDULE}.filter(r, r.numSpeculativeTokens > {K})"
            ".map(r, [r.minBatchSize, r.maxBatchSize, r.numSpeculativeTokens])",
            K,
        ),
        field_path=".speculative.numSpeculativeTokensPerBatchSize",
    ),
    Rule(
        id="R22",
        rule=f"!has({SCHEDULE}) || self.parallelism.data == 1",
        message="vLLM ignores numSpeculativeTokensPerBatchSize with data parallelism %d (its ranks could pick "
        "different K and wait on each other) and drafts numSpeculativeTokens at every batch size: remove the "
        "schedule or set parallelism.data to 1",
        args=("self.parallelism.data",),
        field_path=".speculative.numSpeculativeTokensPerBatchSize",
        reason="FieldValueForbidden",
    ),
)
