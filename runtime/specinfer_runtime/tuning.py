"""spec.speculative.tuning: how the operator tunes K from what the engines measure, and where it may not."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule, cel_list
from specinfer_runtime.graph import FULL_MODE
from specinfer_runtime.tokens import ASCEND_MAX_SPECULATIVE_TOKENS, OWN_SCHEDULE, SCHEDULE, K

TuningMode = Literal["Off", "Recommend", "Auto"]


class TuningSettings(Section):
    """How the operator tunes K from what the engines measure. Not part of the engine's configuration:
    changing these settings restarts nothing."""

    mode: TuningMode = Field(
        default="Off",
        description="Off; Recommend: status.tuning.recommendation says which K would serve the most tokens per "
        "second, from the acceptance per draft position and the step time measured at each K, with an event "
        "when it changes; Auto: the operator also applies it as an effective K (the spec is left as written), "
        "each change through a canary judged on measured speed, and reverted when slower.",
    )
    min_k: int = Field(
        default=1, ge=1, le=ASCEND_MAX_SPECULATIVE_TOKENS, description="Smallest K the recommendation may choose."
    )
    max_k: int | None = Field(
        default=None,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description="Largest K the recommendation may choose; numSpeculativeTokens when unset, so that the spec's "
        "K is also the most the engine drafts.",
    )
    min_draft_tokens: int = Field(
        default=2000,
        ge=1,
        le=1_000_000_000,
        description="Draft tokens a K must have proposed in the telemetry window before its figures count.",
    )
    min_gain_percent: int = Field(
        default=5,
        ge=0,
        le=100,
        description="A recommendation changes (and Auto acts on it) only for at least this expected gain in tokens "
        "per second: measurements move by a few percent on their own.",
    )
    min_interval_seconds: int = Field(
        default=1800,
        ge=60,
        le=7 * 86400,
        description="Auto: at least this long between two changes of K, and before a reverted K is tried again.",
    )
    try_engine_adaptivity: bool = Field(
        default=True,
        description="Auto: once K has settled, try the engine's own per-request "
        "adaptivity where the method, image and graph mode run it (dspark: adaptive verification, else "
        "vLLM-Ascend's dynamic verification; dflash: dynamic verification) on a canary, and keep it only when "
        "requests decode at least minGainPercent faster; status.speculation.adaptivity says what serves.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="tuning",
            rule="!has(self.maxK) || self.minK <= self.maxK",
            message="minK %d exceeds maxK %d: set minK <= maxK",
            args=("self.minK", "self.maxK"),
            field_path=".minK",
        ),
    )


SPECULATIVE_RULES = (
    Rule(
        id="tuning",
        rule="!has(self.tuning) || self.tuning.mode == 'Off' || self.method != 'extract_hidden_states'",
        message="extract_hidden_states drafts nothing, so there is no K to tune: set tuning.mode Off",
        field_path=".tuning.mode",
        reason="FieldValueForbidden",
    ),
    Rule(
        id="tuning",
        rule=f"!has(self.tuning) || self.tuning.mode != 'Auto' || !has({OWN_SCHEDULE})",
        message="tuning.mode Auto sets one K for every batch size, and would override "
        "numSpeculativeTokensPerBatchSize: use mode Recommend (its recommendation can be a schedule), or "
        "remove the schedule",
        field_path=".tuning.mode",
        reason="FieldValueForbidden",
    ),
)

# The K tuning may choose: from minK to maxK (numSpeculativeTokens when unset).
_MAX_K = f"(has(self.speculative.tuning.maxK) ? self.speculative.tuning.maxK : {K})"
_TUNABLE_KS = (
    f"{cel_list(range(1, ASCEND_MAX_SPECULATIVE_TOKENS + 1))}"
    f".filter(k, k >= self.speculative.tuning.minK && k <= {_MAX_K})"
)

ENGINE_RULES = (
    Rule(
        id="tuning",
        rule=f"!has(self.speculative.tuning) || self.speculative.tuning.mode == 'Off' || has({SCHEDULE}) "
        f"|| ({K} >= self.speculative.tuning.minK && {K} <= {_MAX_K})",
        message="numSpeculativeTokens %d is outside the range tuning may choose from, minK %d to maxK %d: tuning "
        "starts from the spec's K and measures its neighbours, so the range must hold it: set "
        "numSpeculativeTokens within the range, or widen it",
        args=(K, "self.speculative.tuning.minK", _MAX_K),
        field_path=".speculative.tuning",
    ),
    Rule(
        id="tuning",
        rule=f"!has(self.speculative.tuning) || self.speculative.tuning.mode != 'Auto' "
        f"|| !has(self.graph.captureSizes) || !({FULL_MODE}) || {_TUNABLE_KS}.exists(k, k != {K} "
        "&& self.graph.captureSizes.all(s, s % (k + 1) == 0))",
        message="tuning.mode Auto changes K, but capture sizes %s are multiples of K+1 for no other K from "
        "minK %d to maxK %d in graph mode %s: set graph.maxBatchSize instead (the operator computes the sizes "
        "for each K), or use mode Recommend",
        args=("self.graph.captureSizes", "self.speculative.tuning.minK", _MAX_K, "self.graph.mode"),
        field_path=".speculative.tuning.mode",
    ),
)
