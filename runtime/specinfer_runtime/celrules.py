"""Cross-field rules, written once in CEL.

The same `Rule` objects become `x-kubernetes-validations` in the CRD (so the API server refuses a bad
resource at `kubectl apply`) and are evaluated here, in-process, by `specinfer validate`, the operator
and the in-pod runtime. One expression, one message: the verdicts cannot drift apart.
"""

from __future__ import annotations

import itertools
import json
import re
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
    """One CEL validation rule; `self` is the object the rule is attached to.

    `message` is the text shown when the rule fails. With `args` (CEL expressions) it is a template
    whose `%d` / `%s` are filled by them, rendered through the Kubernetes `format` function.
    """

    id: str
    rule: str
    message: str
    args: tuple[str, ...] = ()
    field_path: str = ""
    reason: Reason = "FieldValueInvalid"

    @property
    def message_expression(self) -> str:
        if not self.args:
            return ""
        return f"{cel_string(self.message)}.format([{', '.join(self.args)}])"

    def to_policy(self) -> dict[str, str]:
        """The ValidatingAdmissionPolicy validation: the message starts with the field path."""
        prefix = cel_string(f"{self.field_path}: ")
        out = {"expression": self.rule, "reason": "Invalid"}
        if self.args:
            out["messageExpression"] = f"{prefix} + {self.message_expression}"
        else:
            out["message"] = f"{self.field_path}: {self.message}"
        return out

    def to_kubernetes(self) -> dict[str, str]:
        """The `x-kubernetes-validations` entry for the CRD."""
        out = {"rule": self.rule}
        if self.args:
            out["messageExpression"] = self.message_expression
        else:
            out["message"] = self.message
        if self.field_path:
            out["fieldPath"] = self.field_path
        out["reason"] = self.reason
        return out


def cel_string(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# The subset of the Kubernetes CEL string and list libraries (k8s and cel-go's strings extension) that our rules use;
# cel (the Python binding) ships only the CEL standard library. Semantics follow k8s.io/apiserver/pkg/cel/library.
#
# Messages are built with `format`, never with `+` and `string(int)`: the API server's cost estimator
# cannot bound the size of `string(int)` and refuses any concatenation with it (kubernetes#124234).
def _split(text: str, separator: str) -> list[str]:
    return text.split(separator)


def _join(values: list[str], separator: str) -> str:
    return separator.join(values)


def _replace(text: str, old: str, new: str) -> str:
    return text.replace(old, new)


def _lower_ascii(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


# Go's unicode.IsSpace, which strings.TrimSpace uses: Python also counts the separators \x1c-\x1f.
_GO_SPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace() and not "\x1c" <= c <= "\x1f")


def _trim(text: str) -> str:
    return text.strip(_GO_SPACE)


def _show(value: Any, nested: bool = False) -> str:
    """A value as the API server's `%s` prints it: `[4, 8]`, `["a", "b"]`, `1`, `0.95`, `true`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.15g}"
    if isinstance(value, str):
        return json.dumps(value) if nested else value
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v, nested=True) for v in value) + "]"
    return str(value)


def _format(template: str, args: list[Any]) -> str:
    """`'...%d...%s...'.format([a, b])` with the verbs our messages use: %d, %s and %%."""
    values = iter(args)

    def verb(match: re.Match[str]) -> str:
        return "%" if match.group(1) == "%" else _show(next(values))

    return re.sub(r"%([ds%])", verb, template)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    """RE2's `$` (no m flag) ends the text; Python's also matches before a final newline: use `\\Z`."""
    if "\\$" in pattern:
        raise ValueError(f"a literal $ in a rule's regex is not supported: {pattern}")
    return re.compile(pattern.replace("$", r"\Z"))


def _matches(text: str, pattern: str) -> bool:
    return _regex(pattern).search(text) is not None


def _is_sorted(values: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(values))


def _min(values: list[Any]) -> Any:
    return min(values)


def _max(values: list[Any]) -> Any:
    return max(values)


def _sum(values: list[Any]) -> Any:
    return sum(values)


_SUFFIXES = {
    **{s: 1000**i for i, s in enumerate(("", "k", "M", "G", "T", "P", "E"))},
    **{s: 1024**i for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    "m": 0.001,
}


def _quantity(text: str) -> float:
    """Kubernetes' `quantity()` as a number, for comparisons (the forms QUANTITY admits)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)", text)
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * float(_SUFFIXES[match.group(2)])


def _compare_to(a: float, b: float) -> int:
    return (a > b) - (a < b)


KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "compareTo": _compare_to,
    "isSorted": _is_sorted,
    "min": _min,
    "max": _max,
    "sum": _sum,
    "format": _format,
    "split": _split,
    "join": _join,
    "replace": _replace,
    "trim": _trim,
    "lowerAscii": _lower_ascii,
    "cachedMatches": _matches,
}


@cache
def _compiled(expression: str) -> Any:
    """The cel binding compiles a `matches` regex again on every call (milliseconds for the owned-flag
    patterns); in-process the same call goes to a cached Python regex instead."""
    return cel.compile(expression.replace(".matches(", ".cachedMatches("))


def _context(self_value: Any, variable: str = "self", params: Any = None) -> Any:
    value = dict(self_value) if isinstance(self_value, Mapping) else self_value
    variables = {variable: value, **({"params": params} if params is not None else {})}
    return cel.Context(variables=variables, functions=KUBERNETES_FUNCTIONS)


def evaluate(expression: str, self_value: Any) -> Any:
    """Evaluate one CEL expression with `self` bound, as the API server does."""
    return _compiled(expression).execute(_context(self_value))


@dataclass(frozen=True)
class Violation:
    rule: Rule
    path: str
    message: str


def check(
    rules: Iterable[Rule], self_value: Any, path: str, variable: str = "self", params: Any = None
) -> list[Violation]:
    """Every rule that `self_value` breaks, with its message and the path it points at. Admission policy
    rules see the whole resource as `object`, and their parameter object, if any, as `params`."""
    found: list[Violation] = []
    if not rules:
        return found
    context = _context(self_value, variable, params)  # converting `self` once costs more than evaluating every rule
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


def along(path: str, test: Callable[[str], str]) -> str:
    """CEL: `test` holds for the value at `path` wherever it is set. `path` is a variable and dotted fields,
    `[]` after a field meaning each item of that list: `object.spec.terms[].selector`."""
    head, *fields = path.split(".")
    return _along(head, fields, test, 0)


def _along(expr: str, fields: list[str], test: Callable[[str], str], depth: int) -> str:
    if not fields:
        return test(expr)
    name, *rest = fields
    inner = f"{expr}.{name.removesuffix('[]')}"
    if name.endswith("[]"):
        item = f"x{depth}"
        body = f"{inner}.all({item}, {_along(item, rest, test, depth + 1)})"
    else:
        body = _along(inner, rest, test, depth)
    return f"(!has({inner}) || {body})"


def map_keys(
    rule_id: str, target: str, test: str, message: str, field_path: str, reason: Reason = "FieldValueInvalid"
) -> Rule:
    """CEL: every key `k` of the map at `target` passes `test`, wherever the map is set. A `%s` in the message
    names the keys that do not. For the admission policy: a CRD schema cannot bound map keys, so CEL in the
    CRD could not afford such a check (see crd.py)."""
    return Rule(
        id=rule_id,
        rule=along(target, lambda m: f"{m}.all(k, {test})"),
        message=message,
        args=(f"{target}.filter(k, !({test}))",) if "%s" in message else (),
        field_path=field_path,
        reason=reason,
    )


def cel_in(expr: str, values: Iterable[str]) -> str:
    """`expr in [...]`: membership in a list of Python constants."""
    return f"{expr} in {cel_list(values)}"
