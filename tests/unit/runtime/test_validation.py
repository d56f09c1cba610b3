"""Error and warning reporting: paths, values, allowed ranges, nulls, and the examples."""

from __future__ import annotations

import pytest

from specinfer_operator.render.admission import check
from specinfer_runtime.methods import METHOD_NAMES, METHODS
from tests.support.builders import EXAMPLES, example, resource

NGRAM = {"model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}


def messages(data: object) -> list[str]:
    return [str(p) for p in check(data).errors]


def test_bound_error_names_path_value_and_allowed_range() -> None:
    spec = {**NGRAM, "speculative": {"method": "ngram", "numSpeculativeTokens": 15}}
    assert messages(resource(spec)) == [
        "spec.speculative.numSpeculativeTokens: Invalid value: 15: should be less than or equal to 14; allowed: [1, 14]"
    ]


def test_list_item_paths_are_indexed() -> None:
    spec = {**NGRAM, "engineArgs": ["--seed", ""]}
    assert messages(resource(spec)) == ['spec.engineArgs[1]: Invalid value: "": should be at least 1 chars long']


def test_unknown_field_lists_the_allowed_ones() -> None:
    spec = {**NGRAM, "parallelism": {"tensr": 2}}
    (message,) = messages(resource(spec))
    assert (
        message
        == 'spec.parallelism.tensr: unknown field "tensr"; allowed fields: data, expert, nodes, pipeline, tensor'
    )


def test_wrong_types_never_raise() -> None:
    bad: object
    for bad in (None, 3, "text", [], {"spec": None}, {"apiVersion": "specinfer.io/v1alpha1"}):
        report = check(bad)
        assert not report.ok


def test_nulls_are_dropped_with_a_warning() -> None:
    spec = {**NGRAM, "graph": None, "model": {"name": "m", "maxModelLen": None}}
    report = check(resource(spec))
    assert report.ok
    assert sorted(p.path for p in report.warnings) == ["spec.graph", "spec.model.maxModelLen"]


def test_huge_lists_are_refused_cleanly() -> None:
    spec = {**NGRAM, "graph": {"mode": "PIECEWISE", "captureSizes": list(range(1, 100_001))}}
    assert messages(resource(spec)) == ["spec.graph.captureSizes: Too many: 100000: must have at most 64 items"]


def test_errors_and_several_rules_at_once() -> None:
    spec = {
        "model": {"name": "m"},
        "parallelism": {"pipeline": 2},
        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
        "scheduling": {"asyncScheduling": True},
    }
    report = check(resource(spec))
    assert sorted(p.rule for p in report.errors) == ["R11", "R13"]


def test_warnings_are_apart_from_errors() -> None:
    spec = {"model": {"name": "m"}, "speculative": {"method": "mtp", "numSpeculativeTokens": 2}}
    report = check(resource(spec))
    assert report.ok
    assert [p.rule for p in report.warnings] == ["R14"]


def test_one_example_per_method_all_clean_and_lossless() -> None:
    """An example is what its name says: the method, and outputs that are the target model's. What trades that
    exactness for speed lives under examples/options/, saying so."""
    seen = []
    for file in sorted(EXAMPLES.glob("*.yaml")):
        report = check(example(file.stem))
        assert report.ok, (file.name, [str(p) for p in report.errors])
        assert report.warnings == [], (file.name, [str(p) for p in report.warnings])
        assert report.value is not None
        assert not report.value.spec.speculative.allow_lossy_verification, file.name
        seen.append(report.value.spec.speculative.method)
    assert sorted(seen) == sorted(METHODS)


@pytest.mark.parametrize("file", sorted(p.name for p in (EXAMPLES / "options").glob("*.yaml")))
def test_each_option_example_opens_with_what_it_does(file: str) -> None:
    assert (EXAMPLES / "options" / file).read_text().startswith("# "), file


@pytest.mark.parametrize("method", METHODS)
def test_every_method_is_documented_in_the_schema(method: str) -> None:
    """Editors offer every name; the CRD has no enum, whose refusal would list them all: R1 names the methods."""
    from specinfer_operator.api.crd import crd, editor_schema

    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    field = schema["properties"]["spec"]["properties"]["speculative"]["properties"]["method"]
    assert "enum" not in field
    assert method in field["description"]
    assert method in field["x-kubernetes-validations"][0]["messageExpression"]
    editor = editor_schema()["definitions"]["SpeculativeConfig"]["properties"]["method"]
    assert editor["enum"] == list(METHOD_NAMES)


def test_nulls_in_passthrough_values_are_kept_as_the_api_server_keeps_them() -> None:
    spec = {**NGRAM, "additionalConfig": {"refresh": None, "eplb_config": {"path": None, "sizes": [1, None]}}}
    report = check(resource(spec))
    assert report.ok
    assert [p.path for p in report.warnings] == ["spec.additionalConfig.refresh"]  # a map's entry is pruned
    assert report.stored is not None
    assert report.stored["spec"]["additionalConfig"] == {"eplb_config": {"path": None, "sizes": [1, None]}}
