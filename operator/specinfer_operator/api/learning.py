"""spec.learning: drafts that learn from the traffic they serve.

The engines record a share of the prompts they serve (runtime/specinfer_runtime/samples.py) on a claim the
resource owns; when a trigger fires, a Job the resource owns has the target answer those prompts again while
vLLM's extract_hidden_states path saves what the target computed, trains the draft in force on it, and writes
the next draft generation beside the samples. That generation is a new configuration: it serves only through
the canary, judged on speed, and is promoted or rolled back. Nothing leaves the namespace, and the claim goes
with the resource.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from specinfer_operator.api.container import IMAGE_TRIMMED
from specinfer_operator.api.quantities import Bytes, Cores
from specinfer_runtime.base import CelRules, Section, section_field
from specinfer_runtime.celrules import Rule, cel_string
from specinfer_runtime.prompts import MAX_PATTERN_LENGTH, MAX_PATTERNS, REFUSED, pattern_problem

# What can be learned. An EAGLE-3 head first: speculators trains it and vLLM-Ascend serves it as method eagle3.
# DFlash and DSpark heads (speculators trains both) and MTP layers could follow, each with its own method.
LearnedKind = Literal["Eagle3Head"]
KIND_METHODS = {"Eagle3Head": "eagle3"}
MAX_GENERATIONS = 10  # the generations status keeps (and the quarantined windows)
ChatRole = Literal["system", "developer", "user", "assistant", "tool"]


def _pattern(value: str) -> str:
    problem = pattern_problem(value)
    if problem is not None:
        raise ValueError(f"the pattern {problem}")
    return value


RedactionPattern = Annotated[
    str,
    Field(min_length=1, max_length=MAX_PATTERN_LENGTH),
    AfterValidator(_pattern),
    CelRules(
        (
            Rule(
                id="learning",
                rule=f"!self.matches({cel_string(REFUSED)})",
                message="a redaction pattern may not use lookaround, backreferences or atomic groups (which RE2 does "
                "not support), nor a repeated group that repeats within (which backtracks without bound)",
            ),
        )
    ),
]


class LearningStorage(Section):
    """The PersistentVolumeClaim `<name>-learning` the operator creates in the resource's namespace for the
    samples and the draft generations. It belongs to the resource: deleting the resource deletes the claim,
    and with the claim the recorded prompts (what happens to the volume is its StorageClass's reclaimPolicy)."""

    size: Bytes = Field(default="20Gi", description="The claim's storage request.")
    storage_class_name: str | None = Field(
        default=None, max_length=253, description="Its StorageClass; the cluster's default when unset."
    )
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce"] = Field(
        default="ReadWriteMany",
        description="ReadWriteMany lets every engine and the training Job mount it wherever they run; "
        "ReadWriteOnce only works while they share one node.",
    )
    keep_drafts: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Trained generations kept on the claim beside the one in force: the newest promoted ones. A "
        "rolled-back or failed generation stays for inspection until the next run starts, which removes it.",
    )


class SamplingSettings(Section):
    """How much of the served traffic is recorded, and for how long it is kept."""

    percent: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Share of chat and completion requests whose prompt each engine records, spread evenly.",
    )
    max_bytes: Bytes = Field(
        default="1Gi",
        description="The most the recorded prompts may take on the claim: engines record nothing more until the "
        "retention age frees room.",
    )
    max_tokens: int = Field(
        default=200_000,
        ge=1_000,
        le=1_000_000_000,
        description="The most tokens (prompts and the target's answers) one training run extracts hidden states "
        "for, newest prompts first: this bounds its time and its scratch space on the claim, tokens x 4 layers x "
        "hidden size x 2 bytes (6.6 GB at the default for a hidden size of 4096).",
    )
    retention_hours: int = Field(
        default=168,
        ge=1,
        le=8760,
        description="Recorded prompts older than this are removed: each engine removes its own, and each training "
        "run first removes every pod's (those of pods that are gone too).",
    )
    roles: list[ChatRole] = Field(
        default=["user"],
        min_length=1,
        max_length=5,
        description="The chat roles whose messages are recorded: the users' turns only by default. A completion "
        "prompt counts as a user's. A request with no message of these roles is not recorded.",
    )
    redact: list[RedactionPattern] | None = Field(
        default=None,
        max_length=MAX_PATTERNS,
        description="Regular expressions (RE2 syntax: no lookaround or backreference; no repeated group that repeats "
        "within, as (a+)+) whose matches are replaced by "
        "[redacted] before a sample is written: credentials, account numbers. With any, prompts sent as token ids "
        "are not recorded (they cannot be scanned).",
    )


class TriggerSettings(Section):
    """When a training run starts. Each needs new prompts since the last run began, so that a rolled-back
    draft is never trained again on the same samples (its window of samples is quarantined); at most one run is
    active, and none while a canary is."""

    min_new_samples: int = Field(
        default=1000,
        ge=1,
        le=100_000_000,
        description="Train once the engines have recorded this many prompts since the last run began.",
    )
    acceptance_drop_percent: int = Field(
        default=10,
        ge=0,
        le=90,
        description="Also train (with a tenth of minNewSamples) when the mean acceptance length has fallen this "
        "far below its value when the draft in force was promoted: the traffic moved away from what it learned. "
        "0: never on that account.",
    )
    interval_hours: int | None = Field(
        default=None,
        ge=1,
        le=8760,
        description="Also train this long after the last run began, with any new prompts; no schedule when unset.",
    )
    min_interval_minutes: int = Field(
        default=60,
        ge=0,
        le=525_600,
        description="The least time between the starts of two runs, whatever fires: what bounds the NPU hours "
        "learning takes.",
    )


class TrainingSettings(Section):
    """The training Job: its image, its share of a node, and the bounds of one run."""

    image: str | None = Field(
        default=None,
        max_length=512,
        description="Image with vLLM-Ascend and speculators; the operator's --trainer-image when unset.",
    )
    npus: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="NPUs of the Job's pod: it loads the target to extract hidden states; the engine's NPUs per "
        "pod when unset.",
    )
    cpu: Cores | None = Field(default=None, description="CPU request and limit; as an engine pod's when unset.")
    memory: Bytes | None = Field(default=None, description="Memory request and limit; as an engine pod's when unset.")
    deadline_seconds: int = Field(
        default=7200,
        ge=60,
        le=604_800,
        description="The longest a run may take (the Job's activeDeadlineSeconds): past it the Job is stopped "
        "and the generation is Failed.",
    )
    epochs: int = Field(default=3, ge=1, le=100, description="Passes over the samples.")
    learning_rate: float = Field(default=1e-4, gt=0, le=1, description="AdamW's learning rate.")
    max_output_tokens: int = Field(
        default=256,
        ge=1,
        le=32_768,
        description="Tokens the target writes for each recorded prompt (greedy, its own answer): what the head "
        "learns to predict.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (IMAGE_TRIMMED,)


class LearningSettings(Section):
    """Drafts that learn from the traffic they serve: the engines record a share of the prompts, a Job trains
    the draft in force on what the target computes for them, and the trained draft serves only once its canary
    is not slower (rollout.strategy Canary). Opt-in; the data stays on a claim of the namespace."""

    kind: LearnedKind = Field(
        default="Eagle3Head",
        description="What is learned: Eagle3Head, the EAGLE-3 head of speculative.method eagle3, starting from "
        "speculative.draftModel.",
    )
    storage: LearningStorage = section_field(LearningStorage, "The claim for samples and drafts.")
    sampling: SamplingSettings = section_field(SamplingSettings, "What is recorded.")
    triggers: TriggerSettings = section_field(TriggerSettings, "When a run starts.")
    training: TrainingSettings = section_field(TrainingSettings, "The training Job.")


SPEC_RULES = (
    Rule(
        id="learning",
        rule="!has(self.learning) || self.speculative.method == 'eagle3'",
        message="learning.kind Eagle3Head trains the head of method eagle3, and speculative.method is %s: set "
        "method eagle3 with the draftModel to start from, or remove learning",
        args=("self.speculative.method",),
        field_path=".learning.kind",
    ),
    Rule(
        id="learning",
        rule="!has(self.learning) || self.rollout.strategy == 'Canary'",
        message="learning promotes a trained draft only when its canary is not slower: set rollout.strategy Canary",
        field_path=".rollout.strategy",
    ),
    Rule(
        id="learning",
        rule="!has(self.learning) || !has(self.parallelism.nodes) || self.parallelism.nodes == 1",
        message="learning's Job loads the target in one pod to extract its hidden states, and parallelism.nodes %d "
        "spreads it over several: remove learning, or serve from one node",
        args=("self.parallelism.nodes",),
        field_path=".learning",
    ),
)


GenerationPhase = Literal["Training", "Canary", "Promoted", "RolledBack", "Failed"]


class Figures(Section):
    """What requests got from one draft, as the canary's verdict measured it."""

    mean_acceptance_length: float | None = Field(default=None, description="Tokens per verification step.")
    decode_tokens_per_second: float | None = Field(default=None, description="Decode speed a request got.")


class SampleWindow(Section):
    """When the samples a run trained on were recorded: Unix seconds, both ends included."""

    oldest: int = Field(ge=0, description="The oldest sample's time.")
    newest: int = Field(ge=0, description="The newest sample's time.")


class QuarantinedWindow(SampleWindow):
    """The samples a rolled-back generation trained on: no later run trains on them again; they go at the
    retention age, and the entry with them."""

    generation: int = Field(ge=1, description="The rolled-back generation.")
    samples: int = Field(default=0, ge=0, description="Prompts it trained on.")


class DraftGeneration(Section):
    """One trained draft: what it learned from, and how it fared against the draft it would replace."""

    generation: int = Field(ge=1, description="1 for the first draft trained, and so on.")
    phase: GenerationPhase = Field(
        description="Training (its Job runs), Canary (it serves beside the draft in force), Promoted, RolledBack "
        "(slower, or its canary failed: kept on the claim for inspection) or Failed (the Job did)."
    )
    job: str = Field(max_length=253, description="The training Job.")
    replaces: str = Field(max_length=32, description="The draft it started from: spec, or gen-N.")
    started_at: str | None = Field(default=None, max_length=64, description="When its Job was created.")
    finished_at: str | None = Field(
        default=None, max_length=64, description="When it was promoted, rolled back or failed."
    )
    trigger: str = Field(default="", max_length=256, description="What started the run.")
    samples: int | None = Field(default=None, description="Prompts it trained on.")
    tokens: int | None = Field(default=None, description="Tokens whose hidden states it trained on.")
    training_seconds: float | None = Field(default=None, description="How long the Job ran.")
    draft_path: str | None = Field(default=None, max_length=256, description="Its directory on the claim.")
    before: Figures | None = Field(default=None, description="The draft in force, at the canary's verdict.")
    after: Figures | None = Field(
        default=None,
        description="This draft on the canary; after its promotion, its own figures, taken when every pod is "
        "measured and the window holds telemetry.minDrafts drafts (absent until then).",
    )
    reason: str = Field(default="", max_length=1024, description="Why it ended as it did.")
    window: SampleWindow | None = Field(
        default=None, description="When the samples it trained on were recorded (set when its run succeeded)."
    )


class LearningStatus(Section):
    """Where learning stands: the draft in force, what has been recorded since the last run, each generation."""

    draft: str = Field(max_length=32, description="The draft in force: spec (speculative.draftModel), or gen-N.")
    since: str | None = Field(default=None, max_length=64, description="When learning began (RFC 3339).")
    requests_since_training: int = Field(
        default=0,
        description="Requests the engines served since the last run began (from their /metrics); they recorded "
        "sampling.percent of them.",
    )
    message: str = Field(default="", max_length=1024, description="What learning waits for, or does.")
    promoted_acceptance_length: float | None = Field(
        default=None,
        description="Mean acceptance length of the draft in force, measured after its promotion (its "
        "generation's after): what triggers.acceptanceDropPercent compares with.",
    )
    generations: list[DraftGeneration] | None = Field(
        default=None, max_length=MAX_GENERATIONS, description=f"The last {MAX_GENERATIONS} generations, newest last."
    )
    quarantine: list[QuarantinedWindow] | None = Field(
        default=None,
        max_length=MAX_GENERATIONS,
        description="The windows of samples rolled-back generations trained on, kept out of every later run until "
        f"the retention age removes them (the last {MAX_GENERATIONS}).",
    )
    quarantined_samples: int = Field(default=0, ge=0, description="Prompts in those windows.")
