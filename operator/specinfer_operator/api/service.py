"""How the engines are reached: the Service in front of them, and the operator's scrape of their /metrics."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specinfer_operator.api.placement import AnnotationMap
from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule


class ServiceSettings(Section):
    """The Service in front of the pods (OpenAI-compatible API)."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(default="ClusterIP", description="Service type.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the Service and of vLLM (vLLM: `--port`).")
    annotations: AnnotationMap | None = Field(
        default=None,
        max_length=32,
        description="Annotations of the Service, e.g. a cloud load balancer's settings.",
    )


class TelemetrySettings(Section):
    """How the operator measures speculation from the engines' own `/metrics` (vLLM's spec-decode counters)."""

    enabled: bool = Field(default=True, description="Scrape the engines and report status.speculation.observed.")
    interval_seconds: int | None = Field(
        default=None,
        ge=5,
        le=3600,
        description="Seconds between scrapes of each pod; the operator's --scrape-interval (30) when unset.",
    )
    window_seconds: int = Field(
        default=300,
        ge=60,
        le=86400,
        description="The figures are increases over this many seconds, not lifetime totals: a collapse shows "
        "within one window.",
    )
    min_mean_acceptance_length: float = Field(
        default=1.5,
        ge=1,
        le=15,
        description="LowAcceptance is True while the window's mean acceptance length (tokens per verification "
        "step, 1 + accepted / drafts) is below this: speculation then costs more than it gives.",
    )
    min_drafts: int = Field(
        default=100,
        ge=1,
        le=1_000_000_000,
        description="Drafts the window must hold before LowAcceptance is judged: a few drafts are no evidence.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="telemetry",
            rule="!has(self.intervalSeconds) || self.intervalSeconds * 2 <= self.windowSeconds",
            message="windowSeconds %d holds fewer than two scrapes every intervalSeconds %d: raise windowSeconds "
            "or lower intervalSeconds",
            args=("self.windowSeconds", "self.intervalSeconds"),
            field_path=".windowSeconds",
        ),
    )
