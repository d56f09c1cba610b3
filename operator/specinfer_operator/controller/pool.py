"""The InferencePool of spec.inferencePool in status (pure): the InferencePool condition and
status.inferencePool.

Reconcile applies the pool after the other children and apart from them: without the Gateway API Inference
Extension's CRD, with a pool the API server refuses or a name another object holds, the engines still roll out
and serve through the Service, and the condition says why there is no pool (manager/handlers.py retries it).
Only reconcile learns how the pool went; a refresh, or a spec that cannot roll out, keeps what it reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.service import INFERENCE_POOL_API_VERSION, INFERENCE_POOL_PLURAL
from specinfer_operator.controller.conditions import condition

POOL_CONDITION = "InferencePool"
APPLIED = "Applied"
CRD_MISSING = "CRDMissing"  # the API server does not serve InferencePools
STATUS_KEY = "inferencePool"


@dataclass(frozen=True)
class PoolReport:
    """How the pool went in a reconcile of a spec that rolled out; `name` None: the spec asks for none."""

    name: str | None
    applied: bool = False
    reason: str = ""
    message: str = ""


NOT_ASKED = PoolReport(None)


def missing_message() -> str:
    return (
        f"spec.inferencePool asks for an InferencePool, but the API server does not serve {INFERENCE_POOL_API_VERSION} "
        f"{INFERENCE_POOL_PLURAL}: install the Gateway API Inference Extension's CRDs "
        "(sigs.k8s.io/gateway-api-inference-extension, v1.0 or later); the engines serve through the Service meanwhile"
    )


def applied_message(pool: dict[str, Any]) -> str:
    """What the applied `pool` routes to, in words."""
    spec, name = pool["spec"], pool["metadata"]["name"]
    picker = spec["endpointPickerRef"]
    selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
    ports = ", ".join(str(p["number"]) for p in spec["targetPorts"])
    return (
        f"InferencePool {name} selects the serving pods ({selector}) on port {ports}; its Endpoint Picker is the "
        f"{picker['kind']} {picker['name']}:{picker['port']['number']} ({picker['failureMode']})"
    )


def fold(status: dict[str, Any], report: PoolReport | None, previous: dict[str, Any], now: str) -> dict[str, Any]:
    """`status` (conditions.compute's) with the InferencePool condition and status.inferencePool: as
    `report` says, or as `previous` had them when there is no report."""
    before = previous.get("conditions") or []
    if report is None:
        kept, entry = [c for c in before if c.get("type") == POOL_CONDITION], previous.get(STATUS_KEY)
    elif report.name is None:
        kept, entry = [], None
    else:
        generation = int(status.get("observedGeneration") or 0)
        said = condition(POOL_CONDITION, report.applied, report.reason, report.message, generation, before, now)
        kept, entry = [said], {"name": report.name} if report.applied else None
    folded = {k: v for k, v in status.items() if k != STATUS_KEY}
    folded["conditions"] = [c for c in status["conditions"] if c.get("type") != POOL_CONDITION] + kept
    return folded | ({STATUS_KEY: entry} if entry is not None else {})
