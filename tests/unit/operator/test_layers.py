"""The operator's packages import one way only: each package's `__init__` says which it may import ("May
import: ..."), and this test holds every module to it. The runtime never imports the operator."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OPERATOR = ROOT / "operator" / "specinfer_operator"
RUNTIME = ROOT / "runtime" / "specinfer_runtime"


def packages(root: Path) -> dict[str, set[str]]:
    """Each subpackage and the packages its docstring allows it to import."""
    found = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    allowed: dict[str, set[str]] = {}
    for name in found:
        doc = ast.get_docstring(ast.parse((root / name / "__init__.py").read_text())) or ""
        line = re.search(r"May import: ([^\n]*(?:\n[^\n]+)*)", doc)
        assert line is not None, f"{name}/__init__.py does not say what it may import"
        allowed[name] = {word for word in re.findall(r"[a-z_]+", line.group(1)) if word in found}
    return allowed


def imported(module: Path) -> set[str]:
    """The operator modules `module` imports, as dotted names under specinfer_operator."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specinfer_operator"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("specinfer_operator"))
    return names


def violations(root: Path) -> list[str]:
    allowed = packages(root)
    found = []
    for package, may in sorted(allowed.items()):
        for module in sorted((root / package).glob("*.py")):
            for name in sorted(imported(module)):
                parts = name.split(".")
                target = parts[1] if len(parts) > 1 else ""
                if target in allowed and target != package and target not in may:
                    found.append(f"{package}/{module.name} imports {name}: {package} may import {sorted(may)}")
    return found


def test_every_import_goes_the_way_its_package_allows() -> None:
    assert violations(OPERATOR) == []


def test_the_layers_are_acyclic() -> None:
    allowed = packages(OPERATOR)
    order: list[str] = []
    while len(order) < len(allowed):
        ready = sorted(p for p, may in allowed.items() if p not in order and may <= set(order))
        assert ready, f"a cycle among {sorted(set(allowed) - set(order))}"
        order += ready


def test_a_planted_back_arrow_is_found(tmp_path: Path) -> None:
    copy = tmp_path / "specinfer_operator"
    shutil.copytree(OPERATOR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    resource = copy / "api" / "resource.py"
    resource.write_text(resource.read_text() + "\nfrom specinfer_operator.controller import reconcile\n")
    assert violations(copy) == [
        "api/resource.py imports specinfer_operator.controller: api may import []",
        "api/resource.py imports specinfer_operator.controller.reconcile: api may import []",
    ]


@pytest.mark.parametrize("module", sorted(RUNTIME.glob("*.py")), ids=lambda p: p.name)
def test_the_runtime_never_imports_the_operator(module: Path) -> None:
    assert not imported(module)
