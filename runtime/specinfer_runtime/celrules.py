"""Cross-field rules, written once in CEL.

The same `Rule` objects become `x-kubernetes-validations` in the CRD (so the API server refuses a bad
resource at `kubectl apply`) and are evaluated here, in-process, by `specinfer validate`, the operator
and the in-pod runtime. One expression, one message: the verdicts cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import cel

Reason = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"]

REASON_LABEL: dict[Reason, str] = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}


@dataclass(frozen=True)
class Rule:
    """One CEL validation rule; `self` is the object the rule is attached to."""

    id: str
    rule: str
    message: str
    message_expression: str = ""
    field_path: str = ""
    reason: Reason = "FieldValueInvalid"

    def to_kubernetes(self) -> dict[str, str]:
        """The `x-kubernetes-validations` entry for the CRD."""
        out = {"rule": self.rule, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        out["reason"] = self.reason
        return out


# The subset of the Kubernetes CEL string and list libraries that our rules use; cel (the Python
# binding) ships only the CEL standard library. Semantics follow k8s.io/apiserver/pkg/cel/library.
def _join(items: list[str], separator: str = "") -> str:
    return separator.join(items)


def _split(text: str, separator: str) -> list[str]:
    return text.split(separator)


def _replace(text: str, old: str, new: str) -> str:
    return text.replace(old, new)


KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "join": _join,
    "split": _split,
    "replace": _replace,
}


@cache
def _compiled(expression: str) -> Any:
    return cel.compile(expression)


def _context(self_value: Mapping[str, Any]) -> Any:
    return cel.Context(variables={"self": dict(self_value)}, functions=KUBERNETES_FUNCTIONS)


def evaluate(expression: str, self_value: Mapping[str, Any]) -> Any:
    """Evaluate one CEL expression with `self` bound, as the API server does."""
    return _compiled(expression).execute(_context(self_value))


@dataclass(frozen=True)
class Violation:
    rule: Rule
    path: str
    message: str


def check(rules: Iterable[Rule], self_value: Mapping[str, Any], path: str) -> list[Violation]:
    """Every rule that `self_value` breaks, with its message and the path it points at."""
    found: list[Violation] = []
    if not rules:
        return found
    context = _context(self_value)  # converting `self` once costs more than evaluating every rule
    for rule in rules:
        if _compiled(rule.rule).execute(context) is True:
            continue
        message = rule.message
        if rule.message_expression:
            message = str(_compiled(rule.message_expression).execute(context))
        found.append(Violation(rule, path + rule.field_path, message))
    return found


def cel_list(values: Iterable[str | int]) -> str:
    """A CEL list literal, for rules generated from Python constants."""
    return "[" + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values) + "]"


def cel_map(mapping: Mapping[str, str]) -> str:
    """A CEL map literal of strings."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in mapping.items()) + "}"
