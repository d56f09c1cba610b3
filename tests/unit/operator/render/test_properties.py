"""Properties over generated resources: the validator, the renderer and the CLI never raise or hang on any of them.

The API server's verdict on a sample of the same resources is compared in tests/e2e/test_properties.py.
"""

from __future__ import annotations

import io
import sys
from typing import Any
from unittest import mock

import yaml
from hypothesis import given

from specinfer_operator.cli.commands import main
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import render
from tests.support.strategies import resources


@given(resources())
def test_validating_and_rendering_never_raise(resource: dict[str, Any]) -> None:
    report = check(resource)
    assert report.ok == (report.value is not None)
    assert report.ok or report.errors
    if report.value is not None:
        kinds = [o["kind"] for o in render(report.value)]
        workload = "LeaderWorkerSet" if report.value.spec.parallelism.group_size() > 1 else "Deployment"
        spec = report.value.spec
        wanted = spec.disruption_budget.enabled if spec.disruption_budget else spec.several()
        budget = ["PodDisruptionBudget"] if wanted else []
        claim = ["PersistentVolumeClaim"] if spec.learning else []
        assert kinds == [*claim, "ConfigMap", workload, "Service", *budget]


@given(resources())
def test_the_cli_answers_every_manifest_in_one_piece(resource: dict[str, Any]) -> None:
    text = yaml.safe_dump(resource, allow_unicode=True)
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(sys, "stdin", io.StringIO(text)):
        code = main(["validate", "-q", "-"], out, err)
    assert code in (0, 1), err.getvalue()
    assert "unexpected" not in err.getvalue()
