"""The K Auto tuning applied: how a tuning decision reaches the pods, both ends of the path in one module.

The path, from the telemetry loop to the reconcile loop:

1. telemetry/loop.py windows a resource's figures; tuning/auto.py decides that K should change.
2. `apply` writes that K on the resource, in the annotation `tuning.specinfer.io/effective`, as
   `{"family": ..., "numSpeculativeTokens": K}`. Auto never edits the spec: GitOps keeps it as written.
3. The annotation is outside kopf's storage prefix (`specinfer.io/`), so the write is an update of the
   resource: manager/handlers.py's on_spec runs controller/reconcile.py.
4. Reconcile (and refresh) call `resolve`, which gives the resource to render with that K, and the rollout
   that follows (controller/arrangement.py, through a canary when the spec asks for one) decides whether
   it stays.

The annotation counts only in mode Auto, for the configuration family it was measured on (a spec changed
in anything but K makes it stale), within the tuning bounds, and when the spec with that K passes every
rule; otherwise the spec's K is rendered and the reason is a warning. Setting the annotation by hand pins
K the same way.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.platform.kube import Kube
from specinfer_runtime.validation import Report

MAX_ANNOTATION = 1024  # bytes: anything longer was not written by the operator


@dataclass(frozen=True)
class Effective:
    """The resource to render, the K the spec asked for, and whether the annotation set K (even to the
    spec's own value: a canary of it is then tuning's, reverted when slower, not the spec failing)."""

    resource: SpeculativeInference
    requested_k: int
    warning: str | None = None
    tuned: bool = False


def annotation(family: str, k: int) -> str:
    return json.dumps({"family": family, "numSpeculativeTokens": k}, separators=(",", ":"))


def _tuned_k(body: dict[str, Any], family: str) -> tuple[int | None, str | None]:
    """The K the annotation sets for this family, or why it sets none (None: it is absent or stale)."""
    raw = ((body.get("metadata") or {}).get("annotations") or {}).get(TUNED_K_ANNOTATION)
    if raw is None:
        return None, None
    if len(raw) > MAX_ANNOTATION:
        return None, f"{TUNED_K_ANNOTATION} is longer than {MAX_ANNOTATION} bytes: ignored"
    try:
        value = json.loads(raw)
    except ValueError:
        return None, f"{TUNED_K_ANNOTATION} is not JSON: ignored"
    k = value.get("numSpeculativeTokens") if isinstance(value, dict) else None
    if not isinstance(k, int) or isinstance(k, bool):
        return None, f'{TUNED_K_ANNOTATION} needs {{"family": ..., "numSpeculativeTokens": K}}: ignored'
    if value.get("family") != family:
        return None, None  # measured on another configuration: the spec changed since
    return k, None


def resolve(
    body: dict[str, Any],
    report: Report[SpeculativeInference],
    family: Callable[[SpeculativeInference], str],
    check: Callable[[dict[str, Any]], Report[SpeculativeInference]],
) -> Effective | None:
    """What to render for a checked resource (None when the spec itself is invalid)."""
    cr = report.value
    if cr is None:
        return None
    requested = cr.spec.engine().effective_k()
    tuning = cr.spec.speculative.tuning
    if tuning is None or tuning.mode != "Auto":
        return Effective(cr, requested)
    k, problem = _tuned_k(body, family(cr))
    if k is None:
        return Effective(cr, requested, problem)
    if k == requested:
        return Effective(cr, requested, tuned=True)
    top = tuning.max_k or requested
    if not tuning.min_k <= k <= top:
        why = f"{TUNED_K_ANNOTATION} sets K={k}, outside minK {tuning.min_k} to maxK {top}: ignored"
        return Effective(cr, requested, why)
    tuned = copy.deepcopy(body)
    tuned["spec"]["speculative"]["numSpeculativeTokens"] = k
    checked = check(tuned)
    if checked.value is None:
        why = "; ".join(str(p) for p in checked.errors)
        refused = f"{TUNED_K_ANNOTATION} sets K={k}, which the spec does not allow ({why}): ignored"
        return Effective(cr, requested, refused)
    return Effective(checked.value, requested, tuned=True)


def apply(kube: Kube, namespace: str, name: str, family: str, k: int) -> None:
    """Hand Auto's K to the reconcile loop: the annotation's update reconciles the resource (see above)."""
    kube.patch_metadata(namespace, name, {"annotations": {TUNED_K_ANNOTATION: annotation(family, k)}})
