"""How configuration changes roll out: the strategy, the canary that judges a new configuration, and the
PodDisruptionBudget that bounds voluntary evictions (node drains) of the engine pods."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specinfer_runtime.base import Section, section_field
from specinfer_runtime.celrules import Rule


class CanarySettings(Section):
    """The canary of `strategy: Canary`: how many pods try a new configuration first, and the speed it
    must show before it reaches the others."""

    replicas: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Pods that run the new configuration first (at most spec.replicas); 1 unless percent is set.",
    )
    percent: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="The canary as a share of spec.replicas, rounded up to whole pods; instead of replicas.",
    )
    min_draft_tokens: int = Field(
        default=2000,
        ge=1,
        le=1_000_000_000,
        description="Draft tokens the canary (and the stable pods it is compared with) must have proposed in "
        "the telemetry window before it is judged: a few drafts are no evidence.",
    )
    max_speed_drop_percent: int = Field(
        default=2,
        ge=0,
        le=100,
        description="The canary is promoted when its requests decode at most this many percent slower than the "
        "stable pods' at comparable load (tokens per step over step time, the median of minComparisons "
        "comparisons), and rolled back otherwise. Acceptance explains the verdict, speed decides it: a change "
        "of method, draft model, option, image or K is judged alike.",
    )
    min_comparisons: int = Field(
        default=3,
        ge=1,
        le=8,
        description="Canary measurements, each with minDraftTokens on both sides, compared with the stable "
        "pods' before the verdict, which takes their median: one noisy window does not decide.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="canary",
            rule="!has(self.replicas) || !has(self.percent)",
            message="replicas %d and percent %d both size the canary: set one of them",
            args=("self.replicas", "self.percent"),
            field_path=".percent",
        ),
    )

    def size(self, replicas: int) -> int:
        """Pods of the canary out of `replicas`: at least one, at most all of them."""
        wanted = -(-replicas * self.percent // 100) if self.percent is not None else self.replicas or 1
        return max(1, min(wanted, replicas))


class RolloutSettings(Section):
    """How configuration changes roll out. NPUs are scarce: by default one pod is replaced at a time and
    no extra pod is created (a surge pod could never schedule on a full cluster)."""

    max_unavailable: int = Field(default=1, ge=0, le=1000, description="Deployment maxUnavailable (pods).")
    max_surge: int = Field(default=0, ge=0, le=1000, description="Deployment maxSurge (pods).")
    progress_deadline_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="A rollout that makes no progress for this long has failed (see onFailure); model "
        "loading takes minutes, so keep it generous.",
    )
    on_failure: Literal["Rollback", "Halt"] = Field(
        default="Rollback",
        description="When a new configuration's pods fail (crash-loop, refused by the runtime's preflight, "
        "image or config errors) or its rollout misses progressDeadlineSeconds: Rollback restores the last "
        "configuration that served on every replica and does not try this spec again until it changes; Halt "
        "leaves the failed pods in place for a person to look at. Either way the resource is Degraded.",
    )
    strategy: Literal["RollingUpdate", "Canary"] = Field(
        default="RollingUpdate",
        description="RollingUpdate replaces the pods in place. Canary first moves canary.replicas pods to the "
        "new configuration behind the same Service, compares their acceptance with the stable pods' (or, "
        "when every pod is in the canary, with the last good configuration's figures) and promotes it or "
        "rolls it back. A first rollout, and a change of replicas alone, roll out directly.",
    )
    canary: CanarySettings = section_field(CanarySettings, "The canary of strategy Canary.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="rollout",
            rule="self.maxUnavailable > 0 || self.maxSurge > 0",
            message="maxUnavailable and maxSurge cannot both be 0: no pod could ever be replaced",
            field_path=".maxUnavailable",
        ),
    )


class DisruptionBudget(Section):
    """A PodDisruptionBudget over the engine pods (policy/v1): how many a node drain may evict at once.
    Model loading takes minutes, so an evicted engine is gone for a while. Unset, a resource that may run two
    engines or more (replicas, or autoscaling.maxReplicas) gets one of maxUnavailable 1."""

    enabled: bool = Field(
        default=True,
        description="false: no PodDisruptionBudget, not even the default one (a drain may then evict every engine "
        "at once).",
    )
    max_unavailable: int | None = Field(
        default=None, ge=0, le=1000, description="Pods a voluntary eviction may take down at once; 1 when unset."
    )
    min_available: int | None = Field(
        default=None, ge=0, le=1000, description="Instead of maxUnavailable: pods that must stay up."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="kubernetes",
            rule="!has(self.maxUnavailable) || !has(self.minAvailable)",
            message="set one of maxUnavailable and minAvailable, not both",
            field_path=".maxUnavailable",
        ),
    )

    def terms(self) -> dict[str, int]:
        """The PodDisruptionBudget's own fields: minAvailable, or maxUnavailable (1 unless set)."""
        if self.min_available is not None:
            return {"minAvailable": self.min_available}
        return {"maxUnavailable": 1 if self.max_unavailable is None else self.max_unavailable}
