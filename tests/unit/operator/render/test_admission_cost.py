"""What a hostile spec costs the operator's own check (docs/security.md, "Admission cost"): the costliest
specs the CRD admits get the right verdict, and their cost in CEL, the part that grows with a spec, is
bounded without a clock: every expression runs at most once, and CEL is given at most the spec's size."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cel
import pytest

from hack.worst_spec import POLICY, Shape, worst
from specinfer_operator.api.crd import admission_policy, admission_warnings, crd, tenant_admission_policy
from specinfer_operator.api.policy import TenantPolicySpec
from specinfer_operator.render.admission import check
from specinfer_runtime import celrules, passthrough
from specinfer_runtime.passthrough import MAX_VALUE_ENTRIES, SHAPE_MESSAGE
from tests.support.builders import resource

NGRAM = {"model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}


def _expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key in ("rule", "expression", "messageExpression"):
            if isinstance(node.get(key), str):
                yield node[key]
        for value in node.values():
            yield from _expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _expressions(value)


# Every CEL expression of the CRD and its admission policies, messages included.
EXPRESSIONS = len(set(_expressions([crd(), *admission_policy(), *admission_warnings(), tenant_admission_policy()])))


def nested(depth: int) -> list[Any]:
    """A list in a list ... `depth` deep."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def size(value: Any) -> int:
    """Values in `value`: every map, list and scalar."""
    if isinstance(value, dict):
        return 1 + sum(map(size, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(size, value))
    return 1


class Cost:
    """What the check hands CEL: the programs it runs, and the values it converts for them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs = 0
        self.values = 0
        compiled, context = celrules._compiled, cel.Context
        cost = self

        class Counted:
            def __init__(self, expression: str) -> None:
                self.program = compiled(expression)

            def execute(self, ctx: Any) -> Any:
                cost.runs += 1
                return self.program.execute(ctx)

        def counted_context(variables: dict[str, Any] | None = None, **kwargs: Any) -> Any:
            cost.values += size(variables or {})
            return context(variables=variables, **kwargs)

        monkeypatch.setattr(celrules, "_compiled", Counted)
        monkeypatch.setattr(cel, "Context", counted_context)


@pytest.mark.parametrize("shape", ["dense", "long"])
def test_the_worst_spec_the_crd_admits_is_accepted(shape: Shape) -> None:
    report = check(worst(valid=True, shape=shape), POLICY)
    assert report.errors == []
    assert {p.path for p in report.warnings} == {
        "spec.speculative.numSpeculativeTokensPerBatchSize",  # the schedule turns off decode padding
        "spec.speculative.draftModel.quantization",  # vLLM-Ascend ignores it
    }


@pytest.mark.parametrize("shape", ["dense", "long"])
def test_the_worst_invalid_spec_is_refused_with_each_rule_once_per_kind(shape: Shape) -> None:
    report = check(worst(valid=False, shape=shape), POLICY)
    said = [str(p) for p in report.errors]
    assert "spec.disruptionBudget.maxUnavailable: set one of maxUnavailable and minAvailable, not both" in said
    assert any(".valueFrom: set exactly one of secretKeyRef, configMapKeyRef, fieldRef" in s for s in said)
    # A rule broken by hundreds of objects lists ten of them, then says how many more.
    more = [s for s in said if "more from here on break the same rule (the first 10 are listed)" in s]
    assert more
    assert len(said) < 200


def test_checking_the_worst_spec_runs_each_expression_once_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = worst(valid=True, shape="dense")
    cost = Cost(monkeypatch)
    assert check(spec, POLICY).ok
    assert cost.runs <= EXPRESSIONS
    assert cost.values <= size(spec)


def test_checking_the_worst_invalid_spec_runs_each_expression_a_few_times(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = worst(valid=False, shape="dense")
    cost = Cost(monkeypatch)
    assert not check(spec, POLICY).ok
    assert cost.runs <= 2 * EXPRESSIONS  # once, once more where objects fail, and ten messages
    assert cost.values <= size(spec)


def test_tens_of_thousands_of_labels_cost_no_cel_evaluation_each(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = {f"l{i}.example.com/k": f"v{i}" for i in range(50_000)}
    cost = Cost(monkeypatch)
    assert check(resource(NGRAM, labels=labels), TenantPolicySpec()).ok
    assert cost.runs <= EXPRESSIONS


def test_a_bad_label_among_many_is_named() -> None:
    labels = {f"l{i}": "v" for i in range(10_000)} | {"Bad Key": "v"}
    report = check(resource(NGRAM, labels=labels))
    assert [str(p) for p in report.errors] == [
        'metadata.labels: Invalid value: "Bad Key": label keys must be an optional DNS subdomain prefix of at most '
        "253 characters and '/', then a name of at most 63 characters (alphanumerics, '-', '_' or '.', starting "
        "and ending alphanumeric), e.g. 'example.com/my-key'"
    ]


@pytest.mark.parametrize(
    "value",
    [
        list(range(1 << 20)),  # a megabyte of entries
        [[0] * 200, [0] * 200],  # two lists within 256 each, over it together
        [[[0]]],  # three deep
        nested(10_000),  # as deep as the API server decodes
    ],
    ids=["a-megabyte", "over-in-all", "three-deep", "ten-thousand-deep"],
)
def test_a_passthrough_value_over_its_bounds_is_refused_before_it_is_read(value: Any) -> None:
    spec = {**NGRAM, "additionalConfig": {"refresh": True, "eplb_config": value}}
    report = check({**resource({}), "spec": spec})  # (a deep copy would not get through ten thousand levels)
    assert [str(p) for p in report.errors] == [f'spec.additionalConfig: ["eplb_config"]: {SHAPE_MESSAGE}']


def test_a_passthrough_value_at_its_bounds_is_accepted() -> None:
    value = {"sizes": list(range(MAX_VALUE_ENTRIES - 2)), "on": True}
    assert check(resource({**NGRAM, "additionalConfig": {"eplb_config": value}})).ok


PASSTHROUGH_VALUES = [
    True,
    "text",
    list(range(MAX_VALUE_ENTRIES)),
    list(range(MAX_VALUE_ENTRIES + 1)),
    {"a": list(range(MAX_VALUE_ENTRIES - 2)), "b": 1},
    {"a": list(range(MAX_VALUE_ENTRIES - 1)), "b": 1},
    [{"a": 1}, [2, None]],
    [{"a": [1]}],
    {"a": {"b": {}}},
    [],
]


@pytest.mark.parametrize("value", PASSTHROUGH_VALUES, ids=range(len(PASSTHROUGH_VALUES)))
def test_the_admission_policy_bounds_passthrough_values_as_the_models_do(value: Any) -> None:
    """The bound is checked by the models in-process and by the admission policy's CEL at the API server."""
    (rule, _) = passthrough.shape_rules("object.spec")
    refused = celrules.check((rule,), {"spec": {"compilationConfig": {"k": value}}}, "", "object")
    assert (not refused) is passthrough.within_bounds(value)


def test_the_operator_leaves_the_metadata_to_the_api_server_that_checked_it() -> None:
    """Labels and annotations are the API server's to check (it has, before storing them): the operator
    does not pay for them again, while `specinfer validate` must."""
    body = resource(NGRAM, labels={"Bad Key": "v"}, annotations={"Bad Key": "v"})
    assert check(body, stored=True).ok
    assert not check(body).ok
