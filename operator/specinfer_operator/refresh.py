"""After a workload (Deployment, LeaderWorkerSet) or pod event: refresh the status, correct drift, judge a
canary, roll a failed configuration back.

Child events never roll out a spec that reconcile has not accepted: they only compare what runs with what
reconcile accepted, arranged by strategy.py (the last good configuration after a rollback, a canary
beside the stable pods).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from specinfer_operator import effective, strategy, workload
from specinfer_operator.children import family_hash, render
from specinfer_operator.context import Context, desired_of, observe
from specinfer_operator.manifests import check
from specinfer_operator.owned import Clash
from specinfer_operator.reconcile import GROUPS_MISSING, NAME_CONFLICT, groups_problem, publish
from specinfer_operator.status import Verdict

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


def refresh(namespace: str, name: str, ctx: Context) -> None:
    """After a workload or pod event: correct drift of an accepted spec, then refresh the status.

    Events come in bursts (every pod transition, every workload status change). One refresh per
    resource runs at a time; events arriving meanwhile make it run once more, so the last state is
    always published without one refresh per event."""
    key = (namespace, name)
    with ctx._guard:
        if key in ctx._refreshing:
            ctx._dirty.add(key)
            return
        ctx._refreshing.add(key)
    try:
        while True:
            with ctx._guard:
                ctx._dirty.discard(key)
            with ctx.lock(namespace, name):
                body = ctx.kube.resource(namespace, name)
                if body is not None:
                    _refresh(body, ctx, namespace, name)
            with ctx._guard:  # deciding to stop and leaving must be one step, or an event is lost
                if key not in ctx._dirty:
                    ctx._refreshing.discard(key)
                    return
    except BaseException:
        with ctx._guard:
            ctx._refreshing.discard(key)
        raise


def _refresh(body: dict[str, Any], ctx: Context, namespace: str, name: str) -> None:
    previous = body.get("status") or {}
    accepted = previous.get("observedGeneration") == body["metadata"].get("generation")
    config = next((c for c in previous.get("conditions") or [] if c.get("type") == "ConfigValid"), None)
    if not accepted or config is None:
        return  # reconcile has not handled this generation yet; it will publish the status
    kind = workload.kind_of_spec(body.get("spec"))
    observed = observe(ctx, body, kind)
    missing = groups_problem(ctx) if kind == workload.LEADER_WORKER_SET and config["status"] == "True" else None
    if config["status"] != "True" or missing:  # LeaderWorkerSet uninstalled: retried until it is back
        reason, message = (GROUPS_MISSING, missing) if missing else (config.get("reason", "InvalidSpec"), "")
        verdict = Verdict(False, reason, message or config.get("message", ""))
        publish(body, ctx, verdict, None, observed)
        return
    checker = functools.partial(check, policy=ctx.tenant_policy())
    report = checker(body)
    chosen = effective.resolve(body, report, lambda c: family_hash(c, ctx.defaults), checker)
    if chosen is None:
        return
    cr = chosen.resource
    desired = desired_of(cr, ctx.defaults, chosen.requested_k, chosen.tuned)
    wanted = next(o for o in render(cr, ctx.defaults) if workload.is_workload(o))
    arrangement, seen = strategy.arrange(ctx, body, cr, desired, wanted, observed)
    observed = seen or observed
    warnings = [str(p) for p in report.warnings] + ([chosen.warning] if chosen.warning else [])
    verdict = Verdict(True, config.get("reason", "Valid"), "", warnings)
    if arrangement.decided:  # recorded before it is carried out, so that a restart carries it out too
        publish(body, ctx, verdict, desired, observed, arrangement)
    try:
        for deployment, live in ((arrangement.deployment, observed.deployment), (arrangement.canary, observed.canary)):
            if deployment is not None and (live is None or drifted(deployment["spec"], live.get("spec"))):
                log.info("correcting drift of %s %s/%s", deployment["kind"], namespace, deployment["metadata"]["name"])
                owner = str(body["metadata"].get("uid") or "")
                ctx.owned.apply(ctx.owned.claim(deployment, owner), owner)
        strategy.carry_out(ctx, body, arrangement, observed)
    except Clash as clash:  # another object took the name since reconcile applied it: left alone, and said
        verdict = Verdict(False, NAME_CONFLICT, str(clash), warnings)
        publish(body, ctx, verdict, None, observed)
        return
    except ApiException as error:
        if error.status == 403 and "NamespaceTerminating" in str(error.body):
            return  # its namespace is going, and the resource with it
        raise
    publish(body, ctx, verdict, desired, observed, arrangement)
