"""kopf's last-handled spec: kept in its annotation while it fits, removed rather than written past the bound."""

from __future__ import annotations

import json
from typing import Any

import kopf

from specinfer_operator.api.resource import GROUP
from specinfer_operator.manager.diffbase import MAX_BYTES, BoundedDiffBaseStorage

KEY = f"{GROUP}/last-handled-configuration"


def stored(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    storage = BoundedDiffBaseStorage(prefix=GROUP)
    body = kopf.Body({"metadata": {"name": "demo", "annotations": annotations or {}}, "spec": spec})
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    return dict(patch)


def test_a_spec_that_fits_is_kept_as_kopf_keeps_it() -> None:
    patch = stored({"model": {"name": "org/model"}})
    assert json.loads(patch["metadata"]["annotations"][KEY])["spec"] == {"model": {"name": "org/model"}}


def test_a_spec_past_the_bound_is_not_written() -> None:
    large = {"engineArgs": ["x" * 1000] * (MAX_BYTES // 1000 + 1)}
    assert KEY not in (stored(large).get("metadata") or {}).get("annotations", {})


def test_the_copy_of_a_spec_that_grew_past_the_bound_is_removed() -> None:
    large = {"engineArgs": ["x" * 1000] * (MAX_BYTES // 1000 + 1)}
    assert stored(large, {KEY: "{}"})["metadata"]["annotations"][KEY] is None
