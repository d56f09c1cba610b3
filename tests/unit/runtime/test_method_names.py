"""An unknown method name: one refusal naming the methods (not vLLM's aliases, nor arctic) and the method it was
probably meant to be, in the CEL the API server runs as in `specinfer validate`."""

from __future__ import annotations

import pytest

from specinfer_operator.render.admission import check
from specinfer_runtime.methods import METHODS, MTP_ALIASES
from tests.support.builders import resource


def refusal(method: str) -> str:
    spec = {"model": {"name": "m"}, "speculative": {"method": method, "numSpeculativeTokens": 3}}
    (error,) = check(resource(spec)).errors
    return str(error)


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("eagle4", "eagle"),
        ("ngram4", "ngram"),
        ("ngram-gpu", "ngram"),
        ("sufix", "suffix"),  # the same first three letters
        ("medussa", "medusa"),
        ("suffix_decoding", "suffix"),
        ("dsparc", "dspark"),
        ("draft", "draft_model"),
        ("deepseek-mtp", "mtp"),  # an alias is the method it stands for
        ("extract-hidden-states", "extract_hidden_states"),
    ],
)
def test_a_misspelt_method_gets_the_one_meant(given: str, meant: str) -> None:
    assert refusal(given).startswith(f'spec.speculative.method: method "{given}" is unknown: did you mean {meant}? ')


def test_a_name_like_no_method_gets_the_list_alone() -> None:
    error = refusal("mlp_speculator")
    assert error.startswith('spec.speculative.method: method "mlp_speculator" is unknown. Set it to one of: ')
    listed = error.split("Set it to one of: ")[1]
    assert listed.startswith(", ".join(METHODS) + " (vLLM's model-specific MTP names")
    for other in ("arctic", *MTP_ALIASES[1:]):
        assert other not in listed


def test_aliases_and_arctic_are_not_unknown() -> None:
    spec = {"model": {"name": "m"}, "speculative": {"method": "deepseek_mtp", "numSpeculativeTokens": 1}}
    assert check(resource(spec)).ok
    assert "set method suffix" in refusal("arctic")  # R1 says why, not that it is unknown


@pytest.mark.parametrize("given", ["x", "ng", "0\x80"])
def test_a_name_shorter_than_three_letters_is_refused_without_a_suggestion(given: str) -> None:
    """The suggestion compares first three letters; a shorter name must not reach that comparison."""
    assert refusal(given).startswith(f'spec.speculative.method: method "{given}" is unknown. Set it to one of: ')
