"""The method pages in docs/: one per method, and each example is the tested one in examples/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specinfer_operator.render.admission import check
from specinfer_runtime.methods import METHODS
from tests.support.builders import EXAMPLES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "methods"
YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)


def page(method: str) -> Path:
    return DOCS / f"{method.replace('_', '-')}.md"


@pytest.mark.parametrize("method", METHODS)
def test_each_method_has_a_page_with_the_tested_example(method: str) -> None:
    text = page(method).read_text()
    example = EXAMPLES / page(method).with_suffix(".yaml").name
    assert YAML_BLOCK.findall(text)[0] == example.read_text()


@pytest.mark.parametrize("method", METHODS)
def test_the_example_of_each_page_is_valid(method: str) -> None:
    report = check(yaml.safe_load(YAML_BLOCK.findall(page(method).read_text())[0]))
    assert report.ok, report.errors


def test_the_index_links_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    for method in METHODS:
        assert f"({page(method).name})" in index, method


@pytest.mark.parametrize("example", sorted((EXAMPLES / "options").glob("*.yaml")), ids=lambda p: p.stem)
def test_each_option_example_is_on_the_options_page_and_valid(example: Path) -> None:
    assert example.read_text() in YAML_BLOCK.findall((DOCS / "options.md").read_text())
    report = check(yaml.safe_load(example.read_text()))
    assert report.ok, report.errors


def test_the_pod_settings_page_shows_the_tested_example() -> None:
    text = (DOCS.parent / "pod-template.md").read_text()
    example = EXAMPLES / "pod" / "ascend-cluster.yaml"
    assert YAML_BLOCK.findall(text)[0] == example.read_text()
    report = check(yaml.safe_load(example.read_text()))
    assert report.ok, report.errors
