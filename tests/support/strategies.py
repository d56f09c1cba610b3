"""Hypothesis strategies: SpeculativeInference resources mutated from the valid cases and examples.

A mutation replaces a value anywhere under `spec` (or a metadata label or annotation) with one of the
values that break things (bounds, int64 and float64 edges, flag-like and non-ASCII strings, wrong types,
nested objects), deletes a field, or adds a field under a name the schema uses elsewhere. Resources
stay close enough to valid ones that most mutations hit a single rule.

Examples are derandomized (the same on every run) unless HYPOTHESIS_PROFILE=explore.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from specinfer_operator.api.crd import crd
from tests.support.casetable import load_cases

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


BASES: list[dict[str, Any]] = [c.resource for c in load_cases() if c.valid] + [
    yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))
]


def _schema_words() -> tuple[list[str], list[str]]:
    """Every field name and enum value of the CRD: added fields and strings are often real ones."""
    names: set[str] = set()
    enums: set[str] = set()
    pending = [crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]]
    while pending:
        node = pending.pop()
        names.update(node.get("properties", {}))
        enums.update(str(v) for v in node.get("enum", []))
        pending += list(node.get("properties", {}).values())
        pending += [n for n in (node.get("items"), node.get("additionalProperties")) if isinstance(n, dict)]
    return sorted(names), sorted(enums)


FIELDS, ENUMS = _schema_words()
EDGE_INTEGERS = [0, 1, -1, 2, 3, 4, 5, 13, 14, 15, 16, 63, 64, 65, 100, 1024, 2**31, 2**53 - 1, 2**53, 2**63 - 1, 2**63]
EDGE_STRINGS = [
    "", " ", "-", "--port", "-tp8", "--speculative-confi", "-O3", "--seed", "a b", "x" * 70, "x" * 300,
    "é", "Ascend910", "huawei.com/Ascend910", "requests.x/y", "a..b/c", "bad key!", "kubernetes.io/hostname",
    "HF_HOME", "HF_TOKEN", "A=B", "1:30", "2024-01-01", "yes", "0x1F", "/models/../etc", "org/EAGLE3-x",
]  # fmt: skip

values = st.deferred(
    lambda: st.one_of(
        st.sampled_from(EDGE_INTEGERS),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.sampled_from([0.0, 0.5, 1.0, 3.0, -0.0, 1e30, 0.95, 1.5]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.none(),
        st.sampled_from(EDGE_STRINGS),
        st.sampled_from(ENUMS),
        st.text(max_size=12),
        st.lists(st.sampled_from(EDGE_INTEGERS[:12]), max_size=5),
        st.lists(st.sampled_from(EDGE_STRINGS), max_size=3),
        st.dictionaries(st.sampled_from(FIELDS + EDGE_STRINGS[:12]), st.sampled_from(EDGE_STRINGS + ENUMS), max_size=2),
    )
)


def near(value: Any) -> st.SearchStrategy[Any]:
    """A value of the same kind as `value`, often just across a bound."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.one_of(st.integers(min_value=value - 3, max_value=value + 3), st.sampled_from(EDGE_INTEGERS))
    if isinstance(value, float):
        return st.sampled_from([0.0, value / 2, value * 2, 1.0, -value])
    if isinstance(value, str):
        return st.one_of(st.sampled_from(ENUMS), st.sampled_from(EDGE_STRINGS), st.just(value + "x"))
    if isinstance(value, list) and value:
        return st.lists(near(value[0]), max_size=len(value) + 2)
    return values


def _places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every value below `node`."""
    found: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        found.append((*path, key))
        found += _places(child, (*path, key))
    return found


@st.composite
def resources(draw: st.DrawFn, metadata: bool = True) -> dict[str, Any]:
    """A valid resource with one to three mutations."""
    resource: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        spec = resource["spec"]
        places = [("spec", *p) for p in _places(spec)] or [("spec",)]
        if metadata:
            places += [("metadata", "labels"), ("metadata", "annotations")]
        place = draw(st.sampled_from(places))
        parent: Any = resource
        for key in place[:-1]:
            parent = parent[key]
        last = place[-1]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if place[0] == "metadata":
            keys = st.sampled_from([*EDGE_STRINGS, *FIELDS, "app.kubernetes.io/part-of", "team"])
            entries = draw(st.dictionaries(keys, st.sampled_from([*EDGE_STRINGS, "inference", "v1"])))
            parent.setdefault(last, {}).update(entries)
        elif action == "replace" or not isinstance(parent, dict | list):
            parent[last] = draw(st.one_of(near(parent[last]), near(parent[last]), values))
        elif action == "delete" and isinstance(parent, dict):
            del parent[last]
        elif isinstance(parent.get(last) if isinstance(parent, dict) else parent[last], dict):
            target = parent[last]
            target[draw(st.sampled_from(FIELDS))] = draw(values)
        else:
            parent[last] = draw(values)
    return resource
