"""How the engines are reached: the Service in front of them, the InferencePool a Gateway routes to, and the
operator's scrape of their /metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from specinfer_operator.api.placement import AnnotationMap
from specinfer_runtime.base import Section, section_field
from specinfer_runtime.celrules import Rule
from specinfer_runtime.names import DNS_SUBDOMAIN


class ServiceSettings(Section):
    """The Service in front of the pods (OpenAI-compatible API)."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(default="ClusterIP", description="Service type.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the Service and of vLLM (vLLM: `--port`).")
    annotations: AnnotationMap | None = Field(
        default=None,
        max_length=32,
        description="Annotations of the Service, e.g. a cloud load balancer's settings.",
    )


# The Gateway API Inference Extension's pool (sigs.k8s.io/gateway-api-inference-extension v1.0 and later).
INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"
INFERENCE_POOL_KIND = "InferencePool"
INFERENCE_POOL_PLURAL = "inferencepools"
# The Endpoint Picker as the Inference Extension's inferencepool Helm chart installs it for a release: a
# Service `<release>-epp` on the ext-proc port.
EPP_SUFFIX = "-epp"
EPP_PORT = 9002


class EndpointPickerRef(Section):
    """The Endpoint Picker extension (EPP) a Gateway asks which pod of the pool serves each request; its
    fields are the InferencePool's endpointPickerRef, held to the same formats."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description=f"The EPP object, in this namespace; `<metadata.name>{EPP_SUFFIX}` when unset, the name the "
        "Inference Extension's inferencepool Helm chart gives the EPP of a release named like this resource.",
    )
    kind: str = Field(
        default="Service",
        min_length=1,
        max_length=63,
        pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
        description="Its kind; Gateways do not support ExternalName Services.",
    )
    group: str = Field(
        default="",
        max_length=253,
        pattern=rf"^$|{DNS_SUBDOMAIN}",
        description='Its API group; "" is the core group (a Service).',
    )
    port: int = Field(
        default=EPP_PORT,
        ge=1,
        le=65535,
        description=f"Its port: a Service's port, not its target port; {EPP_PORT} is the EPP's ext-proc port.",
    )
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose",
        description="When the EPP does not answer: FailClose fails the request, FailOpen lets the Gateway "
        "send it to a pod of its own choosing.",
    )

    def name_for(self, resource: str) -> str:
        """The EPP's name for the SpeculativeInference `resource`."""
        return self.name or f"{resource}{EPP_SUFFIX}"


class InferencePoolSettings(Section):
    """An InferencePool (Gateway API Inference Extension, inference.networking.k8s.io/v1) named like this
    resource: its serving pods, stable and canary, on the engine port, as the backend of a Gateway's HTTPRoute,
    the Endpoint Picker choosing the pod of each request. Needs the extension's CRD; without it the engines
    serve through the Service alone and the InferencePool condition says what to install."""

    endpoint_picker_ref: EndpointPickerRef = section_field(EndpointPickerRef, "The Endpoint Picker of the pool.")


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
        description="Drafts the window must hold before LowAcceptance is judged, and before learning takes a "
        "promoted draft's figures or judges drift: a few drafts are no evidence.",
    )

    def evidence(self, observed: Mapping[str, Any]) -> bool:
        """Whether figures (status.speculation.observed) hold min_drafts drafts: what is judged on."""
        return int(observed.get("drafts") or 0) >= self.min_drafts

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
