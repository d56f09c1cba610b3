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

from specinfer_runtime import quantity
from specinfer_runtime.celscope import Scope, pruned, reads

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


def _substring(text: str, start: int, end: int | None = None) -> str:
    """cel-go's strings extension: code points from `start` to `end`, an error outside the string."""
    stop = len(text) if end is None else end
    if not 0 <= start <= stop <= len(text):
        raise ValueError(f"substring({start}, {stop}) out of range of a string of {len(text)}")
    return text[start:stop]


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


def _quantity(text: str) -> float:
    """Kubernetes' `quantity()`, as a number for comparisons; an error where Kubernetes refuses the string."""
    value = quantity.parse(text)
    if value is None:
        raise ValueError(f"not a quantity: {text!r}")
    return float(value)


def _is_quantity(text: str) -> bool:
    return quantity.parse(text) is not None


def _compare_to(a: float, b: float) -> int:
    return (a > b) - (a < b)


KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isSorted": _is_sorted,
    "min": _min,
    "max": _max,
    "sum": _sum,
    "format": _format,
    "split": _split,
    "join": _join,
    "replace": _replace,
    "substring": _substring,
    "trim": _trim,
    "lowerAscii": _lower_ascii,
    "cachedMatches": _matches,
}


@cache
def _compiled(expression: str) -> Any:
    """The cel binding compiles a `matches` regex again on every call (milliseconds for the owned-flag
    patterns); in-process the same call goes to a cached Python regex instead."""
    return cel.compile(expression.replace(".matches(", ".cachedMatches("))


@cache
def _reads(expressions: tuple[str, ...]) -> dict[str, Scope] | None:
    """What the expressions read of each variable, together (None: give them everything)."""
    together: dict[str, Scope] = {}
    for expression in expressions:
        found = reads(expression)
        if found is None:
            return None
        for name, scope in found.items():
            together.setdefault(name, Scope()).merge(scope)
    return together


def _scoped(expressions: tuple[str, ...], variables: dict[str, Any]) -> dict[str, Any]:
    """The variables pruned to what `expressions` read (see celscope): their cost is that of what they read."""
    scopes = _reads(expressions)
    if scopes is None:
        return variables
    return {name: pruned(value, scopes[name]) for name, value in variables.items() if name in scopes}


def _run(expression: str, variables: dict[str, Any]) -> Any:
    context = cel.Context(variables=_scoped((expression,), variables), functions=KUBERNETES_FUNCTIONS)
    return _compiled(expression).execute(context)


def _variables(self_value: Any, variable: str = "self", params: Any = None) -> dict[str, Any]:
    value = dict(self_value) if isinstance(self_value, Mapping) else self_value
    return {variable: value, **({"params": params} if params is not None else {})}


def evaluate(expression: str, self_value: Any) -> Any:
    """Evaluate one CEL expression with `self` bound, as the API server does."""
    return _run(expression, _variables(self_value))


@dataclass(frozen=True)
class Violation:
    rule: Rule
    path: str
    message: str


def check(
    rules: Iterable[Rule], self_value: Any, path: str, variable: str = "self", params: Any = None
) -> list[Violation]:
    """Every rule that `self_value` breaks, with its message and the path it points at. Admission policy
    rules see the whole resource as `object`, and their parameter object, if any, as `params`. The rules
    are given what they read together, in one context; where that is large, each rule is given only what it
    reads: the cel binding's cost is that of the values it is given, and of every field it selects."""
    rules = tuple(rules)
    variables = _variables(self_value, variable, params)
    shared = _scoped(tuple(r.rule for r in rules), variables)
    if _larger(shared, _SHARED):
        verdicts = [_run(rule.rule, variables) for rule in rules]
    else:
        context = cel.Context(variables=shared, functions=KUBERNETES_FUNCTIONS)
        verdicts = [_compiled(rule.rule).execute(context) for rule in rules]
    return [
        Violation(rule, path + rule.field_path, _message(rule, variables))
        for rule, verdict in zip(rules, verdicts, strict=True)
        if verdict is not True
    ]


# Values a context may hold for every rule of a set to share it: fewer, and a context for each rule costs more
# than what they share; more, and what each rule selects from them costs more.
_SHARED = 300


def _larger(value: Any, limit: int) -> bool:
    """Whether `value` holds more than `limit` maps, lists and scalars (counting stops there)."""
    pending, seen = [value], 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def check_each(rules: tuple[Rule, ...], items: list[tuple[str, Any]]) -> list[Violation]:
    """`check` of `rules` on many objects (path, value) of one kind: each rule runs once over all of them
    (a context and an evaluation per object would cost more than the rules themselves). Where a rule fails,
    one more evaluation says which objects break it, and the first MAX_LISTED of them say why."""
    scopes = _reads(tuple(r.rule for r in rules))
    if scopes is None or len(items) == 1:  # one object: each rule given only what it reads costs the least
        return [v for path, value in items for v in check(rules, value, path)]
    scope = scopes.get("self")
    each = [pruned(value, scope) if scope is not None else None for _, value in items]
    # In chunks: the binding's `map` copies what it has built at every step, so one over every object would
    # cost their number squared.
    chunks = [each[i : i + _CHUNK] for i in range(0, len(each), _CHUNK)]
    context = cel.Context(variables={"chunks__": chunks}, functions=KUBERNETES_FUNCTIONS)
    found: list[Violation] = []
    for rule in rules:
        if _compiled(f"chunks__.all(chunk__, chunk__.all(self, {rule.rule}))").execute(context) is True:
            continue
        verdicts = _compiled(f"chunks__.map(chunk__, chunk__.map(self, {rule.rule}))").execute(context)
        failing = itertools.compress(items, (v is not True for v in itertools.chain.from_iterable(verdicts)))
        found += _failures(rule, list(failing))
    return found


_CHUNK = 64
# Objects listed for one rule: past them, one line says how many more break it. Every message costs an
# evaluation of its own, and a thousand alike say no more than ten.
MAX_LISTED = 10


def _failures(rule: Rule, failing: list[tuple[str, Any]]) -> list[Violation]:
    """The objects (path, value) that break `rule`, the first MAX_LISTED with their messages."""
    found = [
        Violation(rule, path + rule.field_path, _message(rule, _variables(value)))
        for path, value in failing[:MAX_LISTED]
    ]
    if len(failing) > MAX_LISTED:
        more = f"{len(failing) - MAX_LISTED} more from here on break the same rule (the first {MAX_LISTED} are listed)"
        found.append(Violation(rule, failing[MAX_LISTED][0] + rule.field_path, more))
    return found


def _message(rule: Rule, variables: dict[str, Any]) -> str:
    return str(_run(rule.message_expression, variables)) if rule.message_expression else rule.message


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
