"""spec.autoscaling: how many engines the load needs, decided by a HorizontalPodAutoscaler the operator owns.

The autoscaler scales the resource itself (its scale subresource writes spec.replicas), so a scale event
is a change of replicas, never of configuration: no canary, no rollout, and tuning's profiles stay. Its
targets are read from the engines' own counters through the custom metrics API (prometheus-adapter
serving the rules of render/autoscaler.py), as Object metrics of the resource: one figure per resource,
whatever its engines span (a multi-node group reports from its leader).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule

MAX_REPLICAS = 1000  # spec.replicas' own bound


class AutoscalingSettings(Section):
    """A HorizontalPodAutoscaler (autoscaling/v2) over the engines: it adds an engine while any target is
    exceeded and removes one when every target allows, after the scale-down window. Needs the custom
    metrics API (prometheus-adapter with the chart's rules, see docs/autoscaling.md); spec.replicas is then
    the autoscaler's to write."""

    min_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, description="The fewest engines.")
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS, description="The most engines: what the NPUs allow.")
    queue_depth: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Requests waiting per engine (vLLM's num_requests_waiting: requests the engine has no room "
        "for in its batch, summed over the engines and divided by their number) above which engines are added.",
    )
    kv_cache_usage_percent: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="KV-cache use (vLLM's kv_cache_usage_perc, the mean over the engines, in percent) above "
        "which engines are added: a full cache preempts requests.",
    )
    decode_tokens_per_second: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="The speed objective: decode tokens per second a request should get (the figure canaries "
        "are judged on, from the engines' counters: tokens per decode step over the step's time, speculation "
        "included). Engines are added while requests get less; status.autoscaling says whether it is met.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="How long the targets must allow fewer engines before one is removed (an engine takes "
        "minutes to load its model: removing one on a lull costs the next peak).",
    )
    scale_up_stabilization_seconds: int = Field(
        default=0, ge=0, le=3600, description="How long the targets must ask for more engines before one is added."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="autoscaling",
            rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
            message="minReplicas %d is above maxReplicas %d: raise maxReplicas or lower minReplicas",
            args=("self.minReplicas", "self.maxReplicas"),
            field_path=".minReplicas",
        ),
        Rule(
            id="autoscaling",
            rule="has(self.queueDepth) || has(self.kvCacheUsagePercent) || has(self.decodeTokensPerSecond)",
            message="an autoscaler needs a target: set queueDepth, kvCacheUsagePercent or decodeTokensPerSecond",
            field_path=".maxReplicas",
        ),
    )

    def targets(self) -> dict[str, int]:
        """The targets set, by field name as the spec writes it."""
        found = {
            "queueDepth": self.queue_depth,
            "kvCacheUsagePercent": self.kv_cache_usage_percent,
            "decodeTokensPerSecond": self.decode_tokens_per_second,
        }
        return {key: value for key, value in found.items() if value is not None}


def status_of(settings: AutoscalingSettings, observed: dict[str, Any] | None) -> dict[str, Any]:
    """status.autoscaling: the range, and whether the serving pods' figures (status.speculation.observed)
    meet the speed objective."""
    out: dict[str, Any] = {"range": f"{settings.min_replicas}-{settings.max_replicas}"}
    target = settings.decode_tokens_per_second
    if target is not None:
        speed = (observed or {}).get("decodeTokensPerSecond")
        out["decodeTokensPerSecond"] = target
        out["objective"] = "Unmeasured" if speed is None else "Met" if speed >= target else "Missed"
    return out
