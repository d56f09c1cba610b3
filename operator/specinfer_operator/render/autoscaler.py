"""The autoscaler of spec.autoscaling (pure): a HorizontalPodAutoscaler fed by prometheus-adapter's rules, or,
where the platform runs KEDA instead, a ScaledObject with Prometheus triggers.

Each target is a figure of the SpeculativeInference, computed by Prometheus from the engines' own series
(the chart's PodMonitor labels them `namespace` and `name`, the resource's): one figure per resource,
whatever its pods (a group's workers export nothing). Every selector is pinned to the chart's engine scrape job
(ENGINE_JOB): a `vllm:*` series another scrape produces (a pushgateway, a job with honor_labels) labelled with
another team's namespace and name drives nothing. The queries here are the single source of both: `make
crd` writes the adapter's rules to the chart (ADAPTER_RULES_FILE), where prometheus-adapter reads them, and a
test fails when that file is stale; a ScaledObject carries the same queries for its resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.autoscaling import AutoscalingSettings
from specinfer_operator.api.resource import API_VERSION, GROUP, KIND, PLURAL

ADAPTER_RULES_FILE = "charts/specinfer-operator/files/prometheus-adapter-rules.yaml"
RATE_WINDOW = "2m"  # four scrapes at the chart's 30 s interval
# The autoscaler leaves the count alone while a figure is within this share of its target (kube-controller-manager's
# --horizontal-pod-autoscaler-tolerance, 0.1 by default): a speed target at the objective itself would add an
# engine only once requests were 10 % below it. The target is set this much faster than the objective.
TOLERANCE = 0.1
KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT = "ScaledObject"
# The `job` label of the engines' series: the chart's PodMonitor and scrape/engines.yaml both set it.
ENGINE_JOB = "specinfer-engines"
JOB_MATCHER = f'job="{ENGINE_JOB}",'


@dataclass(frozen=True)
class Target:
    """One spec target as an Object metric: its name in the custom metrics API, the PromQL that computes
    it per resource, and how the HPA compares it (AverageValue: divided by the engines first)."""

    field: str  # the spec.autoscaling field
    metric: str
    query: str  # a prometheus-adapter metricsQuery template
    target_type: str  # "Value" or "AverageValue"
    series: str  # the engine series whose presence offers the metric

    def target(self, value: int) -> dict[str, Any]:
        """The HPA's target: a Kubernetes quantity."""
        key = "averageValue" if self.target_type == "AverageValue" else "value"
        milli = _thousandths(self.field, value)
        return {"type": self.target_type, key: str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"}

    def trigger(self, value: int, labels: dict[str, str], prometheus: str) -> dict[str, Any]:
        """KEDA's Prometheus trigger: the query for the resource `labels` select, its threshold a decimal."""
        selector = ",".join(f'{key}="{label}"' for key, label in labels.items())  # DNS names: nothing to escape
        query = self.query.replace("<<.LabelMatchers>>", selector).replace("<<.GroupBy>>", ", ".join(labels))
        threshold = f"{_thousandths(self.field, value) / 1000:.3f}".rstrip("0").rstrip(".")
        return {
            "type": "prometheus",
            "name": self.metric.removeprefix("specinfer_").replace("_", "-"),
            "metricType": self.target_type,
            "metadata": {"serverAddress": prometheus, "query": query, "threshold": threshold},
        }


def _sum(series: str, window: str | None = None) -> str:
    selected = f"{series}{{{JOB_MATCHER}<<.LabelMatchers>>}}"
    return f"sum by (<<.GroupBy>>) ({f'rate({selected}[{window}])' if window else selected})"


def targets(window: str = RATE_WINDOW) -> tuple[Target, ...]:
    """The targets, with counters read over `window` (the tests scrape faster and use a shorter one)."""
    decode_seconds = _sum("vllm:inter_token_latency_seconds_sum", window)
    generated = _sum("vllm:generation_tokens_total", window)
    decoded = f"{generated} - {_sum('vllm:time_to_first_token_seconds_count', window)}"
    return (
        Target(
            "queueDepth",
            "specinfer_queue_depth",
            _sum("vllm:num_requests_waiting"),
            "AverageValue",
            "vllm:num_requests_waiting",
        ),
        Target(
            "kvCacheUsagePercent",
            "specinfer_kv_cache_usage_percent",
            f"100 * avg by (<<.GroupBy>>) (vllm:kv_cache_usage_perc{{{JOB_MATCHER}<<.LabelMatchers>>}})",
            "Value",
            "vllm:kv_cache_usage_perc",
        ),
        # Milliseconds of decode per token a request gets: the inverse of the speed objective, so that it rises
        # with the load as the autoscaler's proportional rule expects. Without decoding it is 0, not missing:
        # a missing metric would hold every scale-down.
        Target(
            "decodeTokensPerSecond",
            "specinfer_decode_milliseconds_per_token",
            f"1000 * {decode_seconds} / clamp_min({decoded}, 1e-9)",
            "Value",
            "vllm:inter_token_latency_seconds_sum",
        ),
    )


def _thousandths(field: str, value: int) -> int:
    """The target in thousandths, which the autoscaler compares: the speed objective as milliseconds per token
    with the tolerance's headroom, the others as they are."""
    if field == "decodeTokensPerSecond":
        return round(1_000_000 / (value * (1 + TOLERANCE)))
    return value * 1000


def adapter_rules(window: str = RATE_WINDOW) -> dict[str, Any]:
    """prometheus-adapter's configuration (`--config`): each target as a metric of speculativeinferences."""
    return {
        "rules": [
            {
                "seriesQuery": f'{{__name__="{t.series}",{JOB_MATCHER}namespace!="",name!=""}}',
                "resources": {
                    "overrides": {"namespace": {"resource": "namespace"}, "name": {"group": GROUP, "resource": PLURAL}}
                },
                "name": {"matches": f"^{t.series}$", "as": t.metric},
                "metricsQuery": t.query,
            }
            for t in targets(window)
        ]
    }


def _own(name: str) -> dict[str, str]:
    """The resource itself (a new dict each time: YAML output would otherwise alias the copies)."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name}


def autoscaler(settings: AutoscalingSettings, name: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The HorizontalPodAutoscaler of the resource `name` (its `metadata`: name, namespace, labels, owner)."""
    wanted = settings.targets()
    metrics = [
        {
            "type": "Object",
            "object": {
                "describedObject": _own(name),
                "metric": {"name": t.metric},
                "target": t.target(wanted[t.field]),
            },
        }
        for t in targets()
        if t.field in wanted
    ]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": _own(name),
            "minReplicas": settings.min_replicas,
            "maxReplicas": settings.max_replicas,
            "metrics": metrics,
            "behavior": _behavior(settings),
        },
    }


def _behavior(settings: AutoscalingSettings) -> dict[str, Any]:
    return {
        "scaleUp": {"stabilizationWindowSeconds": settings.scale_up_stabilization_seconds},
        "scaleDown": {"stabilizationWindowSeconds": settings.scale_down_stabilization_seconds},
    }


def scaled_object(settings: AutoscalingSettings, metadata: dict[str, Any], prometheus: str) -> dict[str, Any]:
    """KEDA's ScaledObject of the resource its `metadata` names, reading `prometheus` (the platform's server, set
    for the whole operator: a tenant never chooses where KEDA sends queries). KEDA makes the HPA itself, with
    the same targets, range and windows as autoscaler()."""
    name = metadata["name"]
    # The resource's own series: by namespace too, once it has one (the operator's always has; `specinfer render`
    # of a manifest without one selects by name alone).
    labels = {"namespace": metadata["namespace"]} if "namespace" in metadata else {}
    labels["name"] = name
    wanted = settings.targets()
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": SCALED_OBJECT,
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": _own(name),
            "minReplicaCount": settings.min_replicas,
            "maxReplicaCount": settings.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(settings)}},
            "triggers": [t.trigger(wanted[t.field], labels, prometheus) for t in targets() if t.field in wanted],
        },
    }
