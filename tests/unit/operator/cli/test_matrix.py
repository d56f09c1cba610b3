"""The support matrix: rendered from the runtime's compatibility table, and committed up to date."""

from __future__ import annotations

import io

from specinfer_operator.cli.commands import main
from specinfer_operator.cli.matrix import support_matrix
from specinfer_runtime.methods import METHODS
from tests.support import ROOT


def test_the_committed_page_is_current() -> None:
    committed = (ROOT / "docs" / "support-matrix.md").read_text()
    assert committed == support_matrix(), "docs/support-matrix.md is stale: run `make docs`"


def test_every_method_has_a_row() -> None:
    rows = support_matrix().splitlines()
    for method in METHODS:
        assert any(row.startswith(f"| method {method} |") for row in rows), method


def test_a_feature_is_supported_from_its_floor_on() -> None:
    grid = support_matrix().split("## vllm-ascend releases")[1].split("##")[0].splitlines()
    header = [c.strip() for c in grid[2].split("|")[1:-1]]
    dspark = [c.strip() for c in next(r for r in grid if r.startswith("| method dspark |")).split("|")[1:-1]]
    marks = dict(zip(header[1:], dspark[1:], strict=True))
    assert (marks["0.24.0rc1"], marks["0.25.0rc1"], marks["0.28.0rc1"]) == ("", "✓", "✓")


def test_the_command_prints_it() -> None:
    out = io.StringIO()
    assert main(["support-matrix"], out=out) == 0
    assert out.getvalue() == support_matrix()
