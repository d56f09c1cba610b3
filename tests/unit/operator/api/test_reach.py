"""Every field of the spec has its row in the table of docs/security.md: which child object it reaches and the
tenant policy's rules that govern it, or why none is needed. Walked over the generated CRD, as committed."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.doc_tables import generated
from specinfer_operator.api import reach
from specinfer_operator.api.policy import TenantPolicySpec
from specinfer_operator.api.reach import FIELDS, Reach, field_table, row_of

ROOT = Path(__file__).resolve().parents[4]
CRD = next(yaml.safe_load_all((ROOT / "crds" / "speculativeinference.yaml").read_text()))
SPEC = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def leaves(node: dict[str, Any], path: str = "spec") -> Iterator[str]:
    """Every field of the schema that holds a value: a string, number or boolean, or a map (labels, options)."""
    if node.get("type") == "object" and "properties" in node:
        for name, sub in node["properties"].items():
            yield from leaves(sub, f"{path}.{name}")
    elif node.get("type") == "array":
        yield from leaves(node["items"], f"{path}[]")
    else:
        yield path


def unmatched(spec: dict[str, Any]) -> dict[str, list[str]]:
    """Fields with no row or several, and the rows they match."""
    return {leaf: [r.fields for r in rows] for leaf in leaves(spec) if len(rows := row_of(leaf)) != 1}


def test_every_field_of_the_spec_has_exactly_one_row() -> None:
    assert len(list(leaves(SPEC))) > 300
    assert unmatched(SPEC) == {}


def test_a_field_without_a_row_or_with_two_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = copy.deepcopy(SPEC)
    spec["properties"]["podTemplate"]["properties"]["spec"]["properties"]["hostNetwork"] = {"type": "boolean"}
    monkeypatch.setattr(reach, "FIELDS", (*FIELDS, Reach("spec.service.{port,type}", reach.SERVICE, (), "again")))
    assert unmatched(spec) == {
        "spec.podTemplate.spec.hostNetwork": [],
        "spec.service.type": ["spec.service.type", "spec.service.{port,type}"],
        "spec.service.port": ["spec.service.port", "spec.service.{port,type}"],
    }


def test_every_row_matches_a_field() -> None:
    used = {row.fields for leaf in leaves(SPEC) for row in row_of(leaf)}
    assert [row.fields for row in FIELDS if row.fields not in used] == []


@pytest.mark.parametrize("row", FIELDS, ids=lambda r: r.fields)
def test_a_row_names_policy_fields_or_says_why_none_is_needed(row: Reach) -> None:
    names = {info.alias for info in TenantPolicySpec.model_fields.values()}
    assert set(row.policy) <= names
    assert row.why
    assert row.reaches


def test_every_rule_of_the_policy_governs_a_field() -> None:
    named = {name for row in FIELDS for name in row.policy}
    rules = {info.alias for name, info in TenantPolicySpec.model_fields.items() if name != "default_engine_versions"}
    assert rules - named == set()


def test_the_security_page_holds_the_table() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    assert generated(page, "spec-fields") == field_table(), "docs/security.md is stale: run `make docs`"
