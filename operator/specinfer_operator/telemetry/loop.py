"""The measuring loop: scrape each resource's engines, window the counters, publish what moved.

Pods and resources are known from the operator's watches (kopf events feed `pod_event` and
`resource_event`), so a scrape round makes no API request beyond reading, once, the controller chain of
a pod it has not seen (platform/ownership.py); the API server sees a status write (writes.py) only when
observation.py finds one worth making, preceded by one read of the resource to patch its latest status.

Every pod and every resource is untrusted, and one must not hold up the others. Each resource's round
starts when it is due and ends when its own scrapes have (each bounded by the scrape deadline); the loop
never waits on a pod, so a slow one delays only its own resource's figures. The scraping threads are taken
by resources in turn, a quarter of them at most by one resource's pods (fair.py): a resource whose pods
all hang holds that quarter until the deadline, and another resource's scrapes start on the rest at once.
What follows the scrapes (windowing, the status patch, the canary's figures, tuning) runs stage by stage, and
a stage that fails is logged, counted (specinfer_telemetry_failures_total) and reported on that resource
alone, once per distinct failure, while every other resource goes on.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from specinfer_operator.api.autoscaling import AutoscalingSettings
from specinfer_operator.api.labels import INSTANCE_LABEL
from specinfer_operator.api.rollout import CanarySettings
from specinfer_operator.api.service import TelemetrySettings
from specinfer_operator.controller.refresh import Refreshes
from specinfer_operator.measure.scrape import ScrapeError, scrape
from specinfer_operator.measure.window import Counts, Failure, Figures, History, Sample, aggregate, served_since
from specinfer_operator.platform import metrics
from specinfer_operator.platform.kube import Kube
from specinfer_operator.platform.ownership import Ownership
from specinfer_operator.telemetry.fair import FairPool, share_of
from specinfer_operator.telemetry.targets import Key, ScrapeConfig, Target, Watched, target_of
from specinfer_operator.telemetry.writes import Writes
from specinfer_operator.tuning.recommendation import MAX_SCHEDULE_BATCH
from specinfer_runtime.tokens import SCHEDULE_FIELD
from specinfer_runtime.tuning import TuningSettings

log = logging.getLogger(__name__)

# Samples kept per pod beyond what the window needs: a hard bound whatever the settings.
MAX_SAMPLES = 1000
T = TypeVar("T")
# What one scrape gave: a sample, why there is none, or None for a pod that is not the resource's own.
Outcome = Sample | Failure | None


@dataclass
class Round:
    """One resource's scrapes in flight, and the pods they are of."""

    key: Key
    watched: Watched
    stable: list[Target]
    trial: list[Target]
    scrapes: dict[Target, Future[Outcome]] = field(default_factory=dict)
    left: int = 0  # scrapes not ended yet


class Telemetry:
    """One loop for every resource, on a bounded pool of scraping threads shared fairly (fair.py)."""

    def __init__(
        self,
        kube: Kube,
        lock: Callable[[str, str], AbstractContextManager[object]],
        config: ScrapeConfig,
        now: Callable[[], str],
        ownership: Ownership | None = None,
        refreshes: Refreshes | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.lock, self.config, self.now, self.clock, self.wall = kube, lock, config, now, clock, wall
        self.ownership = ownership or Ownership(kube)
        self.writes = Writes(kube, lock, now, config.refresh)
        # The canary-verdict path (Refreshes.judge_canary), taken after a canary's figures were written.
        self.refreshes = refreshes
        self._watched: dict[Key, Watched] = {}
        # Scrape targets of pods whose resource the watch has not brought yet (the two watches are not ordered),
        # by resource, then pod: adopted when it comes, dropped with the pods.
        self._waiting: dict[Key, dict[str, Target]] = {}
        self._rounds: dict[Key, Round] = {}  # in flight
        self._ended: deque[Round] = deque()  # whose scrapes have all ended: to conclude
        self._wake = threading.Event()  # set when a round ends
        self._guard = threading.Lock()
        self._pool: FairPool[Key] = FairPool(config.concurrency, share_of(config.concurrency), "scrape")
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
                # Forgotten with its series at once: a round of it still under way ends without a trace.
                self._watched.pop(key, None)
                metrics.forget(key[0], key[1], str(meta.get("uid") or ""))
                return
            watched = self._watched.get(key)
            if watched is None:
                watched = self._watched[key] = Watched(targets=self._waiting.pop(key, {}))
            watched.uid = str(meta.get("uid") or "")
            # An invalid spec keeps the settings it was last measured with.
            spec = body.get("spec") or {}
            with contextlib.suppress(ValidationError):
                watched.settings = TelemetrySettings.model_validate(spec.get("telemetry") or {})
            with contextlib.suppress(ValidationError):
                watched.canary_settings = CanarySettings.model_validate((spec.get("rollout") or {}).get("canary") or {})
            watched.canaries = (spec.get("rollout") or {}).get("strategy") == "Canary"
            watched.autoscaling = None
            if spec.get("autoscaling") is not None:
                with contextlib.suppress(ValidationError):
                    watched.autoscaling = AutoscalingSettings.model_validate(spec["autoscaling"])
            speculative = spec.get("speculative") or {}
            watched.tuning = None
            if SCHEDULE_FIELD not in speculative:  # a schedule drafts another K at each batch size: no profile
                with contextlib.suppress(ValidationError):
                    watched.tuning = TuningSettings.model_validate(speculative.get("tuning") or {})
            max_batch = (spec.get("scheduling") or {}).get("maxNumSeqs")
            watched.max_batch = max_batch if isinstance(max_batch, int) and max_batch > 0 else MAX_SCHEDULE_BATCH
            watched.learning = spec.get("learning") is not None
            watched.status = dict(body.get("status") or {})
            watched.generation = int(meta.get("generation") or 0)

    def take_requests(self, key: Key) -> int:
        """The requests `key`'s engines served since the last call (for spec.learning's triggers)."""
        with self._guard:
            watched = self._watched.get(key)
            if watched is None:
                return 0
            taken, watched.requests = watched.requests, 0
            return taken

    def pod_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        owner = (meta.get("labels") or {}).get(INSTANCE_LABEL)
        if not owner:
            return
        name = meta.get("name", "")
        key = (meta.get("namespace", ""), owner)
        target = None if kind == "DELETED" else target_of(body)
        with self._guard:
            watched = self._watched.get(key)
            targets = watched.targets if watched is not None else self._waiting.setdefault(key, {})
            if target is None:
                targets.pop(name, None)
            else:
                targets[name] = target
            if watched is None and not targets:
                del self._waiting[key]
            if watched is not None and kind == "DELETED":
                watched.histories.pop(name, None)

    def run(self, stop: threading.Event) -> None:
        """Conclude each round as soon as its scrapes have ended, and start the rounds due once a second,
        until `stop` is set."""
        scan = self.clock()
        while not stop.is_set():
            try:
                self._finish()
                if self.clock() >= scan:
                    self._start()
                    scan = self.clock() + 1.0
            except Exception:  # the loop must outlive anything; each resource's failures are handled in it
                log.exception("telemetry round failed")
            self._wake.wait(max(0.0, scan - self.clock()))

    def _interval(self, watched: Watched) -> float:
        """Seconds between rounds: the spec's, else the operator's, and never so long that the window
        holds fewer than two scrapes."""
        interval = float(watched.settings.interval_seconds or self.config.interval)
        return min(interval, watched.settings.window_seconds / 2)

    def tick(self) -> None:
        """Conclude the rounds whose scrapes have all ended, then start the round of every resource now due.
        Never waits on a pod."""
        self._finish()
        self._start()

    def _finish(self) -> None:
        with self._guard:
            ended = list(self._ended)
            self._ended.clear()
            self._wake.clear()
            for finished in ended:
                del self._rounds[finished.key]
        for finished in ended:
            self._conclude(finished)

    def _start(self) -> None:
        started = self.clock()
        with self._guard:
            due = [
                Round(key, w, w.current(), w.canary())
                for key, w in self._watched.items()
                if key not in self._rounds and w.settings.enabled and w.status.get("configHash") and w.due <= started
            ]
            for new in due:
                new.watched.due = started + self._interval(new.watched)
                new.left = len(new.stable) + len(new.trial)
                self._rounds[new.key] = new
                if not new.left:
                    self._ended.append(new)
                    self._wake.set()
        for new in due:
            for target in new.stable + new.trial:
                scraping = self._pool.submit(new.key, functools.partial(self._scrape, new.key, new.watched.uid, target))
                new.scrapes[target] = scraping
                scraping.add_done_callback(functools.partial(self._scraped, new))

    def _scraped(self, of: Round, _: Future[Outcome]) -> None:
        """One scrape of `of` ended (in the scraping thread): its round ends with its last."""
        with self._guard:
            of.left -= 1
            if of.left:
                return
            self._ended.append(of)
        self._wake.set()

    def settle(self, timeout: float) -> None:
        """Run rounds as the loop does (each resource's ends as soon as its scrapes have) until none is in
        flight, or `timeout` passes: what a round costs, for the benchmark."""
        deadline = self.clock() + timeout
        self.tick()
        while self._rounds and self.clock() < deadline:
            self._wake.wait(max(0.0, deadline - self.clock()))
            self._finish()

    def _scrape(self, key: Key, uid: str, target: Target) -> Outcome:
        """One pod's sample, or why there is none; None when the pod is not this resource's own (its
        controller chain does not end at the resource), which is never scraped."""
        try:
            if not uid or self.ownership.resource_of(key[0], target.controller_ref(), target.runs, engine=True) != uid:
                metrics.SCRAPES.labels(result="foreign").inc()
                log.debug(
                    "pod %s/%s is labelled as %s's but was not made by it: not scraped", key[0], target.pod, key[1]
                )
                return None
            started = self.clock()
            counts = scrape(target.endpoint, self.config.timeout) or Counts()
        except ScrapeError as error:
            log.debug("scrape of pod %s/%s failed: %s", key[0], target.pod, error)
            metrics.SCRAPES.labels(result=error.result).inc()
            return Failure(str(error), error.result)
        except Exception as error:  # a bug must cost this pod's sample, not the round
            log.exception("scrape of pod %s/%s failed", key[0], target.pod)
            metrics.SCRAPES.labels(result="error").inc()
            return Failure(f"the scrape failed: {type(error).__name__}", "error")
        finished = self.clock()
        metrics.SCRAPES.labels(result="ok").inc()
        metrics.SCRAPE_SECONDS.observe(finished - started)
        # The series' start on the sample clock; a container clock ahead of ours reads as "just now".
        born = None if target.started is None else finished - max(0.0, self.wall() - target.started)
        return Sample(finished, target.series, counts, born)

    def _conclude(self, finished: Round) -> None:
        """What a resource's scrapes give: its figures, the status patch, the canary's, tuning. Each stage
        is isolated: a failure is reported on this resource, and the stages after it still run."""
        key, watched = finished.key, finished.watched
        with self._guard:
            if self._watched.get(key) is not watched:
                return  # deleted (or deleted and made again) while its pods were scraped: nothing is its
        outcomes = {t: f.result() for t, f in finished.scrapes.items()}
        failed: list[str] = []

        def stage(name: str, step: Callable[[], T]) -> T | None:
            try:
                return step()
            except Exception as error:
                failed.append(name)
                self.writes.failure(key, watched, name, error)
                return None

        with self._guard:
            figures = stage("figures", lambda: self._window(watched, finished.stable, outcomes))
            trial = (
                stage("figures", lambda: self._window(watched, finished.trial, outcomes)) if finished.trial else None
            )
        wrote = False
        if figures is not None:
            wrote = bool(stage("status", lambda: self.writes.figures(key, watched, figures)))
        refreshes = self.refreshes
        if trial is not None:
            wrote = bool(stage("canary", lambda: self.writes.canary(key, watched, trial))) or wrote
            if wrote and refreshes is not None:
                stage("canary", lambda: refreshes.judge_canary(key))
        if figures is not None and watched.tuning is not None and watched.tuning.mode != "Off":
            stage("tuning", lambda: self.writes.tuning(key, watched, figures, trial))
        if not failed:
            watched.failed = ""

    def _window(self, watched: Watched, targets: list[Target], outcomes: dict[Target, Outcome]) -> Figures:
        """Record the samples of `targets` and window them (under the guard); pods that are not the
        resource's own are left out, and those that failed are named with the reason."""
        fresh, failures, own = set(), [], 0
        for target in targets:
            outcome = outcomes.get(target)
            if outcome is None:
                continue
            own += 1
            if isinstance(outcome, Failure):
                failures.append((target.pod, outcome))
                continue
            fresh.add(target.pod)
            history = watched.histories.setdefault(target.pod, History(MAX_SAMPLES))
            if watched.learning:
                watched.requests += served_since(history.samples[-1] if history.samples else None, outcome)
            history.record(outcome, watched.settings.window_seconds)
        found = aggregate(watched.histories, own, fresh, self.clock(), watched.settings.window_seconds)
        return Figures(found.pods, found.pods_measured, found.seconds, found.counts, tuple(sorted(failures)))
