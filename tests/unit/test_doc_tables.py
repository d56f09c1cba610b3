"""The tables of the docs are the code's: generated ones are current, and the hand-written methods index agrees
with the runtime's floors and rules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hack.doc_tables import ROOT, TABLES, generated
from specinfer_operator.controller import conditions
from specinfer_runtime.compat import ASCEND_FLOOR, ASCEND_METHOD_FLOORS, VLLM_FLOOR, VLLM_METHOD_FLOORS
from specinfer_runtime.methods import ASYNC_SCHEDULING_METHODS, METHODS

REASON = re.compile(r"^[A-Z][A-Za-z]+$")  # Kubernetes' reasons are CamelCase
CONTROLLER = ROOT / "operator" / "specinfer_operator" / "controller"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_generated_table_is_current(name: str) -> None:
    page, table = TABLES[name]
    assert generated((ROOT / page).read_text(), name) == table(), f"{page} is stale: run `make docs`"


def _reasons_written(source: Path) -> set[str]:
    """The reasons a module gives ConfigValid: the literals and the conditions' constants (a mapping's values)
    in the reason argument of each Verdict it builds (a reason carried from the status is one of those)."""
    found: set[str] = set()
    for call in ast.walk(ast.parse(source.read_text())):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Verdict"):
            continue
        for node in ast.walk(call.args[1]):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and REASON.match(node.value):
                found.add(node.value)  # a reason, not a key it is read under (config.get("reason", ...))
            elif isinstance(node, ast.Name) and hasattr(conditions, node.id):
                value = getattr(conditions, node.id)
                found.update(value.values() if isinstance(value, dict) else [value])
    return found


def test_every_config_valid_reason_the_operator_gives_is_in_the_table() -> None:
    written = set(conditions.REFUSED)  # apply_children's refusals, passed on as refused.reason
    for module in ("reconcile.py", "refresh.py"):
        written |= _reasons_written(CONTROLLER / module)
    assert {"Valid", "ValidWithWarnings", "InsufficientNPUCapacity", "EngineTooOld"} <= written  # the scan sees them
    assert written - set(conditions.CONFIG_VALID) == set()


def test_the_methods_index_agrees_with_the_runtime() -> None:
    """Every method once, its floors as the preflight checks them, async scheduling as R11 allows it."""
    text = (ROOT / "docs" / "methods" / "README.md").read_text()
    rows = re.findall(r"^\| `([a-z_0-9]+)`[^|]* \| (.*) \|$", text.split("## ", 1)[0], re.M)
    columns = {method: [c.strip() for c in rest.split(" | ")] for method, rest in rows}
    assert list(columns) == list(METHODS)
    for method, (_page, _draft, _k, asynchronous, ascend, vllm) in columns.items():
        assert ascend.rstrip("≈") == ASCEND_METHOD_FLOORS.get(method, ASCEND_FLOOR), method
        assert vllm.rstrip("≈") == VLLM_METHOD_FLOORS.get(method, VLLM_FLOOR), method
        assert (asynchronous == "yes") == (method in ASYNC_SCHEDULING_METHODS), method
