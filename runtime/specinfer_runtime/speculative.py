"""The speculative decoding method and its parameters (vLLM: `--speculative-config`)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import AfterValidator, Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule, cel_in, cel_list
from specinfer_runtime.sources import ModelReference, StorageVolume

# npu_fused_infer_attention_score handles at most 16 tokens per decode round and vLLM-Ascend needs
# num_speculative_tokens + 1 <= 15.
ASCEND_MAX_SPECULATIVE_TOKENS = 14

MethodName = Literal[
    "ngram",
    "suffix",
    "medusa",
    "eagle",
    "eagle3",
    "mtp",
    "dflash",
    "draft_model",
    "extract_hidden_states",
]
METHODS: tuple[str, ...] = get_args(MethodName)

# Model-specific MTP names that vLLM still accepts and rewrites to "mtp" with a deprecation warning.
MtpAlias = Literal[
    "deepseek_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "ernie_mtp",
    "exaone_moe_mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
]
MTP_ALIASES: tuple[str, ...] = get_args(MtpAlias)
MTP_NAMES = ("mtp", *MTP_ALIASES)
DRAFT_MODEL_METHODS = ("eagle", "eagle3", "dflash", "medusa", "draft_model")
EAGLE_HEAD_METHODS = ("eagle", "eagle3")
# Methods that run a drafter whose batch vLLM pads, and so can use async scheduling.
ASYNC_SCHEDULING_METHODS = ("eagle", "eagle3", *MTP_NAMES, "dflash", "draft_model")
# disablePaddedDrafterBatch changes something only for these; vLLM refuses it for the next ones (a draft
# model and parallel drafting need the padded batch; extract_hidden_states has no drafter).
PADDED_BATCH_METHODS = ("eagle", "eagle3", *MTP_NAMES)
PADDED_BATCH_ONLY_METHODS = ("draft_model", "dflash", "extract_hidden_states")
# vLLM switches a draft_model or medusa drafter to another method when its model name contains these.
METHOD_SWITCHING_NAMES = {"eagle-": "eagle", "eagle3": "eagle3", "dflash": "dflash", "dspark": "dspark"}
# Methods whose K vLLM would otherwise fill in by itself; the operator always renders it (R3).
DEFAULT_K_METHODS = ("suffix", *MTP_NAMES, "extract_hidden_states")

SUFFIX_DEFAULT_TREE_DEPTH = 24


class NgramConfig(Section):
    """Prompt-lookup (n-gram) proposer settings."""

    prompt_lookup_min: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Shortest n-gram to match in the prompt (vLLM: `prompt_lookup_min`).",
    )
    prompt_lookup_max: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Longest n-gram to match in the prompt (vLLM: `prompt_lookup_max`).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R7",
            rule="!has(self.promptLookupMin) || !has(self.promptLookupMax) "
            "|| self.promptLookupMin <= self.promptLookupMax",
            message="promptLookupMin %d exceeds promptLookupMax %d; set promptLookupMin <= promptLookupMax",
            args=("self.promptLookupMin", "self.promptLookupMax"),
            field_path=".promptLookupMin",
        ),
    )


class SuffixConfig(Section):
    """Suffix decoding (Arctic Inference) settings; the runtime image must carry arctic-inference."""

    max_tree_depth: int = Field(
        default=SUFFIX_DEFAULT_TREE_DEPTH,
        ge=1,
        le=1024,
        description=(
            "Depth of the suffix trees, which caps the tokens drafted per step "
            "(vLLM: `suffix_decoding_max_tree_depth`). When numSpeculativeTokens is unset the "
            "operator renders min(maxTreeDepth, 14)."
        ),
    )
    max_cached_requests: int = Field(
        default=10000,
        ge=0,
        le=10_000_000,
        description="Requests whose outputs stay in the global suffix cache; 0 disables it "
        "(vLLM: `suffix_decoding_max_cached_requests`).",
    )
    max_spec_factor: float = Field(
        default=1.0,
        ge=0,
        le=1000,
        description="Drafts at most max_spec_factor x the matched prefix length "
        "(vLLM: `suffix_decoding_max_spec_factor`).",
    )
    min_token_prob: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Drafted tokens need at least this estimated probability (vLLM: `suffix_decoding_min_token_prob`).",
    )


class HiddenStatesConfig(Section):
    """Hidden-state extraction (training data for EAGLE drafters)."""

    layer_ids: Annotated[
        list[Annotated[int, Field(ge=0, le=1024)]],
        Field(
            min_length=1,
            max_length=64,
            description="Layers whose hidden states are saved "
            "(vLLM: `draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids`).",
        ),
    ]
    storage: StorageVolume = Field(
        description="Volume the `.safetensors` files are written to "
        "(vLLM: `kv_connector_extra_config.shared_storage_path` of the ExampleHiddenStatesConnector)."
    )


class RejectionSamplerConfig(Section):
    """vLLM-Ascend rejection sampler options; both trade a little precision for throughput."""

    block_verify: bool = Field(
        default=False,
        description="Verify the drafts as one block by cumulative probability (vLLM-Ascend: "
        "`rejection_sampler_config.enable_block_verify`); useful from numSpeculativeTokens 3 on.",
    )
    entropy_verify: bool = Field(
        default=False,
        description="Entropy-adjusted acceptance threshold (vLLM-Ascend: "
        "`rejection_sampler_config.enable_entropy_verify`).",
    )
    posterior_threshold: float = Field(
        default=0.95,
        gt=0,
        le=1,
        description="Upper bound of the entropy-adjusted threshold, in (0, 1] (vLLM-Ascend: `posterior_threshold`).",
    )
    posterior_alpha: float = Field(
        default=0.4,
        ge=0,
        le=100,
        description="How strongly entropy lowers the threshold; 0 disables the effect "
        "(vLLM-Ascend: `posterior_alpha`).",
    )


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


def _section_only_for(field: str, methods: tuple[str, ...], label: str) -> Rule:
    return Rule(
        id="method-section",
        rule=f"!has(self.{field}) || {cel_in('self.method', methods)}",
        message=f"{field} only applies to method {label}, not %s; remove {field}",
        args=("self.method",),
        field_path=f".{field}",
        reason="FieldValueForbidden",
    )


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

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="tuning",
            rule="!has(self.maxK) || self.minK <= self.maxK",
            message="minK %d exceeds maxK %d: set minK <= maxK",
            args=("self.minK", "self.maxK"),
            field_path=".minK",
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


SCHEDULE_FIELD = "numSpeculativeTokensPerBatchSize"
SCHEDULE = f"self.{SCHEDULE_FIELD}"


class SpeculativeConfig(Section):
    """The speculative decoding method and its parameters (vLLM: `--speculative-config`)."""

    method: Literal[MethodName, MtpAlias] = Field(
        description=(
            "Proposer (vLLM: `method`): ngram, suffix (Arctic Inference), medusa, eagle, eagle3, mtp, "
            "dflash, draft_model or extract_hidden_states. vLLM's model-specific MTP names "
            "(deepseek_mtp, ...) are accepted and rendered as mtp."
        )
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=ASCEND_MAX_SPECULATIVE_TOKENS,
        description=(
            "Tokens drafted per step, K (vLLM: `num_speculative_tokens`). At most 14 on Ascend, where a "
            "decode round verifies at most K+1 = 15 tokens. Required except for suffix (defaults to "
            "min(suffix.maxTreeDepth, 14)), mtp and extract_hidden_states (default 1)."
        ),
    )
    draft_model: ModelReference | None = Field(
        default=None,
        description="The draft checkpoint (vLLM: `model`); required for eagle, eagle3, dflash, medusa and "
        "draft_model, refused for the others.",
    )
    draft_tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description=(
            "Tensor parallel size of the drafter (vLLM: `draft_tensor_parallel_size`): 1 or "
            "parallelism.tensor. EAGLE heads run with 1, which is rendered when unset."
        ),
    )
    disable_padded_drafter_batch: bool = Field(
        default=False,
        description="Let drafter batches hold sequences of different lengths (vLLM: "
        "`disable_padded_drafter_batch`); only eagle, eagle3, mtp, dflash, draft_model and "
        "extract_hidden_states use it.",
    )
    num_speculative_tokens_per_batch_size: (
        Annotated[
            list[BatchSizeRange],
            AfterValidator(_distinct_starts),
            Field(
                min_length=1,
                max_length=MAX_SCHEDULE_RANGES,
                json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["minBatchSize"]},
            ),
        ]
        | None
    ) = Field(
        default=None,
        description=(
            "K by batch size (vLLM: `num_speculative_tokens_per_batch_size`, rendered as [[min, max, K], ...]): "
            "verifying K+1 tokens per sequence costs more as batches grow, so large batches often do best with "
            "a smaller K, or none. Ranges are inclusive, listed in order without overlap, the first starting "
            "at batch size 1; a batch size between two ranges, or beyond the last, keeps the K before it. "
            "numSpeculativeTokens stays the largest K."
        ),
    )
    tuning: TuningSettings | None = Field(
        default=None,
        description="Tuning K from measured acceptance and step time (operator only, not rendered for vLLM).",
    )
    ngram: NgramConfig | None = Field(default=None, description="Settings of method ngram.")
    suffix: SuffixConfig | None = Field(default=None, description="Settings of method suffix.")
    hidden_states: HiddenStatesConfig | None = Field(
        default=None, description="Settings of method extract_hidden_states (required there)."
    )
    rejection_sampler: RejectionSamplerConfig | None = Field(
        default=None,
        description="Block Verify / Entropy Verify (vLLM-Ascend: `--additional-config` `rejection_sampler_config`).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R3",
            rule=f"has(self.numSpeculativeTokens) || {cel_in('self.method', DEFAULT_K_METHODS)}",
            message="method %s needs an explicit numSpeculativeTokens (vLLM num_speculative_tokens): "
            f"set a value from 1 to {ASCEND_MAX_SPECULATIVE_TOKENS}",
            args=("self.method",),
            field_path=".numSpeculativeTokens",
            reason="FieldValueRequired",
        ),
        Rule(
            id="R4",
            rule=f"has(self.draftModel) || !({cel_in('self.method', DRAFT_MODEL_METHODS)})",
            message="method %s needs a draft model: set draftModel.name to the draft checkpoint "
            "(vLLM speculative_config.model)",
            args=("self.method",),
            field_path=".draftModel",
            reason="FieldValueRequired",
        ),
        Rule(
            id="R4",
            rule=f"!has(self.draftModel) || {cel_in('self.method', DRAFT_MODEL_METHODS)}",
            message=f"method %s takes no draft model (only {', '.join(DRAFT_MODEL_METHODS)} do; mtp reuses the "
            "target model): remove draftModel",
            args=("self.method",),
            field_path=".draftModel",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R5",
            rule="!has(self.draftTensorParallelSize) || self.draftTensorParallelSize == 1 "
            f"|| !({cel_in('self.method', EAGLE_HEAD_METHODS)})",
            message="draftTensorParallelSize %d given, but %s draft heads run without tensor parallelism: "
            "set 1 or leave it unset",
            args=("self.draftTensorParallelSize", "self.method"),
            field_path=".draftTensorParallelSize",
        ),
        Rule(
            id="R5",
            rule=f"!has(self.draftTensorParallelSize) || {cel_in('self.method', (*DRAFT_MODEL_METHODS, *MTP_NAMES))}",
            message="method %s runs no draft model: remove draftTensorParallelSize",
            args=("self.method",),
            field_path=".draftTensorParallelSize",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R12",
            rule=f"!self.disablePaddedDrafterBatch || !({cel_in('self.method', PADDED_BATCH_ONLY_METHODS)})",
            message="vLLM runs method %s only with a padded drafter batch (draft models and parallel drafting "
            "need it, extract_hidden_states drafts nothing): remove disablePaddedDrafterBatch",
            args=("self.method",),
            field_path=".disablePaddedDrafterBatch",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R20",
            rule=f"!has(self.draftModel) || !({cel_in('self.method', ('draft_model', 'medusa'))}) || "
            f"!{cel_list(tuple(METHOD_SWITCHING_NAMES))}.exists(s, self.draftModel.name.lowerAscii().contains(s))",
            message="draft model name %s makes vLLM run another method than %s (it switches on names containing "
            + ", ".join(f"'{k}' ({v})" for k, v in METHOD_SWITCHING_NAMES.items())
            + "): set that method if the checkpoint is one, or load it under another name from a volume",
            args=("self.draftModel.name", "self.method"),
            field_path=".draftModel.name",
        ),
        Rule(
            id="R21",
            rule=f"!has({SCHEDULE}) || {SCHEDULE}.map(r, r.minBatchSize).isSorted()",
            message="numSpeculativeTokensPerBatchSize starts its ranges at batch sizes %s: list them from the "
            "smallest batch size up",
            args=(f"{SCHEDULE}.map(r, r.minBatchSize)",),
            field_path=".numSpeculativeTokensPerBatchSize",
        ),
        Rule(
            id="R21",
            rule=f"!has({SCHEDULE}) || {SCHEDULE}.all(r, {SCHEDULE}.all(q, "
            "q.minBatchSize <= r.minBatchSize || q.minBatchSize > r.maxBatchSize))",
            message="ranges overlap: %s (as [minBatchSize, maxBatchSize]) hold batch sizes a later range starts "
            "at; end each range before the next one starts",
            args=(
                f"{SCHEDULE}.filter(r, {SCHEDULE}.exists(q, q.minBatchSize > r.minBatchSize "
                "&& q.minBatchSize <= r.maxBatchSize)).map(r, [r.minBatchSize, r.maxBatchSize])",
            ),
            field_path=".numSpeculativeTokensPerBatchSize",
        ),
        Rule(
            id="R21",
            rule=f"!has({SCHEDULE}) || {SCHEDULE}.exists(r, r.minBatchSize == 1)",
            message="no range starts at batch size 1 (the first starts at %d): vLLM needs a K for every batch "
            "size, so start the first range at 1",
            args=(f"{SCHEDULE}.map(r, r.minBatchSize).min()",),
            field_path=".numSpeculativeTokensPerBatchSize",
        ),
        Rule(
            id="R21",
            rule=f"!has({SCHEDULE}) || self.method != 'extract_hidden_states'",
            message="extract_hidden_states drafts nothing (its K is 1 and only marks the step): remove "
            "numSpeculativeTokensPerBatchSize",
            field_path=".numSpeculativeTokensPerBatchSize",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="tuning",
            rule="!has(self.tuning) || self.tuning.mode == 'Off' || self.method != 'extract_hidden_states'",
            message="extract_hidden_states drafts nothing, so there is no K to tune: set tuning.mode Off",
            field_path=".tuning.mode",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="tuning",
            rule=f"!has(self.tuning) || self.tuning.mode != 'Auto' || !has({SCHEDULE})",
            message="tuning.mode Auto sets one K for every batch size, and would override "
            "numSpeculativeTokensPerBatchSize: use mode Recommend (its recommendation can be a schedule), or "
            "remove the schedule",
            field_path=".tuning.mode",
            reason="FieldValueForbidden",
        ),
        _section_only_for("ngram", ("ngram",), "ngram"),
        _section_only_for("suffix", ("suffix",), "suffix"),
        _section_only_for("hiddenStates", ("extract_hidden_states",), "extract_hidden_states"),
        Rule(
            id="R9",
            rule="has(self.hiddenStates) || self.method != 'extract_hidden_states'",
            message="extract_hidden_states needs hiddenStates.layerIds and hiddenStates.storage",
            field_path=".hiddenStates",
            reason="FieldValueRequired",
        ),
        Rule(
            id="R9",
            rule="!has(self.numSpeculativeTokens) || self.numSpeculativeTokens == 1 "
            "|| self.method != 'extract_hidden_states'",
            message="numSpeculativeTokens %d given, but extract_hidden_states drafts nothing: set 1 or leave it unset",
            args=("self.numSpeculativeTokens",),
            field_path=".numSpeculativeTokens",
        ),
    )

    def effective_method(self) -> str:
        """The method vLLM runs: model-specific MTP names are its aliases of mtp."""
        return "mtp" if self.method in MTP_ALIASES else self.method
