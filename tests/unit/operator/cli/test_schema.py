"""`specinfer schema`: the editor schema accepts every valid case and flags what an editor can see."""

from __future__ import annotations

import io
import json
from typing import Any

import jsonschema
import pytest

from specinfer_operator.cli.commands import main
from tests.support.builders import EXAMPLES, example, resource
from tests.support.casetable import load_cases

# An explicit null is dropped by the API server with a warning; the editor marks it, which is the point.
VALID = [c for c in load_cases() if c.valid and c.name != "bad-null-field"]


def schema() -> dict[str, Any]:
    out = io.StringIO()
    assert main(["schema"], out=out) == 0
    loaded: dict[str, Any] = json.loads(out.getvalue())
    return loaded


VALIDATOR = jsonschema.Draft7Validator(schema())


def test_the_schema_is_valid_draft_7() -> None:
    jsonschema.Draft7Validator.check_schema(schema())


@pytest.mark.parametrize("case", VALID, ids=[c.name for c in VALID])
def test_valid_cases_pass(case: Any) -> None:
    assert not list(VALIDATOR.iter_errors(case.resource))


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.yaml")))
def test_examples_pass(name: str) -> None:
    assert not list(VALIDATOR.iter_errors(example(name)))


def errors(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.json_path, e.message) for e in VALIDATOR.iter_errors(manifest)]


def test_editors_flag_unknown_fields_types_enums_and_ranges() -> None:
    base = example("ngram")["spec"]
    typo = resource({**base, "speculative": {**base["speculative"], "numSpeculativTokens": 3}})
    assert any("numSpeculativTokens" in message for _, message in errors(typo))
    too_many = resource({**base, "speculative": {**base["speculative"], "numSpeculativeTokens": 15}})
    assert errors(too_many) == [("$.spec.speculative.numSpeculativeTokens", "15 is greater than the maximum of 14")]
    method = resource({**base, "speculative": {**base["speculative"], "method": "lookahead"}})
    assert [path for path, _ in errors(method)] == ["$.spec.speculative.method"]
    kind = {**resource(base), "kind": "Deployment"}
    assert [path for path, _ in errors(kind)] == ["$.kind"]


def test_fields_carry_their_descriptions() -> None:
    spec = schema()["definitions"]["SpeculativeConfig"]["properties"]
    assert "num_speculative_tokens" in spec["numSpeculativeTokens"]["description"]
    assert "title" not in spec["numSpeculativeTokens"]
