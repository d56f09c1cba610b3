"""Which pods the telemetry loop scrapes, and what it keeps of each resource between rounds (pure).

A pod is scraped at its own IP and the engine port the operator rendered, never at a port or address it
names itself: a pod on the host network would otherwise turn the operator's GET onto its node. Whether a
pod is the resource's own (made by its ReplicaSets or LeaderWorkerSet groups) is decided by ownership.py
before each scrape, on the controller reference kept here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api import timestamps
from specinfer_operator.api.autoscaling import AutoscalingSettings
from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION
from specinfer_operator.api.rollout import CanarySettings
from specinfer_operator.api.service import TelemetrySettings
from specinfer_operator.controller.conditions import CANARY
from specinfer_operator.controller.pods import MAX_NAME, MAX_VALUE, REFERENCE
from specinfer_operator.measure.scrape import Endpoint
from specinfer_operator.measure.window import History
from specinfer_operator.platform.ownership import Runs, controller
from specinfer_operator.render.workload import serves
from specinfer_operator.tuning.recommendation import MAX_SCHEDULE_BATCH
from specinfer_runtime.engine import ENGINE_PORT
from specinfer_runtime.tuning import TuningSettings

Key = tuple[str, str]  # (namespace, resource name)
# (apiVersion, kind, name, uid) of a pod's controller
Controller = tuple[str, str, str, str]


@dataclass(frozen=True)
class ScrapeConfig:
    """The operator-wide settings (flags); each resource's spec.telemetry refines them."""

    interval: float = 30
    timeout: float = 2
    concurrency: int = 16
    refresh: float = 300


@dataclass(frozen=True)
class Target:
    """A pod worth scraping: Ready, with an address of its own, running a known configuration."""

    pod: str
    series: str  # changes when a container restarts: its counters start again from zero
    config_hash: str
    endpoint: Endpoint
    started: float | None = None  # the latest container start, in seconds since the epoch
    controller: Controller | None = None
    runs: Runs = field(default_factory=lambda: Runs("", None))  # what it runs, compared with its template

    def controller_ref(self) -> dict[str, Any] | None:
        if self.controller is None:
            return None
        api_version, kind, name, uid = self.controller
        return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


def _started(pod: dict[str, Any]) -> float | None:
    """When the pod's newest container started: its counters count from then."""
    starts = []
    for container in pod.get("status", {}).get("containerStatuses") or []:
        stamp = str(((container.get("state") or {}).get("running") or {}).get("startedAt"))
        with contextlib.suppress(ValueError):
            starts.append(timestamps.parse(stamp).timestamp())
    return max(starts, default=None)


def target_of(pod: dict[str, Any]) -> Target | None:
    """The pod as a scrape target, or None while it cannot answer (not Ready, no IP, terminating), runs no
    configuration, or has no address of its own (the host's network). What is kept is bounded: a config hash
    or controller reference longer than the operator's can be names nothing."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    config_hash = (meta.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
    address = status.get("podIP")
    own_address = not (pod.get("spec") or {}).get("hostNetwork") and address != status.get("hostIP")
    if not ready or not address or not own_address or meta.get("deletionTimestamp") or not config_hash:
        return None
    if len(str(config_hash)) > MAX_VALUE:
        return None  # no configuration the operator renders: kept, it would cost what its writer chose
    if not serves(pod):
        return None  # a group's workers run headless: its leader serves, and exports the group's figures
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses", []))
    ref = controller(meta)
    owner = None
    if ref is not None and all(len(str(ref.get(k, ""))) <= MAX_NAME for k in REFERENCE):  # else nobody's
        owner = (str(ref.get("apiVersion")), str(ref.get("kind")), str(ref.get("name")), str(ref.get("uid")))
    return Target(
        pod=meta["name"],
        series=f"{meta.get('uid', '')}/{restarts}",
        config_hash=config_hash,
        endpoint=Endpoint(address, ENGINE_PORT),
        started=_started(pod),
        controller=owner,
        runs=Runs.of(meta.get("labels"), pod.get("spec")),
    )


@dataclass
class Watched:
    """What the loop knows of one resource, kept current by watch events."""

    uid: str = ""
    settings: TelemetrySettings = field(default_factory=TelemetrySettings)
    canary_settings: CanarySettings = field(default_factory=CanarySettings)
    canaries: bool = False  # spec.rollout.strategy is Canary: these figures are what a canary is judged against
    tuning: TuningSettings | None = None  # spec.speculative.tuning, unless it drafts by a schedule
    max_batch: int = MAX_SCHEDULE_BATCH  # spec.scheduling.maxNumSeqs: a schedule's last batch size
    autoscaling: AutoscalingSettings | None = None  # spec.autoscaling: its speed objective is judged here
    status: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    targets: dict[str, Target] = field(default_factory=dict)
    histories: dict[str, History] = field(default_factory=dict)
    due: float = 0.0
    failed: str = ""  # the last failure of this resource's round reported, so that it is reported once
    learning: bool = False  # spec.learning is set: count the requests served, for its triggers
    requests: int = 0  # served since the learning loop last took them (Telemetry.take_requests)

    def current(self) -> list[Target]:
        """Pods of the configuration the status names: a rollout's old pods are left out."""
        config_hash = self.status.get("configHash")
        return [t for t in self.targets.values() if t.config_hash == config_hash]

    def canary(self) -> list[Target]:
        """Pods of the canary in progress (status.rollout.canary), measured on their own."""
        record = (self.status.get("rollout") or {}).get("canary") or {}
        if record.get("phase") != CANARY:
            return []
        return [t for t in self.targets.values() if t.config_hash == record.get("configHash")]
