"""Statuses as the controller computes them, and the workloads they are computed from, for the tests of the
controller, the canary and tuning."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specinfer_operator.api.status import SpeculativeInferenceStatus
from specinfer_operator.controller.conditions import Observed, Verdict, compute
from specinfer_operator.controller.context import desired_of
from specinfer_operator.render.children import RenderDefaults
from tests.support.builders import cr, example

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
DESIRED = desired_of(cr(example("eagle3")["spec"], name="llama3-eagle3", namespace="ml"), RenderDefaults())


def deployment(config_hash: str, replicas: int = 2, ready: int = 2, updated: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"generation": 3},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"annotations": {"specinfer.io/config-hash": config_hash}}},
        },
        "status": {
            "observedGeneration": 3,
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            **extra,
        },
    }


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


GOOD = replace(DESIRED, config_hash="good", method="ngram", num_speculative_tokens=4, config_map="x-engine-good")


def good_status() -> dict[str, Any]:
    """The status once GOOD served everywhere."""
    return compute(3, Verdict(True), GOOD, Observed(deployment("good"), []), {}, NOW)


def fits_the_schema(status: dict[str, Any]) -> None:
    """`status` is one the CRD's status schema holds whole: a field it does not know would be pruned by the API
    server without a word, so the typed status model (extra fields forbidden) must read every field back."""
    typed = SpeculativeInferenceStatus.model_validate(status)
    assert typed.dump() == status
