"""Every status a unit test computes is checked against the typed status model (api/status.py), which the
CRD's status schema is generated from: what the controller writes and what the CRD describes cannot drift."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from specinfer_operator.controller import conditions
from tests.support.statuses import fits_the_schema


@pytest.fixture(autouse=True)
def computed_statuses_fit_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    original = conditions.compute

    def checked(*args: Any, **kwargs: Any) -> dict[str, Any]:
        status = original(*args, **kwargs)
        fits_the_schema(status)
        return status

    for module in list(sys.modules.values()):
        if getattr(module, "compute", None) is original:
            monkeypatch.setattr(module, "compute", checked)
    return
