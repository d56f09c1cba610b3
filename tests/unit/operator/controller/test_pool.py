"""The InferencePool in status (pure): reconcile's report sets the condition and status.inferencePool, a
refresh keeps them, a spec without a pool drops them; a missing pool is a Warning, never a worse Ready."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from specinfer_operator.controller.conditions import Observed, Verdict, compute, transitions
from specinfer_operator.controller.context import Context
from specinfer_operator.controller.pool import (
    APPLIED,
    CRD_MISSING,
    NOT_ASKED,
    PoolReport,
    applied_message,
    fold,
    missing_message,
)
from specinfer_operator.controller.publish import _event_type
from specinfer_operator.controller.reconcile import apply_pool
from specinfer_operator.render.children import RenderDefaults, inference_pool
from tests.support.builders import cr
from tests.support.statuses import DESIRED, LATER, NOW, conditions, deployment, fits_the_schema

MISSING = PoolReport("demo", False, CRD_MISSING, missing_message())


def serving(report: PoolReport | None, previous: dict[str, Any] | None = None, now: str = NOW) -> dict[str, Any]:
    """The status of a resource serving DESIRED on every pod, with the pool as `report` says."""
    previous = previous or {}
    status = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), previous, now)
    folded = fold(status, report, previous, now)
    fits_the_schema(folded)
    return folded


def test_an_applied_pool_is_named_in_status_with_its_condition() -> None:
    spec = {"model": {"name": "org/t"}, "speculative": {"method": "ngram"}, "inferencePool": {}}
    pool = inference_pool(cr(spec))
    assert pool is not None
    status = serving(PoolReport("demo", True, APPLIED, applied_message(pool)))
    assert status["inferencePool"] == {"name": "demo"}
    assert conditions(status)["InferencePool"] == ("True", APPLIED)
    (said,) = [c for c in status["conditions"] if c["type"] == "InferencePool"]
    assert said["message"] == (
        "InferencePool demo selects the serving pods (app.kubernetes.io/name=specinfer-engine,"
        "app.kubernetes.io/instance=demo) on port 8000; its Endpoint Picker is the Service demo-epp:9002 (FailClose)"
    )
    assert said["observedGeneration"] == 3


def test_without_the_crd_the_resource_is_ready_and_says_what_to_install() -> None:
    status = serving(MISSING)
    assert "inferencePool" not in status
    assert conditions(status)["InferencePool"] == ("False", CRD_MISSING)
    assert conditions(status)["Ready"] == ("True", "Ready")
    assert conditions(status)["Degraded"] == ("False", "AsExpected")
    assert "install the Gateway API Inference Extension's CRDs" in missing_message()
    assert ("InferencePool", CRD_MISSING, missing_message()) in transitions({}, status)
    assert _event_type("InferencePool", False) == "Warning"
    assert _event_type("InferencePool", True) == "Normal"


def test_a_refresh_keeps_what_reconcile_reported_and_a_spec_without_a_pool_drops_it() -> None:
    before = serving(PoolReport("demo", True, APPLIED, "applied"))
    kept = serving(None, before, LATER)
    assert kept["inferencePool"] == {"name": "demo"}
    assert [c for c in kept["conditions"] if c["type"] == "InferencePool"] == [
        c for c in before["conditions"] if c["type"] == "InferencePool"
    ]
    dropped = serving(NOT_ASKED, before, LATER)
    assert "inferencePool" not in dropped
    assert "InferencePool" not in conditions(dropped)


def test_the_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = serving(MISSING)
    again = serving(MISSING, first, LATER)
    times = [
        next(c["lastTransitionTime"] for c in s["conditions"] if c["type"] == "InferencePool") for s in (first, again)
    ]
    assert times == [NOW, NOW]
    applied = serving(PoolReport("demo", True, APPLIED, "applied"), again, LATER)
    assert next(c["lastTransitionTime"] for c in applied["conditions"] if c["type"] == "InferencePool") == LATER


def test_a_spec_that_cannot_roll_out_keeps_the_pool_as_it_was() -> None:
    before = serving(PoolReport("demo", True, APPLIED, "applied"))
    refused = compute(
        4, Verdict(False, "InvalidSpec", "bad"), None, Observed(deployment(DESIRED.config_hash), []), before, LATER
    )
    folded = fold(refused, None, before, LATER)
    fits_the_schema(folded)
    assert folded["inferencePool"] == {"name": "demo"}
    assert conditions(folded)["InferencePool"] == ("True", APPLIED)


class PoolKube:
    """The requests apply_pool makes: discovery, the claim's read and the apply (refused when `refuse` is set)."""

    def __init__(self, served: bool, refuse: ApiException | None = None) -> None:
        self.served, self.refuse = served, refuse
        self.discoveries = 0
        self.applied: list[dict[str, Any]] = []

    def serves(self, api_version: str, plural: str) -> bool:
        assert (api_version, plural) == ("inference.networking.k8s.io/v1", "inferencepools")
        self.discoveries += 1
        return self.served

    def get(self, *_: Any) -> None:
        return None

    def apply(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        self.applied.append(obj)
        return {**obj, "metadata": {**obj["metadata"], "uid": "pool-uid"}}


def pooled() -> dict[str, Any]:
    spec = {"model": {"name": "org/t"}, "speculative": {"method": "ngram"}, "inferencePool": {}}
    pool = inference_pool(cr(spec, uid="owner", namespace="ml"))
    assert pool is not None
    return pool


def test_without_the_crd_nothing_is_applied_and_discovery_is_asked_once_for_all() -> None:
    kube = PoolKube(served=False)
    ctx = Context(kube, RenderDefaults(), lambda *args: None)  # type: ignore[arg-type]
    reports = [apply_pool(ctx, pooled(), "owner") for _ in range(3)]
    assert {(r.applied, r.reason) for r in reports} == {(False, CRD_MISSING)}
    assert (kube.discoveries, kube.applied) == (1, [])


def test_with_the_crd_the_pool_is_applied_and_a_refusal_is_reported_not_raised() -> None:
    kube = PoolKube(served=True)
    ctx = Context(kube, RenderDefaults(), lambda *args: None)  # type: ignore[arg-type]
    report = apply_pool(ctx, pooled(), "owner")
    assert (report.name, report.applied, report.reason) == ("demo", True, APPLIED)
    assert [o["kind"] for o in kube.applied] == ["InferencePool"]
    refused = PoolKube(served=True, refuse=ApiException(status=422, reason="Invalid", body='{"message": "no"}'))
    ctx = Context(refused, RenderDefaults(), lambda *args: None)  # type: ignore[arg-type]
    report = apply_pool(ctx, pooled(), "owner")
    assert (report.applied, report.reason) == (False, "ApplyRejected")
    assert report.message == "the API server refused the InferencePool demo: no"
