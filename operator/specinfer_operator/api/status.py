"""The status of a SpeculativeInference as the CRD describes it (`kubectl explain` reads these)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specinfer_operator.api.engine import EngineVersions
from specinfer_operator.api.learning import LearningStatus
from specinfer_runtime.base import Section, list_map

# What decides how many drafts a request verifies (tuning/adaptivity.py).
Adaptivity = Literal["StaticK", "KByBatchSize", "AdaptiveVerification", "DynamicVerification"]
DRAFT = "With spec.learning: the draft generation it serves, spec (speculative.draftModel) or gen-N."


class Condition(Section):
    """A kstatus-style condition."""

    type: str = Field(
        max_length=64,
        description="Ready, Progressing, Degraded, ConfigValid, LowAcceptance, InferencePool, and the kstatus "
        "mirrors Reconciling and Stalled.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", max_length=128, description="CamelCase reason.")
    message: str = Field(default="", max_length=4096, description="Human-readable explanation.")
    observed_generation: int | None = Field(default=None, description="Generation the condition is based on.")
    last_transition_time: str | None = Field(default=None, max_length=64, description="When status last changed.")


class ScrapeFailure(Section):
    """A pod of the configuration whose /metrics could not be read in the latest scrape."""

    pod: str = Field(max_length=253, description="The pod.")
    result: str = Field(
        max_length=32,
        description="timeout, unreachable, http_error, protocol, too_large or unreadable, as counted in the "
        "operator's specinfer_scrapes_total.",
    )
    reason: str = Field(max_length=256, description="Why, in one line.")


class ObservedSpeculation(Section):
    """Acceptance of the current configuration over the last window, from its engines' `/metrics`.

    Only pods running the current configuration and answering the latest scrape count; the ratios are
    absent while the window holds no drafts (no evidence either way)."""

    config_hash: str = Field(max_length=64, description="The configuration measured (status.configHash).")
    window_seconds: int = Field(description="Seconds the figures cover (shorter than the window after a start).")
    measured_time: str = Field(max_length=64, description="When the pods were last scraped (RFC 3339).")
    pods: int = Field(description="Ready pods running the current configuration.")
    pods_measured: int = Field(description="Of those, the pods that answered the latest scrape.")
    drafts: int = Field(description="Verification steps with a draft in the window (vLLM num_drafts).")
    draft_tokens: int = Field(description="Tokens proposed in the window (vLLM num_draft_tokens).")
    accepted_tokens: int = Field(description="Proposed tokens the target accepted in the window.")
    acceptance_rate: float | None = Field(default=None, description="accepted / draft tokens.")
    mean_acceptance_length: float | None = Field(
        default=None,
        description="1 + accepted / drafts: tokens produced per verification step, what predicts the speed-up.",
    )
    position_acceptance_rates: list[float] | None = Field(
        default=None,
        max_length=64,
        description="Per draft position p: accepted at p / drafts. Falling fast with p means a smaller K serves "
        "as many tokens for less verification work.",
    )
    step_milliseconds: float | None = Field(
        default=None,
        description="Mean time of a decode step as a request sees it (vLLM inter-token latency: sum / count), "
        "drafting and verification included: the cost side of the speed-up.",
    )
    tokens_per_step: float | None = Field(
        default=None,
        description="Tokens a request gets per decode step ((generated - first tokens) / decode steps); with "
        "stepMilliseconds, the decode speed of a request.",
    )
    decode_batch: float | None = Field(
        default=None, description="Mean number of requests an engine step serves (decode steps / iterations)."
    )
    draft_tokens_per_draft: float | None = Field(
        default=None,
        description="Tokens drafted per draft (draftTokens / drafts): the K drafted, at most the K in force (ngram "
        "drafts fewer where the context has fewer tokens after its match). Under a numSpeculativeTokensPerBatchSize "
        "schedule the K in force is the one of the batch the engines serve (decodeBatch), which follows the load per "
        "engine as replicas scale.",
    )
    decode_tokens_per_second: float | None = Field(
        default=None,
        description="The decode speed a request gets: tokensPerStep over the step's time, what canaries are judged "
        "on and spec.autoscaling.decodeTokensPerSecond aims at.",
    )
    tokens_per_second: float | None = Field(
        default=None, description="Tokens generated per second by the pods measured, over the window."
    )
    scrape_failures: list[ScrapeFailure] | None = Field(
        default=None,
        max_length=16,
        description="Pods whose /metrics could not be read in the latest scrape, and why (a bounded read: one "
        "deadline over the whole exchange, a size limit, a strict parse); they are left out of the figures.",
    )


class BatchSizeRangeStatus(Section):
    """A range of a schedule: K by batch size (numSpeculativeTokensPerBatchSize)."""

    min_batch_size: int = Field(description="Smallest batch size (inclusive).")
    max_batch_size: int = Field(description="Largest batch size (inclusive).")
    num_speculative_tokens: int = Field(description="K for these batch sizes (0: no drafting).")


class SpeculationStatus(Section):
    """The speculation actually rendered, and how well it works."""

    method: str | None = Field(default=None, max_length=64, description="Method vLLM runs (aliases resolved).")
    num_speculative_tokens: int | None = Field(default=None, description="K as rendered.")
    num_speculative_tokens_per_batch_size: list[BatchSizeRangeStatus] | None = Field(
        default=None, max_length=8, description="K by batch size as rendered, when a schedule serves."
    )
    capture_sizes: list[int] | None = Field(default=None, max_length=64, description="Capture sizes rendered.")
    adaptivity: Adaptivity | None = Field(
        default=None,
        description="What decides how many drafts a request verifies: StaticK (K every step), KByBatchSize (a "
        "schedule), AdaptiveVerification or DynamicVerification (the engine, per request and step; from the spec "
        "or tried and kept by Auto tuning).",
    )
    draft: str | None = Field(default=None, max_length=32, description=DRAFT)
    image: str | None = Field(default=None, max_length=512, description="The runtime image that serves it.")
    engine_versions: EngineVersions | None = Field(
        default=None,
        description="The engine releases of that image, as spec.runtime.engineVersions declares them or, for the "
        "default image, as the tenant policy states them (defaultEngineVersions); unset when unknown.",
    )
    observed: ObservedSpeculation | None = Field(default=None, description="Acceptance measured from the engines.")


class LastGoodConfiguration(Section):
    """The configuration that last served on every replica: what a rollback restores."""

    config_hash: str = Field(max_length=64, description="Its hash (the pods' specinfer.io/config-hash).")
    config_map: str = Field(max_length=253, description="Its engine ConfigMap, kept while it may be restored.")
    method: str = Field(max_length=64, description="Its speculative method.")
    num_speculative_tokens: int = Field(description="Its K.")
    num_speculative_tokens_per_batch_size: list[BatchSizeRangeStatus] | None = Field(
        default=None, max_length=8, description="Its schedule (K by batch size), if any."
    )
    capture_sizes: list[int] | None = Field(default=None, max_length=64, description="Its capture sizes.")
    adaptivity: Adaptivity | None = Field(default=None, description="What decided its drafts per request.")
    family: str | None = Field(
        default=None, max_length=64, description="Its family: the configuration but for K (status.tuning.family)."
    )
    image: str | None = Field(default=None, max_length=512, description="Its runtime image.")
    engine_versions: EngineVersions | None = Field(default=None, description="Its image's engine releases, when known.")
    draft: str | None = Field(default=None, max_length=32, description=DRAFT)
    time: str = Field(max_length=64, description="When it first served on every replica (RFC 3339).")


class RolledBackConfiguration(Section):
    """A configuration that failed and was replaced by the last good one; not tried again until the spec is
    edited (a scale event is no edit)."""

    config_hash: str = Field(max_length=64, description="The failed configuration's hash.")
    generation: int = Field(description="The spec generation it came from.")
    edit: str | None = Field(
        default=None,
        max_length=64,
        description="The hash of the spec it came from but for replicas and autoscaling: an edited spec tries "
        "again, a scale event does not.",
    )
    draft: str | None = Field(default=None, max_length=32, description=DRAFT)
    reason: str = Field(
        max_length=128,
        description="How it failed: CrashLoopBackOff, ProgressDeadlineExceeded...; a canary: SpeedBelowStable "
        "(slower at comparable load), AcceptanceBelowFloor (acceptance collapsed, no faster), GainBelowMinimum "
        "(an engine-side mechanism Auto tried, less than minGainPercent faster), AbortedByHand.",
    )
    message: str = Field(max_length=4096, description="The pods' own words (termination message) or the deadline's.")
    time: str = Field(max_length=64, description="When it was rolled back (RFC 3339).")


class CanaryComparison(Section):
    """One measurement of the canary's decode speed against the stable pods', at the canary's load."""

    measured_time: str = Field(max_length=64, description="When the canary's figures were measured (RFC 3339).")
    canary_tokens_per_second: float = Field(description="Tokens per second a canary request got while decoding.")
    stable_tokens_per_second: float = Field(
        description="The same for the stable pods, at the canary's batch size when normalised."
    )
    canary_batch: float = Field(description="Requests per decode step on the canary's pods.")
    stable_batch: float = Field(description="Requests per decode step on the stable pods.")
    normalised: bool = Field(
        description="The batches differed by more than 1.5x: the stable speed was moved to the canary's "
        "batch through the step cost fitted from status.tuning.profiles."
    )
    ratio: float = Field(description="Canary speed over stable speed.")


class CanaryStatus(Section):
    """A canary in progress (rollout.strategy Canary): the new configuration on some pods, measured against
    the stable ones before it reaches them."""

    config_hash: str = Field(max_length=64, description="The configuration on trial.")
    stable_config_hash: str = Field(max_length=64, description="The last good configuration it is compared with.")
    family: str | None = Field(default=None, max_length=64, description="The trial's configuration but for K.")
    stable_family: str | None = Field(
        default=None,
        max_length=64,
        description="The last good one's; equal to family when only K changes.",
    )
    phase: Literal["Canary", "Promoting"] = Field(
        description="Canary: on trial; Promoting: judged good, rolling out to every pod."
    )
    replicas: int = Field(description="Pods of the canary.")
    stable_replicas: int = Field(description="Pods that keep the last good configuration meanwhile.")
    message: str = Field(max_length=4096, description="The verdict so far: what it waits for, or the figures.")
    start_time: str = Field(max_length=64, description="When the canary started (RFC 3339).")
    scaled_time: str | None = Field(
        default=None,
        max_length=64,
        description="When the replicas last changed during the canary (RFC 3339): the comparisons made before are "
        "dropped and the verdict waits for figures measured wholly after it, so that a scale event, which moves the "
        "load on each side, neither promotes nor rolls back.",
    )
    baseline: ObservedSpeculation | None = Field(
        default=None,
        description="The last good configuration's figures when the canary started: the reference when every "
        "pod is in the canary (a sequential comparison).",
    )
    observed: ObservedSpeculation | None = Field(default=None, description="The canary pods' own figures.")
    comparisons: list[CanaryComparison] | None = Field(
        default=None,
        max_length=8,
        description="The canary's speed against the stable pods', one per canary measurement; the verdict "
        "takes the median ratio of the last rollout.canary.minComparisons.",
    )


class RolloutStatus(Section):
    """What rollouts have established: the last good configuration, a rollback in force, a canary."""

    last_good: LastGoodConfiguration | None = Field(default=None, description="Last configuration served everywhere.")
    rolled_back: RolledBackConfiguration | None = Field(
        default=None, description="Present while the spec's configuration stays rolled back."
    )
    canary: CanaryStatus | None = Field(default=None, description="Present while a canary is in progress.")


class TuningProfile(Section):
    """What one K measured, in the telemetry window: tuning's evidence."""

    num_speculative_tokens: int = Field(description="The K measured.")
    decode_steps: int = Field(description="Decode steps (request, step) measured: the evidence.")
    draft_tokens: int = Field(description="Tokens drafted in them.")
    step_milliseconds: float = Field(description="Mean time of a decode step.")
    decode_batch: float = Field(description="Mean requests per engine step.")
    accepted_per_step: list[float] = Field(
        max_length=16,
        description="Drafts accepted at each position per decode step: tokens per step at K' <= K is 1 + the sum of "
        "the first K'.",
    )
    measured_time: str = Field(max_length=64, description="When (RFC 3339).")


class TuningRecommendation(Section):
    """Which K serves the most tokens per second, by the profiles measured so far."""

    num_speculative_tokens: int | None = Field(
        default=None, description="The recommended K; absent while a K must be measured first (measureNext)."
    )
    num_speculative_tokens_per_batch_size: list[BatchSizeRangeStatus] | None = Field(
        default=None,
        max_length=16,
        description="When the best K depends on the batch size: the schedule (numSpeculativeTokensPerBatchSize).",
    )
    measure_next: int | None = Field(
        default=None,
        description="The K to measure before anything can be recommended: one K tells how many tokens a step "
        "yields, not what a draft token costs.",
    )
    expected_gain_percent: float | None = Field(
        default=None, description="Expected tokens per second over the current K, in percent."
    )
    message: str = Field(max_length=1024, description="The recommendation and its figures, in words.")
    summary: str = Field(max_length=64, description="Short form, for kubectl get: `K=2 +18%`, `measure K=2`, `keep`.")
    time: str = Field(max_length=64, description="When it last changed (RFC 3339).")


class TuningChange(Section):
    """The last K (or schedule) the operator applied in Auto, and how its canary ended."""

    from_k: int = Field(description="The K before.")
    to_k: int = Field(description="The K tried (a schedule's largest).")
    to_schedule: list[BatchSizeRangeStatus] | None = Field(
        default=None, max_length=8, description="The schedule tried, when Auto applied one."
    )
    to_adaptivity: Adaptivity | None = Field(
        default=None, description="The engine-side mechanism tried, up to toK drafts, when Auto applied one."
    )
    result: Literal["Trying", "Promoted", "Reverted"] = Field(
        description="Trying: on a canary; Promoted: it serves; Reverted: slower or failing (an engine-side "
        "mechanism: less than minGainPercent faster), what served before is back."
    )
    message: str = Field(default="", max_length=1024, description="Why, with the figures.")
    time: str = Field(max_length=64, description="When it was applied (RFC 3339).")


class TuningStatus(Section):
    """spec.speculative.tuning at work: the K requested, the K that serves, the evidence and the advice."""

    mode: str = Field(max_length=16, description="Off, Recommend or Auto.")
    family: str = Field(
        max_length=64,
        description="The configuration family measured: the serving configuration but for K. Profiles are "
        "dropped when it changes.",
    )
    requested_num_speculative_tokens: int = Field(description="K as the spec says.")
    tuned_num_speculative_tokens: int | None = Field(
        default=None,
        description="K as Auto applied it (annotation tuning.specinfer.io/effective), while it differs from the "
        "spec's: on a canary until it serves, reverted if it measures slower.",
    )
    effective_num_speculative_tokens: int = Field(description="K as rendered: the tuned K in Auto, else the spec's.")
    effective_num_speculative_tokens_per_batch_size: list[BatchSizeRangeStatus] | None = Field(
        default=None,
        max_length=8,
        description="The schedule as rendered, when one serves: then the K in force depends on the batch size.",
    )
    tuned_adaptivity: Adaptivity | None = Field(
        default=None,
        description="The engine-side mechanism Auto tried and kept, while it serves: Auto then holds K and takes "
        "no profiles, since the engine chooses the drafts each request verifies.",
    )
    adaptivity_candidate: Adaptivity | None = Field(
        default=None,
        description="The engine-side mechanism Auto tries on a canary once K has settled (tryEngineAdaptivity): "
        "the method runs it and the spec passes every rule with it on.",
    )
    profiles: list[TuningProfile] | None = Field(default=None, max_length=16, description="One per K measured.")
    recommendation: TuningRecommendation | None = Field(default=None, description="The current advice.")
    last_change: TuningChange | None = Field(default=None, description="Auto's last change of K.")


class InferencePoolStatus(Section):
    """The InferencePool of spec.inferencePool, present while the operator has it applied as the spec asks."""

    name: str = Field(max_length=253, description="The InferencePool (inference.networking.k8s.io/v1).")


class AutoscalingStatus(Section):
    """What spec.autoscaling asks of the autoscaler, and whether the speed objective is met."""

    range: str = Field(max_length=32, description="The replicas the autoscaler may set, as `1-4`.")
    objective: Literal["Met", "Missed", "Unmeasured"] | None = Field(
        default=None,
        description="With decodeTokensPerSecond: whether requests got that speed over the last telemetry window "
        "(Unmeasured while nothing was decoded).",
    )
    decode_tokens_per_second: int | None = Field(default=None, description="The objective, as the spec states it.")


class SpeculativeInferenceStatus(Section):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")
    conditions: list[Condition] | None = list_map(
        "type",
        16,
        "Ready, Progressing, Degraded, ConfigValid; Reconciling and Stalled mirror Progressing and "
        "Degraded for kstatus (Flux); LowAcceptance once the engines have drafted enough to judge; "
        "InferencePool with spec.inferencePool (True: applied; False: why not, e.g. CRDMissing).",
    )
    replicas: int | None = Field(default=None, description="Pods of the current Deployment.")
    ready_replicas: int | None = Field(default=None, description="Pods that are Ready.")
    updated_replicas: int | None = Field(default=None, description="Pods running the current configuration.")
    ready: str | None = Field(default=None, max_length=32, description="Ready pods out of desired, as `2/2`.")
    speculation: SpeculationStatus | None = Field(default=None, description="Effective speculation.")
    endpoint: str | None = Field(default=None, max_length=512, description="In-cluster URL of the API.")
    config_hash: str | None = Field(default=None, max_length=64, description="Hash of the engine config served.")
    rollout: RolloutStatus | None = Field(default=None, description="Last good configuration and rollbacks.")
    tuning: TuningStatus | None = Field(default=None, description="K tuning, with spec.speculative.tuning.")
    autoscaling: AutoscalingStatus | None = Field(default=None, description="With spec.autoscaling.")
    learning: LearningStatus | None = Field(default=None, description="With spec.learning.")
    selector: str | None = Field(
        default=None, max_length=1024, description="Label selector of the pods, for the scale subresource."
    )
    inference_pool: InferencePoolStatus | None = Field(
        default=None, description="The InferencePool of spec.inferencePool, once applied."
    )
