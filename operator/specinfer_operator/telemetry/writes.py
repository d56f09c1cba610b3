"""What a telemetry round writes on its resource: the figures, the canary's, tuning's, and its failures.

Each write is decided first on the status the watch brought (no read when nothing moved), then again on the
resource read under its lock, just before the patch: the status may have moved since the watch, and a
configuration changed since the scrape makes these figures another's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from specinfer_operator.controller.conditions import MEASURED_CONDITION
from specinfer_operator.measure.window import Figures
from specinfer_operator.platform import metrics
from specinfer_operator.platform.kube import Kube
from specinfer_operator.telemetry import observation
from specinfer_operator.telemetry.targets import Key, Watched
from specinfer_operator.tuning import applied, auto

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Writes:
    """The status writes of the rounds, through `kube`, under each resource's `lock`."""

    kube: Kube
    lock: Callable[[str, str], AbstractContextManager[object]]
    now: Callable[[], str]
    refresh: float  # seconds after which unchanged figures are written again (--status-refresh)

    def failure(self, key: Key, watched: Watched, stage: str, error: Exception) -> None:
        """A stage of one resource's round failed: logged and counted, and told on the resource once per
        distinct failure (an event), so that a failure that persists is not repeated every round."""
        metrics.TELEMETRY_FAILURES.labels(stage=stage).inc()
        said = f"{stage}: {type(error).__name__}: {' '.join(str(error).split())}"[:400]
        if said == watched.failed:
            log.debug("telemetry of %s/%s still fails at %s", key[0], key[1], said)
            return
        watched.failed = said
        log.exception("telemetry of %s/%s failed at %s", key[0], key[1], stage)
        message = (
            f"measuring this resource failed ({said}); its figures are kept as last written, other resources "
            "are not affected, and the next round tries again"
        )
        body = {"metadata": {"namespace": key[0], "name": key[1], "uid": watched.uid}}
        try:
            self.kube.event(body, "Warning", "TelemetryFailed", message, self.now())
        except Exception:  # the API refusing the event too: the log and the metric still say it
            log.warning("cannot post the TelemetryFailed event of %s/%s", key[0], key[1])

    def figures(self, key: Key, watched: Watched, figures: Figures) -> bool:
        """Write what moved in status.speculation.observed; whether it wrote."""
        namespace, name = key
        now = self.now()
        config_hash = watched.status.get("configHash", "")
        low = any(
            c.get("type") == MEASURED_CONDITION and c.get("status") == "True"
            for c in watched.status.get("conditions") or []
        )
        metrics.observe_acceptance(namespace, name, watched.uid, observation.observed(figures, config_hash, now), low)
        refresh = self.refresh
        # A canary is judged against these figures (live, or as its baseline): their evidence is written as
        # it grows, not only when the ratios move.
        need = watched.canary_settings.min_draft_tokens if watched.canaries else None
        if (
            observation.update(
                watched.status, figures, watched.settings, watched.generation, now, refresh, need, watched.autoscaling
            )
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
            change = observation.update(
                status, figures, watched.settings, generation, now, refresh, need, watched.autoscaling
            )
            if change is None:
                return False
            self.kube.patch_status(namespace, name, change.patch)
            metrics.STATUS_WRITES.labels(writer="telemetry").inc()
        for kind, reason, message in change.events:
            # Posted directly: kopf.event needs kopf's context, which this thread does not have.
            self.kube.event(body, kind, reason, message, now)
        return True

    def tuning(self, key: Key, watched: Watched, figures: Figures, trial: Figures | None) -> None:
        """Profiles, recommendation and Auto's moves from this round's figures (auto.py decides)."""
        namespace, name = key
        now, settings = self.now(), watched.tuning
        assert settings is not None
        seen = observation.measured(watched.status, figures, trial)
        if auto.update(watched.status, settings, seen, now, watched.max_batch) is None:
            return  # decided on the watched status: no read, no write
        with self.lock(namespace, name):
            body = self.kube.resource(namespace, name)
            if body is None:
                return
            status = body.get("status") or {}
            change = auto.update(status, settings, observation.measured(status, figures, trial), now, watched.max_batch)
            if change is None:
                return
            if change.apply is not None:  # reconciles the resource: it renders this K, through a canary
                applied.apply(self.kube, namespace, name, change.family, change.apply)
            self.kube.patch_status(namespace, name, change.patch)
            metrics.STATUS_WRITES.labels(writer="tuning").inc()
            result = (change.patch["tuning"].get("lastChange") or {}).get("result")
            if result is not None:
                metrics.TUNING_CHANGES.labels(result=result.lower()).inc()
        for kind, reason, message in change.events:
            self.kube.event(body, kind, reason, message, now)

    def canary(self, key: Key, watched: Watched, figures: Figures) -> bool:
        """Write the canary's figures (status.rollout.canary.observed) when they moved; whether it wrote."""
        namespace, name = key
        now, need, refresh = self.now(), watched.canary_settings.min_draft_tokens, self.refresh
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
