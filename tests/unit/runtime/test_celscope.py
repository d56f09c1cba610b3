"""What a CEL expression reads, and the data it is given: pruned, it must give every verdict and message the
whole data gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from specinfer_operator.api.policy import TenantPolicySpec
from specinfer_operator.render.admission import check
from specinfer_runtime import celrules
from specinfer_runtime.celscope import Scope, pruned, reads
from specinfer_runtime.validation import Report
from tests.support.builders import resource
from tests.support.casetable import load_cases
from tests.support.policycases import CASES as POLICY_CASES
from tests.support.policyspecs import spec_of
from tests.support.strategies import BASES, resources


def tree(scope: Scope) -> Any:
    """A scope as nested dicts, for comparison: the use, then the fields read inside."""
    return {"": scope.use, **{k: tree(v) for k, v in scope.fields.items()}} if scope.fields else scope.use


def test_fields_tested_with_has_only_need_to_be_there() -> None:
    found = reads("!has(self.a) || self.a.b == 1")
    assert found is not None
    assert tree(found["self"]) == {"": None, "a": {"": "presence", "b": "full"}}


def test_lists_only_measured_need_only_their_size() -> None:
    found = reads("!(self.operator in ['Exists']) || !has(self.values) || size(self.values) == 0")
    assert found is not None
    assert tree(found["self"]) == {"": None, "operator": "full", "values": "size"}


def test_comprehensions_read_the_fields_of_each_element() -> None:
    found = reads("object.spec.items.all(x, !has(x.a) || x.a.matches('^b'))")
    assert found is not None
    items = tree(found["object"])["spec"]["items"]
    assert items == {"": None, "{}": {"": "presence", "a": "full"}}


def test_a_filtered_list_is_read_as_the_list() -> None:
    found = reads("self.r.filter(q, q.x > 1).map(q, q.y).isSorted()")
    assert found is not None
    assert tree(found["self"])["r"] == {"": None, "{}": {"": "presence", "x": "full", "y": "full"}}


def test_an_expression_outside_the_subset_reads_everything() -> None:
    assert reads("self.a ++ self.b") is None


def test_pruning_keeps_what_is_read_and_stands_in_for_the_rest() -> None:
    found = reads("has(self.p) && size(self.v) == 2 && self.m.all(k, k != 'x') && self.s == 'a'")
    assert found is not None
    data = {"p": {"deep": [1, 2, 3]}, "v": ["a", "b"], "m": {"k1": {"big": 1}, "k2": 2}, "s": "a", "other": [1] * 9}
    assert pruned(data, found["self"]) == {"p": None, "v": "--", "m": {"k1": None, "k2": 2}, "s": "a"}


def _whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every expression given all of its data, as before pruning."""
    monkeypatch.setattr(celrules, "_reads", lambda expressions: None)


def _said(report: Report[Any]) -> tuple[list[str], list[str]]:
    return [str(p) for p in report.errors], [str(p) for p in report.warnings]


CORPUS = [c.resource for c in load_cases()] + BASES


@pytest.mark.parametrize("resource", CORPUS, ids=lambda r: str(r.get("metadata", {}).get("name")))
def test_pruned_and_whole_data_give_the_same_report(resource: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    pruned_report = _said(check(resource, TenantPolicySpec()))
    _whole(monkeypatch)
    assert pruned_report == _said(check(resource, TenantPolicySpec()))


@pytest.mark.parametrize(("name", "extra", "policy"), [c[:3] for c in POLICY_CASES], ids=[c[0] for c in POLICY_CASES])
def test_pruned_and_whole_data_give_the_same_policy_verdicts(
    name: str, extra: dict[str, Any], policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = TenantPolicySpec.model_validate(policy)
    pruned_report = _said(check(resource(spec_of(extra)), tenant))
    _whole(monkeypatch)
    assert pruned_report == _said(check(resource(spec_of(extra)), tenant))


@given(resource=resources())
@settings(max_examples=150, deadline=None)
def test_pruned_and_whole_data_agree_on_generated_resources(resource: dict[str, Any]) -> None:
    pruned_report = _said(check(resource, TenantPolicySpec()))
    with pytest.MonkeyPatch.context() as patch:
        _whole(patch)
        assert pruned_report == _said(check(resource, TenantPolicySpec()))
