"""The Kubernetes name formats: the Python patterns (for metadata) say what the CEL predicates (for the spec) say."""

from __future__ import annotations

import pytest

from specinfer_runtime.celrules import cel_string, evaluate
from specinfer_runtime.names import LABEL_VALUE, LABEL_VALUE_TEXT, QUALIFIED_NAME, qualified_name

TEXTS = [
    "",
    "a",
    "app",
    "App.Kubernetes_io-x",
    "-a",
    "a-",
    "a" * 63,
    "a" * 64,
    "example.com/name",
    "Example.com/name",
    "example.com/",
    "/name",
    "a/b/c",
    "a..b/c",
    "bad key",
    "é",
    "a" * 253 + "/n",
    "a" * 254 + "/n",
    ".".join(["a" * 63] * 4)[:253] + "/n",
    "x" * 200 + "/" + "n" * 63,
    "x/" + "n" * 64,
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_the_python_patterns_say_what_the_cel_predicates_say(text: str) -> None:
    assert bool(QUALIFIED_NAME.fullmatch(text)) is evaluate(qualified_name("self"), text)
    assert bool(LABEL_VALUE_TEXT.fullmatch(text)) is evaluate(f"self.matches({cel_string(LABEL_VALUE)})", text)
