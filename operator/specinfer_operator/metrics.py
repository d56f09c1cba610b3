"""Prometheus metrics of the operator (served by `specinfer-operator --metrics-port`)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

RECONCILES = Counter(
    "specinfer_reconciles", "Reconciles of SpeculativeInferences by result (applied, refused, error).", ["result"]
)
RECONCILE_SECONDS = Histogram(
    "specinfer_reconcile_duration_seconds",
    "Time to validate, apply the children and publish the status of one SpeculativeInference.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
ROLLOUTS_STARTED = Counter("specinfer_rollouts_started", "Rollouts of a new engine configuration started.")
ROLLOUTS_FINISHED = Counter(
    "specinfer_rollouts_finished", "Rollouts finished, by result (complete, deadline_exceeded).", ["result"]
)

# Last published conditions of every resource this process reconciles: {(namespace, name): {type: status}}.
_CONDITIONS: dict[tuple[str, str], dict[str, str]] = {}


def observe_conditions(namespace: str, name: str, conditions: list[dict[str, Any]]) -> None:
    _CONDITIONS[(namespace, name)] = {c["type"]: c["status"] for c in conditions}


def forget(namespace: str, name: str) -> None:
    _CONDITIONS.pop((namespace, name), None)


class ResourcesByCondition(Collector):
    """`specinfer_resources{condition, status}`: how many resources are Ready, Degraded, ..."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "specinfer_resources", "SpeculativeInferences by condition and status.", labels=["condition", "status"]
        )
        tally = Tally((kind, status) for conditions in _CONDITIONS.values() for kind, status in conditions.items())
        for (kind, status), count in sorted(tally.items()):
            family.add_metric([kind, status], count)
        yield family


REGISTRY.register(ResourcesByCondition())
