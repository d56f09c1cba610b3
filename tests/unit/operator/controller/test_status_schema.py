"""The status compute() builds is the typed status model's (the check every operator unit test runs through
tests/unit/operator/conftest.py), and the check does refuse what the CRD would prune."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specinfer_operator.controller.conditions import Observed, Verdict, compute
from tests.support.statuses import DESIRED, NOW, deployment, fits_the_schema, good_status


def test_a_computed_status_reads_back_whole() -> None:
    fits_the_schema(good_status())
    fits_the_schema(compute(3, Verdict(False, "InvalidSpec", "bad"), None, Observed(None, []), {}, NOW))
    fits_the_schema(compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash, ready=1), []), {}, NOW))


def test_a_field_the_schema_lacks_is_refused() -> None:
    status = good_status()
    status["rollout"]["lastGood"]["renamedField"] = 1
    with pytest.raises(ValidationError, match="renamedField"):
        fits_the_schema(status)


def test_a_field_the_model_would_change_is_refused() -> None:
    status = good_status()
    status["observedGeneration"] = "3"  # strict types: the API server would refuse a string here
    with pytest.raises(ValidationError, match="observedGeneration"):
        fits_the_schema(status)
