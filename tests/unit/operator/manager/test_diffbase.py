"""kopf's last-handled resource: what the reconcile reads, kept in its annotation while it fits and as its digest
past the bound; a change of anything else is no change, whatever the spec's size."""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import kopf
import pytest

from specinfer_operator.api.labels import LEARNED_DRAFT_ANNOTATION, TUNED_K_ANNOTATION
from specinfer_operator.api.resource import GROUP
from specinfer_operator.manager.diffbase import DIGEST, MAX_BYTES, BoundedDiffBaseStorage

KEY = f"{GROUP}/last-handled-configuration"
SMALL = {"model": {"name": "org/model"}}
LARGE = {"engineArgs": ["x" * 1000] * (MAX_BYTES // 1000 + 1)}  # past the bound
STORAGE = BoundedDiffBaseStorage(prefix=GROUP)


def resource(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "demo", "generation": 1, "annotations": annotations or {}}, "spec": spec}


def of(body: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, body))


def handled(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as kopf leaves it once handled: its essence stored in the annotation (kopf's patch applied)."""
    patch = kopf.Patch()
    STORAGE.store(body=of(body), patch=patch, essence=STORAGE.build(body=of(body)))
    after = copy.deepcopy(body)
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            after["metadata"]["annotations"].pop(key, None)
        else:
            after["metadata"]["annotations"][key] = value
    return after


def changed(body: dict[str, Any]) -> bool:
    """Whether kopf finds a change to handle in `body` (its old and new essences differ)."""
    old = STORAGE.fetch(body=of(body))
    return old is None or old != STORAGE.build(body=of(body))


def test_a_spec_that_fits_is_kept_as_kopf_keeps_it() -> None:
    kept = handled(resource(SMALL))["metadata"]["annotations"][KEY]
    assert json.loads(kept) == {"spec": SMALL}


def test_a_spec_past_the_bound_is_kept_as_its_digest() -> None:
    kept = handled(resource(LARGE))["metadata"]["annotations"][KEY]
    assert len(kept) < 200
    assert set(json.loads(kept)) == {DIGEST}


def test_the_copy_of_a_spec_that_grew_past_the_bound_is_replaced_by_its_digest() -> None:
    grown = handled(resource(SMALL))
    grown["spec"] = LARGE
    assert changed(grown)
    assert set(json.loads(handled(grown)["metadata"]["annotations"][KEY])) == {DIGEST}


@pytest.mark.parametrize("spec", [SMALL, LARGE], ids=["small", "large"])
def test_a_handled_resource_has_no_change(spec: dict[str, Any]) -> None:
    assert changed(resource(spec))
    assert not changed(handled(resource(spec)))


@pytest.mark.parametrize("spec", [SMALL, LARGE], ids=["small", "large"])
def test_labels_and_other_annotations_are_no_change(spec: dict[str, Any]) -> None:
    body = handled(resource(spec))
    for i in range(5):
        body["metadata"]["annotations"][f"example.com/note-{i}"] = "x" * 1000
        body["metadata"].setdefault("labels", {})[f"team-{i}"] = "a"
        assert not changed(body)


@pytest.mark.parametrize("spec", [SMALL, LARGE], ids=["small", "large"])
def test_a_spec_change_is_a_change(spec: dict[str, Any]) -> None:
    body = handled(resource(spec))
    body["spec"] = {**spec, "replicas": 2}
    assert changed(body)
    assert not changed(handled(body))


@pytest.mark.parametrize("spec", [SMALL, LARGE], ids=["small", "large"])
@pytest.mark.parametrize("annotation", [TUNED_K_ANNOTATION, LEARNED_DRAFT_ANNOTATION])
def test_the_annotations_the_reconcile_reads_are_a_change(spec: dict[str, Any], annotation: str) -> None:
    body = handled(resource(spec))
    body["metadata"]["annotations"][annotation] = "1"
    assert changed(body)
    body = handled(body)
    assert not changed(body)
    del body["metadata"]["annotations"][annotation]
    assert changed(body)
