"""kopf handlers: thin. Spec changes go to reconcile; child events refresh status and correct drift."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from specinfer_operator import metrics
from specinfer_operator.children import MANAGER, label_selector
from specinfer_operator.reconcile import APPLY_REJECTED, Context, reconcile, refresh
from specinfer_operator.resource import GROUP, PLURAL, VERSION
from specinfer_operator.telemetry import Telemetry

CHILD_LABELS = {"app.kubernetes.io/managed-by": MANAGER}


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf's bookkeeping lives in annotations: the status schema is ours, and structural.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.WARNING  # handler failures become Events; routine logs do not
    settings.posting.reporting_component = MANAGER
    # kopf waits this long for more events of an object before handling it (default 0.1 s): most of
    # the apply-to-Deployment latency.
    settings.batching.batch_window = 0.01
    settings.execution.max_workers = 32  # sync handlers block on API calls; 2 cores' default of 6 queues
    # Watch only our own children: the label filters below would otherwise apply to every pod in the cluster.
    for resource in ("deployments", "pods"):
        settings.watching.label_selectors[resource] = label_selector(CHILD_LABELS)
    # Read the API's resource list once at start instead of watching CRDs and namespaces: the watched
    # namespaces are named exactly, and the RBAC then needs no cluster-wide read of either.
    settings.scanning.disabled = True


@kopf.on.startup()
def start_telemetry(memo: kopf.Memo, **_: Any) -> None:
    telemetry: Telemetry = memo["telemetry"]
    if telemetry.config.interval > 0:
        telemetry.start()


@kopf.on.cleanup()
def stop_telemetry(memo: kopf.Memo, **_: Any) -> None:
    memo["telemetry"].stop()


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
    index: kopf.Index[str, dict[str, Any]] = kwargs["nodes"]  # kopf passes each index by its name
    reconcile(dict(body), memo["ctx"], [node for store in index.values() for node in store])


def _apply_rejected(status: kopf.Status, **_: Any) -> bool:
    return any(
        c.get("type") == "ConfigValid" and c.get("reason") == APPLY_REJECTED for c in status.get("conditions") or []
    )


@kopf.timer(GROUP, VERSION, PLURAL, interval=60, initial_delay=60, when=_apply_rejected)
def retry_rejected(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """A child the API server refused may pass later (an admission policy or quota changed): try again."""
    on_spec(body=body, memo=memo, **kwargs)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def on_delete(name: str, namespace: str | None, **_: Any) -> None:
    # Children go with their ownerReferences; only the metrics remember the resource.
    metrics.forget(namespace or "", name)


@kopf.on.event(GROUP, VERSION, PLURAL)
def on_resource_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """Keep the telemetry loop's view of each resource (settings, status) current, without reads."""
    memo["telemetry"].resource_event(event.get("type"), dict(event["object"]))


@kopf.on.event("v1", "pods", labels=CHILD_LABELS)
def on_pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """Keep the telemetry loop's scrape targets (Ready pods, their IPs and configurations) current."""
    memo["telemetry"].pod_event(event.get("type"), dict(event["object"]))


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event("v1", "pods", labels=CHILD_LABELS)
def on_child(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    owner = body.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/instance")
    namespace = body.get("metadata", {}).get("namespace")
    if owner and namespace:
        ctx: Context = memo["ctx"]
        refresh(namespace, owner, ctx)
