"""kopf handlers: thin. Spec changes go to reconcile; child events refresh status and correct drift."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kopf

from specinfer_operator.api.labels import CANARY_ACTION_ANNOTATION, CHILD_LABELS, INSTANCE_LABEL, MANAGER
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION
from specinfer_operator.controller.conditions import GROUPS_MISSING, REFUSED
from specinfer_operator.controller.context import Context
from specinfer_operator.controller.pool import CRD_MISSING, POOL_CONDITION
from specinfer_operator.controller.reconcile import reconcile
from specinfer_operator.controller.refresh import Refreshes
from specinfer_operator.learning import loop as learning
from specinfer_operator.manager.diffbase import BoundedDiffBaseStorage
from specinfer_operator.manager.podwatch import PodWatches
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import label_selector
from specinfer_operator.telemetry.loop import Telemetry

WORKERS = 32  # sync handlers block on API calls; 2 cores' default of 6 queues them
# How long kopf waits for the echo of its own patch before handling an older copy of an object. Its
# default, 5 s, is shorter than the watch lag while hundreds of resources are created at once: kopf then
# took a resource's stale copy for a new creation and reconciled it a second time (a third more writes).
CONSISTENCY_SECONDS = 60
# A refused child is retried this often: one dry run per refused resource, and the cause (a policy, a quota)
# may go at any time.
RETRY_SECONDS = 30
# A group refused for want of LeaderWorkerSet, and a pool for want of its CRD, more often: the check is one
# discovery request, shared by every resource (Context.serves).
GROUPS_RETRY_SECONDS = 10
# The pods are listed again this long after a failed list at start (kopf's default: 60 s).
STARTUP_RETRY_SECONDS = 5


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf's bookkeeping lives in annotations: the status schema is ours, and structural.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = BoundedDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.WARNING  # handler failures become Events; routine logs do not
    settings.posting.reporting_component = MANAGER
    # kopf waits this long for more events of an object before handling it (default 0.1 s): most of
    # the apply-to-Deployment latency.
    settings.batching.batch_window = 0.01
    settings.execution.max_workers = WORKERS
    settings.persistence.consistency_timeout = CONSISTENCY_SECONDS
    # Watch only our own children: the label filter below would otherwise apply to every Deployment in the
    # cluster. Pods are watched apart, bounded (manager/podwatch.py).
    settings.watching.label_selectors["deployments"] = label_selector(CHILD_LABELS)
    # Read the API's resource list once at start instead of watching CRDs and namespaces: the watched
    # namespaces are named exactly, and the RBAC then needs no cluster-wide read of either.
    settings.scanning.disabled = True


@kopf.on.startup(backoff=STARTUP_RETRY_SECONDS)
def watch_pods(memo: kopf.Memo, **_: Any) -> None:
    """List the labelled pods before any handler runs, as kopf's index did, then watch them in threads; a
    list that fails (the API server away) is tried again, and the operator starts once all have been read."""
    pods: PodWatches = memo["pods"]
    pods.start()
    ctx: Context = memo["ctx"]
    ctx.pods = pods.index  # complete from now on; until then, a refresh (the telemetry's) lists the pods


@kopf.on.startup()
def start_telemetry(memo: kopf.Memo, **_: Any) -> None:
    telemetry: Telemetry = memo["telemetry"]
    if telemetry.config.interval > 0:
        telemetry.start()


@kopf.on.cleanup()
def stop_background(memo: kopf.Memo, **_: Any) -> None:
    memo["pods"].stop()
    memo["telemetry"].stop()
    memo["refreshes"].stop()


@kopf.index("v1", "nodes")
def nodes(body: kopf.Body, name: str, **_: Any) -> dict[str, dict[str, Any]]:
    """Node labels and allocatable resources, kept current by a watch, for the NPU capacity check."""
    return {
        name: {
            "metadata": {"labels": dict(body.metadata.labels)},
            "status": {"allocatable": dict(body.status.get("allocatable", {}))},
        }
    }


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def on_spec(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    index: kopf.Index[str, dict[str, Any]] = kwargs["nodes"]
    reconcile(dict(body), memo["ctx"], [node for store in index.values() for node in store])


def _refused(*reasons: str, kinds: tuple[str, ...] = ("ConfigValid",)) -> Callable[..., bool]:
    """Whether a condition of one of `kinds` has one of `reasons` (each of them a refusal)."""

    def refused(status: kopf.Status, **_: Any) -> bool:
        return any(c.get("type") in kinds and c.get("reason") in reasons for c in status.get("conditions") or [])

    return refused


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=RETRY_SECONDS,
    initial_delay=RETRY_SECONDS,
    when=_refused(*REFUSED, kinds=("ConfigValid", POOL_CONDITION)),
)
def retry_rejected(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """A child (or the InferencePool) the API server refused may pass later (an admission policy or quota
    changed), and a name another object holds may be freed: try again."""
    on_spec(body=body, memo=memo, **kwargs)


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=GROUPS_RETRY_SECONDS,
    initial_delay=GROUPS_RETRY_SECONDS,
    when=_refused(GROUPS_MISSING),
)
def retry_without_groups(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """LeaderWorkerSet may be installed at any time: then the group rolls out, without an edit of the spec."""
    on_spec(body=body, memo=memo, **kwargs)


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=GROUPS_RETRY_SECONDS,
    initial_delay=GROUPS_RETRY_SECONDS,
    when=_refused(CRD_MISSING, kinds=(POOL_CONDITION,)),
)
def retry_without_pools(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """The InferencePool CRD may be installed at any time: then the pool is created, without an edit of the
    spec. The resource is reconciled only once the API serves pools (asked once for every resource)."""
    if memo["ctx"].pools_served():
        on_spec(body=body, memo=memo, **kwargs)


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=learning.INTERVAL,
    initial_delay=learning.INTERVAL,
    when=lambda spec, **_: spec.get("learning") is not None,
)
def learn(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """spec.learning: count what was served, start training runs, hand trained drafts to their canary."""
    ctx: Context = memo["ctx"]
    resource = dict(body)
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    report = check(resource, policy=ctx.tenant_policy(), stored=True)
    if report.value is None:
        return  # an invalid spec: the reconcile loop says why; learning waits with it
    telemetry: Telemetry = memo["telemetry"]
    with ctx.lock(namespace, name):
        learning.tick(
            resource, report.value, ctx.kube, ctx.defaults, telemetry.take_requests((namespace, name)), ctx.now()
        )


# The event handlers below only update memory or schedule work, so they run on kopf's event loop: a
# thread hop each would queue behind the handler threads, and delay the on_spec of the same resource.
@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_resource_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """Keep the telemetry loop's view of each resource (settings, status) current, without reads, and forget
    a deleted one everywhere; act on a canary's manual action. kopf's diffs leave out annotations under its
    storage prefix (specinfer.io/), so on_spec never sees one set."""
    body: dict[str, Any] = dict(event["object"])
    memo["telemetry"].resource_event(event.get("type"), body)
    metadata: dict[str, Any] = body.get("metadata") or {}
    if event.get("type") == "DELETED":
        ctx: Context = memo["ctx"]
        ctx.forget(str(metadata.get("namespace") or ""), str(metadata.get("uid") or ""))
    if event.get("type") != "DELETED" and CANARY_ACTION_ANNOTATION in (metadata.get("annotations") or {}):
        refreshes: Refreshes = memo["refreshes"]
        refreshes.schedule((metadata.get("namespace", ""), metadata.get("name", "")))


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
async def on_child(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Refresh the owner's status (and correct drift) once the burst this event belongs to has passed; pod
    events schedule the same refresh from the operator's own pod watch (manager/podwatch.py).

    LeaderWorkerSets are not watched: a group's status is counted from its pods, and any change to a
    LeaderWorkerSet that matters (its deletion, a new template or replica count) replaces pods, whose events
    bring the refresh that corrects it. A watch would also stop the operator when LeaderWorkerSet is
    uninstalled (kopf ends on the 404), and would need list and watch on them cluster-wide."""
    owner = body.get("metadata", {}).get("labels", {}).get(INSTANCE_LABEL)
    namespace = body.get("metadata", {}).get("namespace")
    if owner and namespace:
        refreshes: Refreshes = memo["refreshes"]
        refreshes.schedule((namespace, owner))
