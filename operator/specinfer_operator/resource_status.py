"""The status of a SpeculativeInference as the CRD describes it (`kubectl explain` reads these)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specinfer_runtime.base import Section


class Condition(Section):
    """A kstatus-style condition."""

    type: str = Field(
        max_length=64,
        description="Ready, Progressing, Degraded, ConfigValid, LowAcceptance, and the kstatus mirrors "
        "Reconciling and Stalled.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", max_length=128, description="CamelCase reason.")
    message: str = Field(default="", max_length=4096, description="Human-readable explanation.")
    observed_generation: int | None = Field(default=None, description="Generation the condition is based on.")
    last_transition_time: str | None = Field(default=None, max_length=64, description="When status last changed.")


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


class SpeculationStatus(Section):
    """The speculation actually rendered, and how well it works."""

    method: str | None = Field(default=None, max_length=64, description="Method vLLM runs (aliases resolved).")
    num_speculative_tokens: int | None = Field(default=None, description="K as rendered.")
    capture_sizes: list[int] | None = Field(default=None, max_length=64, description="Capture sizes rendered.")
    observed: ObservedSpeculation | None = Field(default=None, description="Acceptance measured from the engines.")


class LastGoodConfiguration(Section):
    """The configuration that last served on every replica: what a rollback restores."""

    config_hash: str = Field(max_length=64, description="Its hash (the pods' specinfer.io/config-hash).")
    config_map: str = Field(max_length=253, description="Its engine ConfigMap, kept while it may be restored.")
    method: str = Field(max_length=64, description="Its speculative method.")
    num_speculative_tokens: int = Field(description="Its K.")
    capture_sizes: list[int] | None = Field(default=None, max_length=64, description="Its capture sizes.")
    time: str = Field(max_length=64, description="When it first served on every replica (RFC 3339).")


class RolledBackConfiguration(Section):
    """A configuration that failed and was replaced by the last good one; not tried again for this
    generation of the spec."""

    config_hash: str = Field(max_length=64, description="The failed configuration's hash.")
    generation: int = Field(description="The spec generation it came from: a new generation tries again.")
    reason: str = Field(
        max_length=128,
        description="How it failed: CrashLoopBackOff, ProgressDeadlineExceeded...; a canary: "
        "AcceptanceBelowStable, AcceptanceBelowFloor, AbortedByHand.",
    )
    message: str = Field(max_length=4096, description="The pods' own words (termination message) or the deadline's.")
    time: str = Field(max_length=64, description="When it was rolled back (RFC 3339).")


class CanaryStatus(Section):
    """A canary in progress (rollout.strategy Canary): the new configuration on some pods, measured against
    the stable ones before it reaches them."""

    config_hash: str = Field(max_length=64, description="The configuration on trial.")
    stable_config_hash: str = Field(max_length=64, description="The last good configuration it is compared with.")
    phase: Literal["Canary", "Promoting"] = Field(
        description="Canary: on trial; Promoting: judged good, rolling out to every pod."
    )
    replicas: int = Field(description="Pods of the canary.")
    stable_replicas: int = Field(description="Pods that keep the last good configuration meanwhile.")
    message: str = Field(max_length=4096, description="The verdict so far: what it waits for, or the figures.")
    start_time: str = Field(max_length=64, description="When the canary started (RFC 3339).")
    baseline: ObservedSpeculation | None = Field(
        default=None,
        description="The last good configuration's figures when the canary started: the reference when every "
        "pod is in the canary (a sequential comparison).",
    )
    observed: ObservedSpeculation | None = Field(default=None, description="The canary pods' own figures.")


class RolloutStatus(Section):
    """What rollouts have established: the last good configuration, a rollback in force, a canary."""

    last_good: LastGoodConfiguration | None = Field(default=None, description="Last configuration served everywhere.")
    rolled_back: RolledBackConfiguration | None = Field(
        default=None, description="Present while the spec's configuration stays rolled back."
    )
    canary: CanaryStatus | None = Field(default=None, description="Present while a canary is in progress.")


class SpeculativeInferenceStatus(Section):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(default=None, description="Generation last reconciled.")
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        description="Ready, Progressing, Degraded, ConfigValid; Reconciling and Stalled mirror Progressing and "
        "Degraded for kstatus (Flux); LowAcceptance once the engines have drafted enough to judge.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int | None = Field(default=None, description="Pods of the current Deployment.")
    ready_replicas: int | None = Field(default=None, description="Pods that are Ready.")
    updated_replicas: int | None = Field(default=None, description="Pods running the current configuration.")
    ready: str | None = Field(default=None, max_length=32, description="Ready pods out of desired, as `2/2`.")
    speculation: SpeculationStatus | None = Field(default=None, description="Effective speculation.")
    endpoint: str | None = Field(default=None, max_length=512, description="In-cluster URL of the API.")
    config_hash: str | None = Field(default=None, max_length=64, description="Hash of the engine config served.")
    rollout: RolloutStatus | None = Field(default=None, description="Last good configuration and rollbacks.")
    selector: str | None = Field(
        default=None, max_length=1024, description="Label selector of the pods, for the scale subresource."
    )
