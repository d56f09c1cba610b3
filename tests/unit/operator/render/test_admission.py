"""Every case of tests/cases/ through the Python validator: verdict, path and message."""

from __future__ import annotations

import pytest

from specinfer_operator.render.admission import check
from tests.support.casetable import Case, load_cases

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    report = check(case.resource)
    if not case.valid:
        assert not report.ok, f"{case.name} was accepted: {case.about}"
        matches = [p for p in report.errors if case.fragment and case.fragment in p.message]
        assert matches, f"no error contains {case.fragment!r}: {[str(p) for p in report.errors]}"
        if case.path:
            assert case.path in [p.path for p in matches], [str(p) for p in report.errors]
        return
    assert report.ok, [str(p) for p in report.errors]
    if case.fragment is None:
        assert report.warnings == [], [str(p) for p in report.warnings]
    else:
        found = [p for p in report.warnings if case.fragment in p.message and case.path in (None, p.path)]
        assert found, f"no warning at {case.path} contains {case.fragment!r}: {[str(p) for p in report.warnings]}"


def test_table_covers_every_rule_and_both_verdicts() -> None:
    rules = {f"R{i}" for i in range(1, 21) if i != 16} | {"kubernetes"}  # R16 needs the model files: preflight
    for rule in rules:
        verdicts = {c.verdict for c in CASES if c.rule == rule}
        if rule == "R14":  # a warning-only rule: the resource is valid either way
            assert verdicts == {"valid"}, rule
        else:
            assert verdicts == {"valid", "invalid"}, f"{rule} lacks a valid or an invalid case: {verdicts}"
    guide = [c for c in CASES if c.name.startswith("guide-")]
    assert len(guide) >= 8
    assert len(CASES) >= 60


def test_case_names_are_resource_names() -> None:
    """Each case can be applied to a cluster side by side with the others."""
    named = [c for c in CASES if c.rule != "name"]
    assert [c.resource["metadata"]["name"] for c in named] == [c.name for c in named]


@pytest.mark.parametrize("case", [c for c in CASES if c.valid], ids=[c.name for c in CASES if c.valid])
def test_server_defaulted_form_gets_the_same_verdict(case: Case) -> None:
    """The operator sees resources with the schema defaults filled in; that must not change what it says."""
    report = check(case.resource)
    assert report.value is not None
    defaulted = check(report.value.dump())
    assert defaulted.ok
    nulls = {p.path for p in report.warnings if p.message.startswith("null value")}
    assert [str(p) for p in defaulted.warnings] == [str(p) for p in report.warnings if p.path not in nulls]
