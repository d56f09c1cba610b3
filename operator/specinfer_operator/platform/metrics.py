"""Prometheus metrics of the operator (served by `specinfer-operator --metrics-bind-address`, manager.endpoints)."""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections import OrderedDict
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
ROLLBACKS = Counter(
    "specinfer_rollbacks", "Failed configurations rolled back to the last good one, by reason.", ["reason"]
)
CANARIES = Counter("specinfer_canaries", "Canaries judged, by result (promoted, rolled_back).", ["result"])
TUNING_CHANGES = Counter(
    "specinfer_tuning_changes",
    "K applied by Auto tuning and how it ended, by result (trying, promoted, reverted).",
    ["result"],
)
SCRAPES = Counter(
    "specinfer_scrapes",
    "Scrapes of engine pods' /metrics, by result: ok; timeout, unreachable, http_error, protocol, too_large, "
    "unreadable (the pod's answer broke a bound or the format); foreign (a pod labelled as a resource's engine "
    "that the resource did not make: not scraped); error (a bug).",
    ["result"],
)
TELEMETRY_FAILURES = Counter(
    "specinfer_telemetry_failures",
    "Stages of one resource's telemetry round that failed (figures, status, canary, tuning); the others go on.",
    ["stage"],
)
SCRAPE_SECONDS = Histogram(
    "specinfer_scrape_duration_seconds",
    "Time to read and parse one engine pod's /metrics.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
POD_EVENTS_REFUSED = Counter(
    "specinfer_pod_events_refused",
    "Pod watch events and list items dropped unread, by reason: too_large (bytes), too_many_values (JSON "
    "values), unreadable (not JSON). Only a pod labelled as the operator's but larger than any it renders is.",
    ["reason"],
)
STATUS_WRITES = Counter(
    "specinfer_status_writes", "Status patches of SpeculativeInferences, by writer (reconcile, telemetry).", ["writer"]
)

# Last published conditions of every resource this process reconciles: {(namespace, name): {type: status}}.
_CONDITIONS: dict[tuple[str, str], dict[str, str]] = {}
# Last measured figures of every resource: {(namespace, name): (status.speculation.observed, low acceptance)}.
_ACCEPTANCE: dict[tuple[str, str], tuple[dict[str, Any], bool]] = {}
# The uids of resources deleted lately: a reconcile or a telemetry round that was under way when its resource
# went ends after the deletion, and what it observes then must not bring the resource's series back.
_GONE: OrderedDict[str, None] = OrderedDict()
KEEP_GONE = 10_000
_GUARD = threading.Lock()


def observe_conditions(namespace: str, name: str, uid: str, conditions: list[dict[str, Any]]) -> None:
    with _GUARD:
        if uid not in _GONE:
            _CONDITIONS[(namespace, name)] = {c["type"]: c["status"] for c in conditions}


def observe_acceptance(namespace: str, name: str, uid: str, observed: dict[str, Any], low: bool) -> None:
    with _GUARD:
        if uid not in _GONE:
            _ACCEPTANCE[(namespace, name)] = (observed, low)


def forget(namespace: str, name: str, uid: str) -> None:
    """The resource `uid` was deleted: its series go, and stay gone whatever is observed of it later."""
    with _GUARD:
        _GONE[uid] = None
        _GONE.move_to_end(uid)
        while len(_GONE) > KEEP_GONE:
            _GONE.popitem(last=False)
        _CONDITIONS.pop((namespace, name), None)
        _ACCEPTANCE.pop((namespace, name), None)


class ResourcesByCondition(Collector):
    """`specinfer_resources{condition, status}`: how many resources are Ready, Degraded, ...; and each one's
    `specinfer_resource_condition{namespace, name, condition}`."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "specinfer_resources", "SpeculativeInferences by condition and status.", labels=["condition", "status"]
        )
        with _GUARD:
            every = sorted(_CONDITIONS.items())
        tally = Tally((kind, status) for _, conditions in every for kind, status in conditions.items())
        for (kind, status), count in sorted(tally.items()):
            family.add_metric([kind, status], count)
        yield family
        each = GaugeMetricFamily(
            "specinfer_resource_condition",
            "1 while the resource's condition is True, 0 while False or Unknown: alerts name the resource.",
            labels=["namespace", "name", "condition"],
        )
        for (namespace, name), conditions in every:
            for kind, status in sorted(conditions.items()):
                each.add_metric([namespace, name, kind], 1 if status == "True" else 0)
        yield each


class AcceptanceByResource(Collector):
    """Each resource's windowed figures, as its status shows them (absent while nothing was drafted)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "name"]
        rate = GaugeMetricFamily(
            "specinfer_acceptance_rate", "Accepted / draft tokens over the telemetry window.", labels=labels
        )
        length = GaugeMetricFamily(
            "specinfer_mean_acceptance_length",
            "1 + accepted / drafts over the telemetry window: tokens per verification step.",
            labels=labels,
        )
        position = GaugeMetricFamily(
            "specinfer_position_acceptance_rate",
            "Accepted tokens at a draft position / drafts over the telemetry window.",
            labels=[*labels, "position"],
        )
        drafts = GaugeMetricFamily("specinfer_window_drafts", "Drafts in the telemetry window.", labels=labels)
        measured = GaugeMetricFamily(
            "specinfer_pods_measured", "Pods of the current configuration that answered the last scrape.", labels=labels
        )
        low = GaugeMetricFamily("specinfer_low_acceptance", "1 while LowAcceptance is True.", labels=labels)
        step = GaugeMetricFamily(
            "specinfer_step_seconds",
            "Mean decode step time over the telemetry window (inter-token latency).",
            labels=labels,
        )
        per_step = GaugeMetricFamily(
            "specinfer_tokens_per_step",
            "Tokens a request gets per decode step over the telemetry window.",
            labels=labels,
        )
        with _GUARD:
            every = sorted(_ACCEPTANCE.items())
        for (namespace, name), (observed, is_low) in every:
            key = [namespace, name]
            if "acceptanceRate" in observed:
                rate.add_metric(key, observed["acceptanceRate"])
            if "meanAcceptanceLength" in observed:
                length.add_metric(key, observed["meanAcceptanceLength"])
            for p, value in enumerate(observed.get("positionAcceptanceRates") or []):
                position.add_metric([*key, str(p)], value)
            drafts.add_metric(key, observed["drafts"])
            measured.add_metric(key, observed["podsMeasured"])
            low.add_metric(key, 1 if is_low else 0)
            if "stepMilliseconds" in observed:
                step.add_metric(key, observed["stepMilliseconds"] / 1000)
            if "tokensPerStep" in observed:
                per_step.add_metric(key, observed["tokensPerStep"])
        yield from (rate, length, position, drafts, measured, low, step, per_step)


REGISTRY.register(ResourcesByCondition())
REGISTRY.register(AcceptanceByResource())
