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
    """CEL: the K of batch size `n` under the schedule: that of the range in force (there is one at most), 0
    without one."""
    return f"({SCHEDULE}.filter(r, {in_force('r', n)}).map(r, r.numSpeculativeTokens) + [0])[0]"


def decode_size(n: str) -> str:
    """CEL: tokens in a decode step of `n` sequences, each verifying its drafts and one token more."""
    return f"({n} * ((has({SCHEDULE}) ? {k_at(n)} : {K}) + 1))"


# Capture sizes to render for graph.maxBatchSize: one decode step per batch size (CEL, evaluated by the
# renderer, so that the rules and the rendered sizes read the schedule the same way).
COMPUTED_CAPTURE_SIZES = f"{BATCHES}.filter(n, n <= self.graph.maxBatchSize).map(n, {decode_size('n')})"

# The rules below look a K up for every capture size and every batch size, so they work out once, as
# `spans`, where each range is in force: [first batch size, first batch size of the next range (past the
# largest batch size after the last), K]. `[x].exists(v, ...)` binds x to v: CEL has no variables.
_NEXT = f"({SCHEDULE}.filter(q, q.minBatchSize > r.minBatchSize).map(q, q.minBatchSize) + [65537]).min()"
_SPANS = f"[{SCHEDULE}.map(r, [r.minBatchSize, {_NEXT}, r.numSpeculativeTokens])]"


def _spanned(body: str) -> str:
    """CEL: `body`, with `spans` bound, as a list's single value."""
    return f"{_SPANS}.map(spans, {body})[0]"


def _k_in(n: str) -> str:
    """CEL: the K `spans` give batch size `n`, as `k_at`."""
    return f"(spans.filter(t, t[0] <= {n} && {n} < t[1]).map(t, t[2]) + [0])[0]"


# A capture size that is no decode step: no range in force at s / (K+1) whose K+1 divides it.
_STRAY = "!spans.exists(t, s % (t[2] + 1) == 0 && t[0] <= s / (t[2] + 1) && s / (t[2] + 1) < t[1])"


def _missing(n: str) -> str:
    """CEL: batch size `n` has a decode step up to `top` (the largest capture size) and no capture size."""
    return (
        f"(!has(self.scheduling.maxNumSeqs) || {n} <= self.scheduling.maxNumSeqs) "
        f"&& [{n} * ({_k_in(n)} + 1)].exists(d, top >= d && !(d in self.graph.captureSizes))"
    )


_LARGEST = "[self.graph.captureSizes.max()]"  # bound to `top`


ENGINE_RULES = (
    Rule(
        id="R22",
        rule=f"!has({SCHEDULE}) || !has(self.graph.captureSizes) || !({FULL_MODE}) "
        f"|| {_SPANS}.all(spans, self.graph.captureSizes.all(s, !({_STRAY})))",
        message="capture sizes %s are no decode step's size under numSpeculativeTokensPerBatchSize in graph mode "
        "%s: a step of n sequences verifies n x (K+1) tokens, K being that of batch size n; drop them, or set "
        "graph.maxBatchSize and let the operator compute the sizes",
        args=(_spanned(f"self.graph.captureSizes.filter(s, {_STRAY})"), "self.graph.mode"),
        field_path=".graph.captureSizes",
    ),
    Rule(
        id="R22",
        rule=f"!has({SCHEDULE}) || !has(self.graph.captureSizes) || !({FULL_MODE}) "
        f"|| !{_SPANS}.exists(spans, {_LARGEST}.exists(top, {BATCHES}.exists(n, {_missing('n')})))",
        message="capture sizes miss %s, the decode steps of batch sizes %s under numSpeculativeTokensPerBatchSize "
        "(n x (K+1), K being that of batch size n): every batch size up to the largest captured one needs its "
        "size; add them, or set graph.maxBatchSize and let the operator compute the sizes",
        args=(
            _spanned(f"{_LARGEST}.map(top, {BATCHES}.filter(n, {_missing('n')}).map(n, n * ({_k_in('n')} + 1)))[0]"),
            _spanned(f"{_LARGEST}.map(top, {BATCHES}.filter(n, {_missing('n')}))[0]"),
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
