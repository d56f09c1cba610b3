"""The measuring loop: scrape each resource's engines, window the counters, publish what moved.

Pods and resources are known from the operator's watches (kopf events feed `pod_event` and
`resource_event`), so a scrape round makes no API request; the API server sees a status write only when
observation.py finds one worth making, preceded by one read of the resource to patch its latest status.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from specinfer_operator import effective, metrics, observation, timestamps, tuner
from specinfer_operator.kube import Kube
from specinfer_operator.podspec import CONFIG_HASH_ANNOTATION
from specinfer_operator.rollout_settings import CanarySettings
from specinfer_operator.scrape import Endpoint, ScrapeError, scrape
from specinfer_operator.service_settings import TelemetrySettings
from specinfer_operator.status import CANARY, MEASURED_CONDITION
from specinfer_operator.tuning import MAX_SCHEDULE_BATCH
from specinfer_operator.window import Counts, Figures, History, Sample, aggregate
from specinfer_operator.workload import serves
from specinfer_runtime.engine import ENGINE_PORT
from specinfer_runtime.tokens import SCHEDULE_FIELD
from specinfer_runtime.tuning_settings import TuningSettings

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, resource name)
INSTANCE_LABEL = "app.kubernetes.io/instance"
# Samples kept per pod beyond what the window needs: a hard bound whatever the settings.
MAX_SAMPLES = 1000


@dataclass(frozen=True)
class ScrapeConfig:
    """The operator-wide settings (flags); each resource's spec.telemetry refines them."""

    interval: float = 30
    timeout: float = 2
    concurrency: int = 16
    refresh: float = 300


@dataclass(frozen=True)
class Target:
    """A pod worth scraping: Ready, with an address, running a known configuration."""

    pod: str
    series: str  # changes when a container restarts: its counters start again from zero
    config_hash: str
    endpoint: Endpoint
    started: float | None = None  # the latest container start, in seconds since the epoch


def _engine_port(pod: dict[str, Any]) -> int:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == "http":
                return int(port["containerPort"])
    return ENGINE_PORT


def _started(pod: dict[str, Any]) -> float | None:
    """When the pod's newest container started: its counters count from then."""
    starts = []
    for container in pod.get("status", {}).get("containerStatuses") or []:
        stamp = str(((container.get("state") or {}).get("running") or {}).get("startedAt"))
        with contextlib.suppress(ValueError):
            starts.append(timestamps.parse(stamp).timestamp())
    return max(starts, default=None)


def target_of(pod: dict[str, Any]) -> Target | None:
    """The pod as a scrape target, or None while it cannot answer (not Ready, no IP, terminating)."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    config_hash = (meta.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
    if not ready or not status.get("podIP") or meta.get("deletionTimestamp") or not config_hash or not serves(pod):
        return None  # a group's workers run headless: its leader serves, and exports the group's figures
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses", []))
    return Target(
        pod=meta["name"],
        series=f"{meta.get('uid', '')}/{restarts}",
        config_hash=config_hash,
        endpoint=Endpoint(status["podIP"], _engine_port(pod)),
        started=_started(pod),
    )


@dataclass
class Watched:
    """What the loop knows of one resource, kept current by watch events."""

    settings: TelemetrySettings = field(default_factory=TelemetrySettings)
    canary_settings: CanarySettings = field(default_factory=CanarySettings)
    canaries: bool = False  # spec.rollout.strategy is Canary: these figures are what a canary is judged against
    tuning: TuningSettings | None = None  # spec.speculative.tuning, unless it drafts by a schedule
    max_batch: int = MAX_SCHEDULE_BATCH  # spec.scheduling.maxNumSeqs: a schedule's last batch size
    status: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    targets: dict[str, Target] = field(default_factory=dict)
    histories: dict[str, History] = field(default_factory=dict)
    due: float = 0.0

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


class Telemetry:
    """One loop for every resource, on a bounded pool of scraping threads."""

    def __init__(
        self,
        kube: Kube,
        lock: Callable[[str, str], threading.Lock],
        config: ScrapeConfig,
        now: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.lock, self.config, self.now, self.clock, self.wall = kube, lock, config, now, clock, wall
        # Called with a resource's key after its canary's or stable pods' figures were written.
        self.judge: Callable[[Key], None] | None = None
        self._watched: dict[Key, Watched] = {}
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(config.concurrency, "scrape")
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self.run, args=(self._stop,), name="telemetry", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def resource_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with self._guard:
            if kind == "DELETED":
                self._watched.pop(key, None)
                return
            watched = self._watched.setdefault(key, Watched())
            # An invalid spec keeps the settings it was last measured with.
            spec = body.get("spec") or {}
            with contextlib.suppress(ValidationError):
                watched.settings = TelemetrySettings.model_validate(spec.get("telemetry") or {})
            with contextlib.suppress(ValidationError):
                watched.canary_settings = CanarySettings.model_validate((spec.get("rollout") or {}).get("canary") or {})
            watched.canaries = (spec.get("rollout") or {}).get("strategy") == "Canary"
            speculative = spec.get("speculative") or {}
            watched.tuning = None
            if SCHEDULE_FIELD not in speculative:  # a schedule drafts another K at each batch size: no profile
                with contextlib.suppress(ValidationError):
                    watched.tuning = TuningSettings.model_validate(speculative.get("tuning") or {})
            watched.max_batch = int((spec.get("scheduling") or {}).get("maxNumSeqs") or MAX_SCHEDULE_BATCH)
            watched.status = dict(body.get("status") or {})
            watched.generation = int(meta.get("generation") or 0)

    def pod_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        owner = (meta.get("labels") or {}).get(INSTANCE_LABEL)
        if not owner:
            return
        name = meta.get("name", "")
        key = (meta.get("namespace", ""), owner)
        with self._guard:
            if kind == "DELETED" and key not in self._watched:
                return  # the resource went first: nothing to forget
            watched = self._watched.setdefault(key, Watched())
            target = None if kind == "DELETED" else target_of(body)
            if target is None:
                watched.targets.pop(name, None)
            else:
                watched.targets[name] = target
            if kind == "DELETED":
                watched.histories.pop(name, None)

    def run(self, stop: threading.Event) -> None:
        """Scrape whatever is due, about once a second, until `stop` is set."""
        while not stop.wait(1.0):
            try:
                self.tick()
            except Exception:  # the loop must outlive one bad round; the next one retries
                log.exception("telemetry round failed")

    def _interval(self, watched: Watched) -> float:
        return float(watched.settings.interval_seconds or self.config.interval)

    def tick(self) -> None:
        """One round: scrape the pods of every due resource concurrently, then window and publish."""
        started = self.clock()
        with self._guard:
            due = [
                (key, w, w.current(), w.canary())
                for key, w in self._watched.items()
                if w.settings.enabled and w.status.get("configHash") and w.due <= started
            ]
            for _, watched, _, _ in due:
                watched.due = started + self._interval(watched)
        jobs = [(key, target) for key, _, stable, trial in due for target in stable + trial]
        results = dict(zip(jobs, self._pool.map(lambda job: self._scrape(job[1]), jobs), strict=True))
        for key, watched, stable, trial in due:
            with self._guard:
                figures = self._window(key, watched, stable, results)
                trial_figures = self._window(key, watched, trial, results) if trial else None
            wrote = self._publish(key, watched, figures)
            if trial_figures is not None:
                wrote = self._publish_canary(key, watched, trial_figures) or wrote
                if wrote and self.judge is not None:
                    self.judge(key)  # the canary may be judged on these figures
            if watched.tuning is not None and watched.tuning.mode != "Off":
                self._tune(key, watched, figures, trial_figures)

    def _window(
        self, key: Key, watched: Watched, targets: list[Target], results: dict[tuple[Key, Target], Sample | None]
    ) -> Figures:
        """Record this round's samples of `targets` and window them (under the guard)."""
        fresh = set()
        for target in targets:
            sample = results[(key, target)]
            if sample is None:
                continue
            fresh.add(target.pod)
            history = watched.histories.setdefault(target.pod, History(MAX_SAMPLES))
            history.record(sample, watched.settings.window_seconds)
        return aggregate(watched.histories, len(targets), fresh, self.clock(), watched.settings.window_seconds)

    def _scrape(self, target: Target) -> Sample | None:
        started = self.clock()
        try:
            counts = scrape(target.endpoint, self.config.timeout) or Counts()
        except ScrapeError as error:
            log.debug("scrape of pod %s failed: %s", target.pod, error)
            metrics.SCRAPES.labels(result="error").inc()
            return None
        finished = self.clock()
        metrics.SCRAPES.labels(result="ok").inc()
        metrics.SCRAPE_SECONDS.observe(finished - started)
        # The series' start on the sample clock; a container clock ahead of ours reads as "just now".
        born = None if target.started is None else finished - max(0.0, self.wall() - target.started)
        return Sample(finished, target.series, counts, born)

    def _publish(self, key: Key, watched: Watched, figures: Figures) -> bool:
        """Write what moved in status.speculation.observed; whether it wrote."""
        namespace, name = key
        now = self.now()
        config_hash = watched.status.get("configHash", "")
        low = any(
            c.get("type") == MEASURED_CONDITION and c.get("status") == "True"
            for c in watched.status.get("conditions") or []
        )
        metrics.observe_acceptance(namespace, name, observation.observed(figures, config_hash, now), low)
        refresh = self.config.refresh
        # A canary is judged against these figures (live, or as its baseline): their evidence is written as
        # it grows, not only when the ratios move.
        need = watched.canary_settings.min_draft_tokens if watched.canaries else None
        if (
            observation.update(watched.status, figures, watched.settings, watched.generation, now, refresh, need)
            is None
        ):
            return False  # decided on the watched status: no read, no write
        with self.lock(namespace, name):
            body = self.kube.resource(namespace, name)
            if body is None:
                return False
            status = body.get("status") or {}
            if status.get("configHash") != config_hash:
                return False  # a new configuration since the scrape: these figures are not its own
            generation = int(body["metadata"].get("generation") or 0)
            change = observation.update(status, figures, watched.settings, generation, now, refresh, need)
            if change is None:
                return False
            self.kube.patch_status(namespace, name, change.patch)
            metrics.STATUS_WRITES.labels(writer="telemetry").inc()
        for kind, reason, message in change.events:
            # Posted directly: kopf.event needs kopf's context, which this thread does not have.
            self.kube.event(body, kind, reason, message, now)
        return True

    def _tune(self, key: Key, watched: Watched, figures: Figures, trial: Figures | None) -> None:
        """Profiles, recommendation and Auto's moves from this round's figures (tuner.py decides)."""
        namespace, name = key
        now, settings = self.now(), watched.tuning
        assert settings is not None

        def measured(status: dict[str, Any]) -> list[tuple[int, Figures]]:
            found = [(int((status.get("speculation") or {}).get("numSpeculativeTokens") or 0), figures)]
            record = (status.get("rollout") or {}).get("canary") or {}
            family = (status.get("tuning") or {}).get("family")
            if trial is not None and record.get("phase") == CANARY and record.get("family") == family:
                found.append((len(trial.counts.per_position), trial))
            return found

        if tuner.update(watched.status, settings, measured(watched.status), now, watched.max_batch) is None:
            return  # decided on the watched status: no read, no write
        with self.lock(namespace, name):
            body = self.kube.resource(namespace, name)
            if body is None:
                return
            status = body.get("status") or {}
            change = tuner.update(status, settings, measured(status), now, watched.max_batch)
            if change is None:
                return
            if change.apply is not None:  # reconciles the resource: it renders this K, through a canary
                value = effective.annotation(change.family, change.apply)
                self.kube.patch_metadata(namespace, name, {"annotations": {effective.ANNOTATION: value}})
            self.kube.patch_status(namespace, name, change.patch)
            metrics.STATUS_WRITES.labels(writer="tuning").inc()
            result = (change.patch["tuning"].get("lastChange") or {}).get("result")
            if result is not None:
                metrics.TUNING_CHANGES.labels(result=result.lower()).inc()
        for kind, reason, message in change.events:
            self.kube.event(body, kind, reason, message, now)

    def _publish_canary(self, key: Key, watched: Watched, figures: Figures) -> bool:
        """Write the canary's figures (status.rollout.canary.observed) when they moved; whether it wrote."""
        namespace, name = key
        now, need, refresh = self.now(), watched.canary_settings.min_draft_tokens, self.config.refresh
        if observation.canary_update(watched.status, figures, need, now, refresh) is None:
            return False
        with self.lock(namespace, name):
            body = self.kube.resource(namespace, name)
            status = (body or {}).get("status") or {}
            measuring = ((watched.status.get("rollout") or {}).get("canary") or {}).get("configHash")
            record = (status.get("rollout") or {}).get("canary") or {}
            if body is None or record.get("configHash") != measuring:
                return False  # another canary since the scrape, or none
            patch = observation.canary_update(status, figures, need, now, refresh)
            if patch is None:
                return False
            self.kube.patch_status(namespace, name, patch)
            metrics.STATUS_WRITES.labels(writer="telemetry").inc()
        return True
