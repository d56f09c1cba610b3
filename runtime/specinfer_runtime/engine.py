"""The engine configuration: what vLLM and vLLM-Ascend accept, and the rules they impose.

These models are the `spec` of a SpeculativeInference minus its Kubernetes parts. The operator
renders them into the pod's engine config; the runtime reads that config back with the same models.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import AfterValidator, Field

from specinfer_runtime.base import Section, section_field, unique
from specinfer_runtime.celrules import Rule, cel_list, cel_map, evaluate

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
PADDED_BATCH_METHODS = (*ASYNC_SCHEDULING_METHODS, "extract_hidden_states")
# Methods whose K vLLM would otherwise fill in by itself; the operator always renders it (R3).
DEFAULT_K_METHODS = ("suffix", *MTP_NAMES, "extract_hidden_states")

GraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
FULL_GRAPH_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")

SUFFIX_DEFAULT_TREE_DEPTH = 24

# Distinct token counts; in the CRD `x-kubernetes-list-type: set` refuses duplicates the same way.
CaptureSizes = Annotated[
    list[Annotated[int, Field(ge=1, le=16384)]],
    AfterValidator(unique),
    Field(json_schema_extra={"x-kubernetes-list-type": "set"}),
]

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _in(expr: str, values: tuple[str, ...]) -> str:
    return f"{expr} in {cel_list(values)}"


def exactly_one(fields: tuple[str, ...], what: str) -> Rule:
    """One of several alternative sub-objects must be set."""
    flags = ", ".join(f"has(self.{f})" for f in fields)
    names = ", ".join(fields)
    return Rule(
        id="one-of",
        rule=f"[{flags}].filter(x, x).size() == 1",
        message=f"set exactly one of {names} for the {what}",
    )


# ---------------------------------------------------------------------------------------------------
# Where models come from


class PersistentVolumeClaimSource(Section):
    """A PersistentVolumeClaim holding the model files."""

    claim_name: str = Field(
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Name of the PersistentVolumeClaim in the namespace.",
    )
    sub_path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^[^/]",
        description="Relative directory inside the claim that holds this model; the claim's root when unset.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="volume",
            rule="!has(self.subPath) || !self.subPath.split('/').exists(p, p == '..')",
            message="subPath may not contain '..': give a directory inside the claim",
            field_path=".subPath",
        ),
    )


class HostPathSource(Section):
    """A directory on the node (models pre-staged on every NPU node)."""

    path: str = Field(
        max_length=1024,
        pattern=r"^/[^\x00]*$",
        description="Absolute path of the model directory on the node.",
    )


class SecretKeyReference(Section):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="Name of the Secret.")
    key: str = Field(default="token", max_length=253, description="Key inside the Secret.")


class HuggingFaceSource(Section):
    """Download the model from the Hugging Face Hub at start-up."""

    token_secret_ref: SecretKeyReference | None = Field(
        default=None, description="Secret key holding a Hub token, exported as HF_TOKEN (gated models)."
    )
    revision: str | None = Field(
        default=None,
        max_length=128,
        description="Branch, tag or commit of the repository (vLLM: `revision`).",
    )


class ModelSource(Section):
    """Where the model files are. Without a source, `name` is fetched from the Hugging Face Hub."""

    pvc: PersistentVolumeClaimSource | None = Field(default=None, description="Load from a PVC.")
    host_path: HostPathSource | None = Field(default=None, description="Load from a node directory.")
    hugging_face: HuggingFaceSource | None = Field(
        default=None, description="Download `name` from the Hugging Face Hub."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (exactly_one(("pvc", "hostPath", "huggingFace"), "model source"),)

    def volume(self) -> PersistentVolumeClaimSource | HostPathSource | None:
        return self.pvc or self.host_path


class StorageVolume(Section):
    """A writable volume."""

    pvc: PersistentVolumeClaimSource | None = Field(default=None, description="A PersistentVolumeClaim.")
    host_path: HostPathSource | None = Field(default=None, description="A directory on the node.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (exactly_one(("pvc", "hostPath"), "storage"),)


MODEL_ROOT = "/models"
HIDDEN_STATES_PATH = "/hidden-states"
# vLLM listens here inside the pod; spec.service.port is the Service's port.
ENGINE_PORT = 8000


class ModelReference(Section):
    """A model checkpoint: a Hugging Face repository id, or files on a volume."""

    name: str = Field(
        min_length=1,
        max_length=256,
        description=(
            "Hugging Face repository id (e.g. `meta-llama/Meta-Llama-3.1-8B-Instruct`). With a PVC or "
            "hostPath source it names the model and the volume directory is loaded instead."
        ),
    )
    source: ModelSource | None = Field(
        default=None, description="Where the files are; the Hugging Face Hub when unset."
    )

    def load_path(self, role: str) -> str:
        """What vLLM is given: the mount point of a volume source, else the repository id."""
        if self.source and self.source.volume():
            return f"{MODEL_ROOT}/{role}"
        return self.name


class TargetModel(ModelReference):
    """The model being served (the verifier)."""

    served_model_name: str | None = Field(
        default=None,
        max_length=256,
        description="Model name clients use in API requests (vLLM: `--served-model-name`); defaults to `name`.",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, le=10_485_760, description="Context length (vLLM: `--max-model-len`)."
    )
    quantization: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9_-]+$",
        description="Weight quantization method (vLLM: `--quantization`), e.g. `ascend` for W8A8 checkpoints.",
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow model code from the checkpoint (vLLM: `--trust-remote-code`)."
    )

    def served_name(self) -> str:
        return self.served_model_name or self.name


# ---------------------------------------------------------------------------------------------------
# Parallelism


class Parallelism(Section):
    """How the engine spreads over NPUs; a pod requests tensor x pipeline x data NPUs."""

    tensor: int = Field(default=1, ge=1, le=64, description="Tensor parallel size (vLLM: `--tensor-parallel-size`).")
    pipeline: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Pipeline parallel size (vLLM: `--pipeline-parallel-size`). Must stay 1: vLLM does not "
            "compose pipeline parallelism with speculative decoding."
        ),
    )
    data: int = Field(default=1, ge=1, le=64, description="Data parallel size (vLLM: `--data-parallel-size`).")
    expert: bool = Field(
        default=False, description="Expert parallelism for MoE models (vLLM: `--enable-expert-parallel`)."
    )

    def npus(self) -> int:
        return self.tensor * self.pipeline * self.data


# ---------------------------------------------------------------------------------------------------
# Speculative decoding


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


def _section_only_for(field: str, methods: tuple[str, ...], label: str) -> Rule:
    return Rule(
        id="method-section",
        rule=f"!has(self.{field}) || {_in('self.method', methods)}",
        message=f"{field} only applies to method {label}, not %s; remove {field}",
        args=("self.method",),
        field_path=f".{field}",
        reason="FieldValueForbidden",
    )


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
            rule=f"has(self.numSpeculativeTokens) || {_in('self.method', DEFAULT_K_METHODS)}",
            message="method %s needs an explicit numSpeculativeTokens (vLLM num_speculative_tokens): "
            f"set a value from 1 to {ASCEND_MAX_SPECULATIVE_TOKENS}",
            args=("self.method",),
            field_path=".numSpeculativeTokens",
            reason="FieldValueRequired",
        ),
        Rule(
            id="R4",
            rule=f"has(self.draftModel) || !({_in('self.method', DRAFT_MODEL_METHODS)})",
            message="method %s needs a draft model: set draftModel.name to the draft checkpoint "
            "(vLLM speculative_config.model)",
            args=("self.method",),
            field_path=".draftModel",
            reason="FieldValueRequired",
        ),
        Rule(
            id="R4",
            rule=f"!has(self.draftModel) || {_in('self.method', DRAFT_MODEL_METHODS)}",
            message=f"method %s takes no draft model (only {', '.join(DRAFT_MODEL_METHODS)} do; mtp reuses the "
            "target model): remove draftModel",
            args=("self.method",),
            field_path=".draftModel",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R5",
            rule="!has(self.draftTensorParallelSize) || self.draftTensorParallelSize == 1 "
            f"|| !({_in('self.method', EAGLE_HEAD_METHODS)})",
            message="draftTensorParallelSize %d given, but %s draft heads run without tensor parallelism: "
            "set 1 or leave it unset",
            args=("self.draftTensorParallelSize", "self.method"),
            field_path=".draftTensorParallelSize",
        ),
        Rule(
            id="R5",
            rule=f"!has(self.draftTensorParallelSize) || {_in('self.method', (*DRAFT_MODEL_METHODS, *MTP_NAMES))}",
            message="method %s runs no draft model: remove draftTensorParallelSize",
            args=("self.method",),
            field_path=".draftTensorParallelSize",
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


class GraphConfig(Section):
    """Graph capture (ACL graphs on Ascend; vLLM: `--compilation-config`)."""

    mode: GraphMode | None = Field(
        default=None,
        description=(
            "Graph mode (vLLM: `cudagraph_mode`): NONE (eager), PIECEWISE, FULL, FULL_DECODE_ONLY or "
            "FULL_AND_PIECEWISE. In the full modes the verification step has a fixed shape, so every "
            "capture size must be a multiple of K+1. vLLM-Ascend's default when unset."
        ),
    )
    capture_sizes: CaptureSizes | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description=(
            "Token counts to capture graphs for (vLLM: `cudagraph_capture_sizes`). In full modes each "
            "is n x (K+1) for a batch size n, e.g. [5, 10, 15, 20] for K = 4 and batches 1-4."
        ),
    )
    max_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Instead of captureSizes: capture n x (K+1) for every batch size n from 1 to this value.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R6",
            rule="!(has(self.captureSizes) && has(self.maxBatchSize))",
            message="set captureSizes or maxBatchSize, not both",
            field_path=".maxBatchSize",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R6",
            rule="!(has(self.captureSizes) || has(self.maxBatchSize)) || (has(self.mode) && self.mode != 'NONE')",
            message="capture sizes need a graph mode: set mode to PIECEWISE or a FULL mode",
            field_path=".mode",
            reason="FieldValueRequired",
        ),
    )


class SchedulingConfig(Section):
    """Scheduler settings."""

    async_scheduling: bool = Field(
        default=False,
        description="Overlap scheduling with execution (vLLM: `--async-scheduling`); only with eagle, "
        "eagle3, mtp, dflash and draft_model, and not with disablePaddedDrafterBatch.",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, le=65536, description="Most sequences in one batch (vLLM: `--max-num-seqs`)."
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10_485_760,
        description="Most tokens in one batch (vLLM: `--max-num-batched-tokens`).",
    )


# Flags the operator renders itself, and the spec field to use instead; `engineArgs` may not set them.
OWNED_FLAGS: dict[str, str] = {
    "--model": "spec.model.name",
    "--served-model-name": "spec.model.servedModelName",
    "--port": "spec.service.port",
    "--host": "spec.service",
    "--max-model-len": "spec.model.maxModelLen",
    "--quantization": "spec.model.quantization",
    "-q": "spec.model.quantization",
    "--trust-remote-code": "spec.model.trustRemoteCode",
    "--revision": "spec.model.source.huggingFace.revision",
    "--tensor-parallel-size": "spec.parallelism.tensor",
    "-tp": "spec.parallelism.tensor",
    "--pipeline-parallel-size": "spec.parallelism.pipeline",
    "-pp": "spec.parallelism.pipeline",
    "--data-parallel-size": "spec.parallelism.data",
    "-dp": "spec.parallelism.data",
    "--enable-expert-parallel": "spec.parallelism.expert",
    "-ep": "spec.parallelism.expert",
    "--speculative-config": "spec.speculative",
    "-sc": "spec.speculative",
    "--compilation-config": "spec.graph",
    "-cc": "spec.graph",
    "-O": "spec.graph",
    "--enforce-eager": "spec.graph.mode NONE",
    "--additional-config": "spec.speculative.rejectionSampler",
    "--kv-transfer-config": "spec.speculative.hiddenStates",
    "--async-scheduling": "spec.scheduling.asyncScheduling",
    "--no-async-scheduling": "spec.scheduling.asyncScheduling",
    "--max-num-seqs": "spec.scheduling.maxNumSeqs",
    "--max-num-batched-tokens": "spec.scheduling.maxNumBatchedTokens",
}
# The flag name of an argument: `--a_b.c=v` and `--a-b` both name `--a-b` (vLLM accepts underscores
# and dotted sub-keys); `-O3` names `-O`.
_FLAG = "(a.startsWith('-O') ? '-O' : a.split('=')[0].split('.')[0].replace('_', '-'))"
_OWNED = cel_map(OWNED_FLAGS)


_DEPTH = f"(has(self.speculative.suffix) ? self.speculative.suffix.maxTreeDepth : {SUFFIX_DEFAULT_TREE_DEPTH})"
_CAP = ASCEND_MAX_SPECULATIVE_TOKENS
# K as rendered (R3): given, else min(suffix depth, 14) for suffix, else 1. The CRD rules inline this
# expression and the renderer evaluates it, so the default lives in one place.
K = (
    "(has(self.speculative.numSpeculativeTokens) ? self.speculative.numSpeculativeTokens : "
    f"self.speculative.method == 'suffix' ? ({_DEPTH} < {_CAP} ? {_DEPTH} : {_CAP}) : 1)"
)
FULL_MODE = f"has(self.graph.mode) && {_in('self.graph.mode', FULL_GRAPH_MODES)}"


class EngineSpec(Section):
    """Everything the vLLM engine in each pod is started with."""

    model: TargetModel = Field(description="The served (target) model.")
    parallelism: Parallelism = section_field(Parallelism, "Parallelism of each engine (one pod).")
    speculative: SpeculativeConfig = Field(description="Speculative decoding (vLLM: `--speculative-config`).")
    graph: GraphConfig = section_field(GraphConfig, "Graph capture (vLLM: `--compilation-config`).")
    scheduling: SchedulingConfig = section_field(SchedulingConfig, "Scheduler settings.")
    engine_args: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None,
        max_length=64,
        description=(
            'Extra `vllm serve` arguments, appended verbatim (e.g. ["--seed", "1024"]). Flags the '
            "operator renders from the spec (model, port, parallelism, --speculative-config, "
            "--compilation-config, --additional-config, ...) are refused here."
        ),
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R5",
            rule="!has(self.speculative.draftTensorParallelSize) || self.speculative.draftTensorParallelSize == 1 "
            "|| self.speculative.draftTensorParallelSize == self.parallelism.tensor",
            message="draftTensorParallelSize %d given; it must be 1 or parallelism.tensor (%d)",
            args=("self.speculative.draftTensorParallelSize", "self.parallelism.tensor"),
            field_path=".speculative.draftTensorParallelSize",
        ),
        Rule(
            id="R6",
            rule=f"!has(self.graph.captureSizes) || !({FULL_MODE}) "
            f"|| self.graph.captureSizes.all(s, s % ({K} + 1) == 0)",
            message="every capture size must be a multiple of K+1 = %d in graph mode %s (numSpeculativeTokens %d); "
            "not multiples: %s; use n*(K+1), e.g. %s for batch sizes 1-4, or set graph.maxBatchSize",
            args=(
                f"{K} + 1",
                "self.graph.mode",
                K,
                f"self.graph.captureSizes.filter(s, s % ({K} + 1) != 0)",
                f"[1, 2, 3, 4].map(n, n * ({K} + 1))",
            ),
            field_path=".graph.captureSizes",
        ),
        Rule(
            id="R6",
            rule=f"!has(self.graph.captureSizes) || !has(self.scheduling.maxNumSeqs) || !({FULL_MODE}) "
            f"|| self.graph.captureSizes.all(s, s <= self.scheduling.maxNumSeqs * ({K} + 1))",
            message="capture sizes may not exceed scheduling.maxNumSeqs x (K+1) = %d; too large: %s; "
            "drop them or raise scheduling.maxNumSeqs",
            args=(
                f"self.scheduling.maxNumSeqs * ({K} + 1)",
                f"self.graph.captureSizes.filter(s, s > self.scheduling.maxNumSeqs * ({K} + 1))",
            ),
            field_path=".graph.captureSizes",
        ),
        Rule(
            id="R6",
            rule="!has(self.graph.maxBatchSize) || !has(self.scheduling.maxNumSeqs) "
            "|| self.graph.maxBatchSize <= self.scheduling.maxNumSeqs",
            message="maxBatchSize %d exceeds scheduling.maxNumSeqs %d; lower it or raise maxNumSeqs",
            args=("self.graph.maxBatchSize", "self.scheduling.maxNumSeqs"),
            field_path=".graph.maxBatchSize",
        ),
        Rule(
            id="R11",
            rule=f"!self.scheduling.asyncScheduling || {_in('self.speculative.method', ASYNC_SCHEDULING_METHODS)}",
            message="asyncScheduling is only supported with eagle, eagle3, mtp, dflash and draft_model, not %s: "
            "set it to false",
            args=("self.speculative.method",),
            field_path=".scheduling.asyncScheduling",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R11",
            rule="!(self.scheduling.asyncScheduling && self.speculative.disablePaddedDrafterBatch)",
            message="asyncScheduling cannot be combined with speculative.disablePaddedDrafterBatch: "
            "turn one of them off",
            field_path=".scheduling.asyncScheduling",
            reason="FieldValueForbidden",
        ),
        Rule(
            id="R13",
            rule="self.parallelism.pipeline == 1",
            message="pipeline %d given, but vLLM does not compose pipeline parallelism with speculative decoding: "
            "set 1 and use tensor or data parallelism",
            args=("self.parallelism.pipeline",),
            field_path=".parallelism.pipeline",
        ),
        Rule(
            id="R15",
            rule=f"!has(self.engineArgs) || self.engineArgs.all(a, !({_FLAG} in {_OWNED}))",
            message="flags rendered from the spec cannot be set here: %s",
            args=(
                f"self.engineArgs.filter(a, {_FLAG} in {_OWNED}).map(a, {_FLAG} + ' (set ' + {_OWNED}[{_FLAG}] + ')')",
            ),
            field_path=".engineArgs",
            reason="FieldValueForbidden",
        ),
    )

    def effective_k(self) -> int:
        """K as rendered, by the same expression the CRD rules use."""
        return int(evaluate(K, self.dump()))

    def capture_sizes(self) -> list[int]:
        """The capture sizes to render: given, or n x (K+1) for n up to maxBatchSize."""
        if self.graph.capture_sizes:
            return list(self.graph.capture_sizes)
        if self.graph.max_batch_size:
            step = self.effective_k() + 1
            return [n * step for n in range(1, self.graph.max_batch_size + 1)]
        return []
