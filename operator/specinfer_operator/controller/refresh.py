"""After a workload (Deployment, LeaderWorkerSet) or pod event: refresh the status, correct drift, judge a
canary, roll a failed configuration back.

Child events never roll out a spec that reconcile has not accepted: they only compare what runs with what
reconcile accepted, arranged by arrangement.py (the last good configuration after a rollback, a canary
beside the stable pods).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from kubernetes.client.exceptions import ApiException

from specinfer_operator.controller.arrangement import arrange, carry_out
from specinfer_operator.controller.conditions import GROUPS_MISSING, INVALID_SPEC, NAME_CONFLICT, Verdict
from specinfer_operator.controller.context import Context, desired_of, observe
from specinfer_operator.controller.publish import publish
from specinfer_operator.controller.writes import Clash
from specinfer_operator.learning.draft import checked
from specinfer_operator.platform.debounce import Debounce
from specinfer_operator.render import workload
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import family_hash, render
from specinfer_operator.tuning import applied

log = logging.getLogger(__name__)


def drifted(desired: Any, live: Any) -> bool:
    """Whether `live` lacks something `desired` sets. Fields the API server adds are ignored, and so are
    zero values it leaves out when storing (`readOnly: false`, `0`, `""`, empty lists and maps)."""
    if live is None and desired in (False, 0, "", [], {}):
        return False
    if isinstance(desired, dict):
        return not isinstance(live, dict) or any(drifted(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            not isinstance(live, list)
            or len(desired) != len(live)
            or any(drifted(d, lv) for d, lv in zip(desired, live, strict=True))
        )
    return bool(desired != live)


Key = tuple[str, str]  # (namespace, name)
REFRESH_DELAY = 0.1  # seconds a status refresh waits for the rest of its burst of child events
REFRESH_THREADS = 8


class Refreshes:
    """Every status refresh goes through here, on a bounded pool of threads: after a child event
    (manager/handlers.py) and after new canary figures (`judge_canary`, the telemetry loop).

    Events come in bursts (every pod transition, every workload status change): a refresh runs
    REFRESH_DELAY after the first request of a burst (platform/debounce.py), and one per resource at a
    time; requests arriving meanwhile make it run once more, so the last state is always published
    without one refresh per event."""

    def __init__(self, ctx: Context, delay: float = REFRESH_DELAY, threads: int = REFRESH_THREADS) -> None:
        self.ctx = ctx
        self._guard = threading.Lock()
        self._running: set[Key] = set()
        self._dirty: set[Key] = set()
        self._debounce: Debounce[Key] = Debounce(lambda key: self.refresh(*key), delay, threads, "refresh")

    def schedule(self, key: Key) -> None:
        """Refresh resource `key` once the burst this request belongs to has passed."""
        self._debounce.schedule(key)

    def judge_canary(self, key: Key) -> None:
        """The canary-verdict path. The telemetry loop (telemetry/loop.py) has just written new figures of
        a canary, or of the stable pods it is judged against, into the resource's status; the refresh
        reads them there, and controller/arrangement.py's `arrange` judges the canary by canary.py's rules
        (promote, keep measuring, or roll back) and publishes the verdict."""
        self.schedule(key)

    def stop(self) -> None:
        self._debounce.stop()

    def refresh(self, namespace: str, name: str) -> None:
        """Correct drift of an accepted spec, then refresh the status; now, in the calling thread."""
        key = (namespace, name)
        with self._guard:
            if key in self._running:
                self._dirty.add(key)
                return
            self._running.add(key)
        try:
            while True:
                with self._guard:
                    self._dirty.discard(key)
                with self.ctx.lock(namespace, name):
                    body = self.ctx.kube.resource(namespace, name)
                    if body is not None:
                        _refresh(body, self.ctx, namespace, name)
                with self._guard:  # deciding to stop and leaving must be one step, or an event is lost
                    if key not in self._dirty:
                        self._running.discard(key)
                        return
        except BaseException:
            with self._guard:
                self._running.discard(key)
            raise


def _refresh(body: dict[str, Any], ctx: Context, namespace: str, name: str) -> None:
    previous = body.get("status") or {}
    accepted = previous.get("observedGeneration") == body["metadata"].get("generation")
    config = next((c for c in previous.get("conditions") or [] if c.get("type") == "ConfigValid"), None)
    if not accepted or config is None:
        return  # reconcile has not handled this generation yet; it will publish the status
    kind = workload.kind_of_spec(body.get("spec"))
    observed = observe(ctx, body, kind)
    missing = ctx.groups_problem() if kind == workload.LEADER_WORKER_SET and config["status"] == "True" else None
    if config["status"] != "True" or missing:  # LeaderWorkerSet uninstalled: retried until it is back
        reason, message = (GROUPS_MISSING, missing) if missing else (config.get("reason", INVALID_SPEC), "")
        verdict = Verdict(False, reason, message or config.get("message", ""))
        publish(body, ctx, verdict, None, observed)
        return
    policy = ctx.tenant_policy()
    checker = functools.partial(check, policy=policy, stored=True)
    body, report, unlearned = checked(body, checker)  # the draft generation in force, with spec.learning
    chosen = applied.resolve(body, report, lambda c: family_hash(c, ctx.defaults), checker)
    if chosen is None:
        return
    cr = chosen.resource
    desired = desired_of(cr, ctx.defaults, policy.default_engine_versions, chosen)
    wanted = next(o for o in render(cr, ctx.defaults) if workload.is_workload(o))
    arrangement, seen = arrange(ctx, body, cr, desired, wanted, observed)
    observed = seen or observed
    warnings = [str(p) for p in report.warnings] + [w for w in (chosen.warning, unlearned) if w]
    verdict = Verdict(True, config.get("reason", "Valid"), "", warnings)
    if arrangement.decided:  # recorded before it is carried out, so that a restart carries it out too
        publish(body, ctx, verdict, desired, observed, arrangement)
    try:
        for deployment, live in ((arrangement.deployment, observed.deployment), (arrangement.canary, observed.canary)):
            if deployment is not None and (live is None or drifted(deployment["spec"], live.get("spec"))):
                log.info("correcting drift of %s %s/%s", deployment["kind"], namespace, deployment["metadata"]["name"])
                owner = str(body["metadata"].get("uid") or "")
                ctx.owned.apply(ctx.owned.claim(deployment, owner), owner)
        carry_out(ctx, body, arrangement, observed)
    except Clash as clash:  # another object took the name since reconcile applied it: left alone, and said
        verdict = Verdict(False, NAME_CONFLICT, str(clash), warnings)
        publish(body, ctx, verdict, None, observed)
        return
    except ApiException as error:
        if error.status == 403 and "NamespaceTerminating" in str(error.body):
            return  # its namespace is going, and the resource with it
        raise
    publish(body, ctx, verdict, desired, observed, arrangement)
