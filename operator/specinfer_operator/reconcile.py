"""One idempotent reconcile: validate, check the cluster can run it, apply the children, report status.

A spec that cannot run is never applied: the Deployment keeps serving the last valid configuration
and the status says why (ConfigValid=False). Child events go to refresh.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from specinfer_operator import metrics, rollout
from specinfer_operator.children import (
    RenderDefaults,
    config_hash,
    engine_config_map_name,
    label_selector,
    render,
    selector_labels,
)
from specinfer_operator.kube import Kube
from specinfer_operator.manifests import check
from specinfer_operator.resource import SpeculativeInference
from specinfer_operator.status import Desired, Observed, Verdict, compute, transitions

log = logging.getLogger(__name__)


class EventSink(Protocol):
    def __call__(self, body: dict[str, Any], type: str, reason: str, message: str) -> None: ...


@dataclass
class Context:
    """What every reconcile needs; one per operator process."""

    kube: Kube
    defaults: RenderDefaults
    events: EventSink
    now: Callable[[], str] = lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _refreshing: set[tuple[str, str]] = field(default_factory=set)
    _dirty: set[tuple[str, str]] = field(default_factory=set)
    # Children are applied concurrently: order is irrelevant (a pod retries mounting its ConfigMap,
    # which exists long before any pod is scheduled) and each apply is a round trip.
    appliers: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8, "apply"))
    # Each resource's pods by (namespace, name), kept by the watch (kopf's index); None: list them.
    pods: Mapping[tuple[str, str], Iterable[dict[str, Any]]] | None = None

    def lock(self, namespace: str, name: str) -> threading.Lock:
        """One resource at a time: kopf handles events of its pods concurrently, and each publishes status."""
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())


def desired_of(cr: SpeculativeInference, defaults: RenderDefaults) -> Desired:
    engine = cr.spec.engine()
    name, namespace = cr.metadata.name, cr.metadata.namespace or "default"
    return Desired(
        config_hash=config_hash(engine),
        replicas=cr.spec.replicas,
        method=engine.speculative.effective_method(),
        num_speculative_tokens=engine.effective_k(),
        capture_sizes=engine.capture_sizes(),
        npus_per_pod=cr.spec.npus_per_pod(),
        npu_resource=cr.spec.resources.npu_resource_name or defaults.npu_resource_name,
        endpoint=f"http://{name}.{namespace}.svc:{cr.spec.service.port}",
        selector=label_selector(selector_labels(name)),
        config_map=engine_config_map_name(name, config_hash(engine)),
    )


def capacity_problem(desired: Desired, node_selector: dict[str, str], nodes: list[dict[str, Any]]) -> str | None:
    """A pod that no node could ever hold, or None. Without any node advertising the resource (device
    plugin not ready, autoscaling) nothing is refused: the pods report Unschedulable instead."""
    resource = desired.npu_resource
    offers = [
        int(str(node.get("status", {}).get("allocatable", {}).get(resource, "0")))
        for node in nodes
        if all(node.get("metadata", {}).get("labels", {}).get(k) == v for k, v in node_selector.items())
    ]
    offering = [n for n in offers if n > 0]
    if not offering or desired.npus_per_pod <= max(offering):
        return None
    where = " matching spec.placement.nodeSelector" if node_selector else ""
    return (
        f"each pod needs {desired.npus_per_pod} {resource}, but the largest node{where} has {max(offering)}: "
        "lower parallelism (tensor x pipeline x data) or add larger nodes"
    )


def status_patch(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any] | None:
    """A merge patch turning `previous` into `current` (None when equal: no write at steady state).

    Keys that went away are set to null at every depth: a merge patch keeps whatever it does not name, so
    `speculation.observed` of a replaced configuration would otherwise survive the new one."""
    if previous == current:
        return None
    patch: dict[str, Any] = dict(current)
    for key, value in current.items():
        before = previous.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            patch[key] = status_patch(before, value) or value
    for key in previous:
        if key not in current:
            patch[key] = None
    return patch


def verdict_of(
    cr_body: dict[str, Any], nodes: list[dict[str, Any]], defaults: RenderDefaults
) -> tuple[Verdict, SpeculativeInference | None, Desired | None]:
    """Whether the spec may roll out; the resource and its desired state when it may."""
    report = check(cr_body)
    if report.value is None:
        message = "; ".join(str(p) for p in report.errors)
        return Verdict(False, "InvalidSpec", message), None, None
    cr = report.value
    warnings = [str(p) for p in report.warnings]
    desired = desired_of(cr, defaults)
    problem = capacity_problem(desired, cr.spec.placement.node_selector or {}, nodes)
    if problem:
        return Verdict(False, "InsufficientNPUCapacity", problem, warnings), cr, None
    return Verdict(True, "ValidWithWarnings" if warnings else "Valid", "", warnings), cr, desired


def observe(ctx: Context, namespace: str, name: str, deployment: dict[str, Any] | None = None) -> Observed:
    """The Deployment (read unless given) and its pods: from the watch's index when kopf has handed it
    over, since listing a namespace's pods per refresh costs the API server O(pods) each time."""
    if deployment is None:
        deployment = ctx.kube.get("apps/v1", "deployments", namespace, name)
    if ctx.pods is not None:
        pods = list(ctx.pods.get((namespace, name), ()))
    else:
        pods = ctx.kube.list("v1", "pods", namespace, label_selector(selector_labels(name)))
    return Observed(deployment=deployment, pods=pods)


def _event_type(kind: str, status: bool) -> str:
    bad = (kind == "Degraded" and status) or (kind == "ConfigValid" and not status)
    return "Warning" if bad else "Normal"


def publish(
    body: dict[str, Any],
    ctx: Context,
    verdict: Verdict,
    desired: Desired | None,
    observed: Observed,
    rollback: dict[str, Any] | None = None,
) -> None:
    """Compute the status, write it only if it changed, and report transitions as events and metrics."""
    meta = body["metadata"]
    previous = body.get("status") or {}
    current = compute(meta.get("generation", 0), verdict, desired, observed, previous, ctx.now(), rollback)
    patch = status_patch(previous, current)
    if patch is None:
        return
    ctx.kube.patch_status(meta["namespace"], meta["name"], patch)
    metrics.STATUS_WRITES.labels(writer="reconcile").inc()
    metrics.observe_conditions(meta["namespace"], meta["name"], current["conditions"])
    for kind, reason, message in transitions(previous, current):
        status = next(c["status"] == "True" for c in current["conditions"] if c["type"] == kind)
        if kind == "Progressing":
            if reason == "RolloutComplete":
                metrics.ROLLOUTS_FINISHED.labels(result="complete").inc()
            elif reason == "ProgressDeadlineExceeded":
                metrics.ROLLOUTS_FINISHED.labels(result="deadline_exceeded").inc()
        ctx.events(body, _event_type(kind, status), reason, message or f"{kind} is {status}")


def reconcile(body: dict[str, Any], ctx: Context, nodes: list[dict[str, Any]]) -> None:
    """Bring the children in line with the spec (if it can run on these nodes) and report."""
    started = time.perf_counter()
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    result = "error"
    try:
        with ctx.lock(namespace, name):
            result = _reconcile(body, ctx, nodes, namespace, name)
    finally:
        metrics.RECONCILES.labels(result=result).inc()
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)


# What the API server says when it refuses an object (invalid, forbidden by admission), as opposed to
# conditions worth retrying: not found, conflicts, throttling.
RETRIED = (404, 409, 429)
# ConfigValid's reason then; handlers retry such a resource on a timer, as the cause may be outside it.
APPLY_REJECTED = "ApplyRejected"
MESSAGE_LIMIT = 1000


def apply_children(
    kube: Kube, children: list[dict[str, Any]], appliers: ThreadPoolExecutor, dry_run: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """Apply every child concurrently; what the API server returned, or why it (or an admission policy)
    refused any of them. Conditions worth retrying (not found, conflicts, throttling) raise."""

    def attempt(obj: dict[str, Any]) -> dict[str, Any] | str:
        try:
            return kube.apply(obj, dry_run=dry_run)
        except ApiException as error:
            if not 400 <= (error.status or 0) < 500 or error.status in RETRIED:
                raise
            try:
                said = str(json.loads(error.body or "{}").get("message") or error.body)
            except ValueError:
                said = str(error.body)
            return f"the API server refused the {obj['kind']} {obj['metadata']['name']}: {said}"[:MESSAGE_LIMIT]

    results = list(appliers.map(attempt, children))
    refused = [r for r in results if isinstance(r, str)]
    return [r for r in results if isinstance(r, dict)], "; ".join(refused) or None


def _reconcile(body: dict[str, Any], ctx: Context, nodes: list[dict[str, Any]], namespace: str, name: str) -> str:
    verdict, cr, desired = verdict_of(body, nodes, ctx.defaults)
    children = render(cr, ctx.defaults) if desired is not None and cr is not None else []
    previous = body.get("status") or {}
    rollback = rollout.in_force(previous, int(body["metadata"].get("generation") or 0))
    if rollback is not None and desired is not None:  # this spec failed: what serves stays the last good one
        children, rollback = _keep_rolled_back(ctx, children, previous, namespace, name, rollback)
    # A configuration already serves: a dry run of every child first, so that a refusal of any leaves
    # all of them as they are. Before the first apply nothing serves, and the round trip is saved.
    serving = bool(previous.get("configHash"))
    refused = apply_children(ctx.kube, children, ctx.appliers, dry_run=True)[1] if children and serving else None
    applied: list[dict[str, Any]] = []
    if desired is not None and not refused:
        applied, refused = apply_children(ctx.kube, children, ctx.appliers, dry_run=False)
    if refused:
        verdict, desired = Verdict(False, APPLY_REJECTED, refused, verdict.warnings), None
    deployment = next((o for o in applied if o.get("kind") == "Deployment"), None)
    if desired is not None and deployment is not None and previous.get("configHash") != desired.config_hash:
        metrics.ROLLOUTS_STARTED.inc()
        # ConfigMaps of older configurations exist once one served, or a first apply was partly refused.
        rejected = any(c.get("reason") == APPLY_REJECTED for c in previous.get("conditions") or [])
        if serving or rejected:
            prune_config_maps(ctx.kube, namespace, name, deployment)
    publish(body, ctx, verdict, desired, observe(ctx, namespace, name, deployment), rollback)
    return "applied" if verdict.valid else "refused"


def _keep_rolled_back(
    ctx: Context,
    children: list[dict[str, Any]],
    previous: dict[str, Any],
    namespace: str,
    name: str,
    rollback: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The children with the last good Deployment in place of the failed one; unchanged (and no rollback)
    when its ReplicaSet is gone."""
    wanted = next(o for o in children if o["kind"] == "Deployment")
    back = restore(ctx, wanted, previous, namespace, name)
    if back is None:
        return children, None
    return [back if o is wanted else o for o in children], rollback


def restore(
    ctx: Context,
    wanted: dict[str, Any],
    previous: dict[str, Any],
    namespace: str,
    name: str,
    live: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """`wanted` with the last good configuration's pod template: from the live Deployment when it runs it
    already (no read), else from its ReplicaSet; None without one."""
    good = ((previous.get("rollout") or {}).get("lastGood") or {}).get("configHash")
    if not good:
        return None
    back = rollout.restored(wanted, [live] if live is not None else [], str(good))
    if back is not None:
        return back
    replicasets = ctx.kube.list("apps/v1", "replicasets", namespace, label_selector(selector_labels(name)))
    back = rollout.restored(wanted, replicasets, str(good))
    if back is None:
        log.warning("cannot roll %s/%s back: no ReplicaSet runs configuration %s any more", namespace, name, good)
    return back


def prune_config_maps(kube: Kube, namespace: str, name: str, deployment: dict[str, Any]) -> None:
    """Delete engine ConfigMaps that neither the Deployment nor any of its ReplicaSets mounts (rollbacks
    keep theirs)."""
    selector = label_selector(selector_labels(name))
    in_use = {
        volume["configMap"]["name"]
        for rs in kube.list("apps/v1", "replicasets", namespace, selector)
        for volume in rs.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", [])
        if "configMap" in volume
    }
    for volume in deployment.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
        if "configMap" in volume:
            in_use.add(volume["configMap"]["name"])
    for config_map in kube.list("v1", "configmaps", namespace, selector):
        config_name = config_map["metadata"]["name"]
        if config_name.startswith(f"{name}-engine-") and config_name not in in_use:
            kube.delete("v1", "configmaps", namespace, config_name)
