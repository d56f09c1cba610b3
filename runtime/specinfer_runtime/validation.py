"""Validate a document against the models: schema errors, CEL rules, then warnings.

Messages follow the API server's wording (`Invalid value`, `Unsupported value`, `Required value`,
`unknown field`) so that a user sees the same explanation from `kubectl apply` and `specinfer validate`,
and add what the API server cannot: the allowed range and the fix.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from specinfer_runtime.base import CelRules, Section
from specinfer_runtime.celrules import Rule, check, check_each


@dataclass(frozen=True)
class Problem:
    """One finding: where, what, and which rule (`schema`, `R6`, ...) produced it."""

    path: str
    message: str
    rule: str = "schema"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


M = TypeVar("M", bound=Section)


@dataclass
class Report(Generic[M]):
    """Errors refuse the document; warnings are reported and the document is still accepted."""

    value: M | None = None
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    stored: dict[str, Any] | None = None  # the valid document as the API server stores it (`value.dump()`)

    @property
    def ok(self) -> bool:
        return not self.errors


def join_path(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def strip_nulls(data: Any, model: type[BaseModel] | None, path: str, dropped: list[str]) -> Any:
    """Drop null-valued fields, as the API server prunes them from non-nullable fields: the fields of the
    models, and the entries of a map. A key the model does not have keeps its null: the API server's strict
    field validation refuses it as unknown. What a map or list of plain values holds is not looked into: the
    free-form values of the passthrough maps keep their nulls, as the API server keeps them. What holds no
    null is returned as it is, and a path is only spelled out for a null."""
    keys: list[str | int] = []

    def walk(value: Any, model: type[BaseModel] | None) -> Any:
        if isinstance(value, list):
            if model is None:
                return value
            out: list[Any] | None = None
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    keys.append(i)
                    new = walk(item, model)
                    keys.pop()
                    if new is not item:
                        out = out or list(value)
                        out[i] = new
            return value if out is None else out
        fields = field_models(model)
        kept: dict[Any, Any] | None = None
        for key, item in value.items():
            if item is None and (model is None or key in fields):
                dropped.append(functools.reduce(join_path, (*keys, str(key)), path))
                kept = kept or dict(value)
                del kept[key]
            elif model is not None and isinstance(item, dict | list):
                keys.append(str(key))
                new = walk(item, fields.get(key))
                keys.pop()
                if new is not item:
                    kept = kept or dict(value)
                    kept[key] = new
        return value if kept is None else kept

    return walk(data, model) if isinstance(data, dict | list) else data


@functools.cache
def field_models(model: type[BaseModel] | None) -> dict[str, type[BaseModel] | None]:
    """A model's field names (aliases) and the model inside each, if any."""
    if model is None:
        return {}
    return {(f.alias or n): next(_inner_models(f.annotation), None) for n, f in model.model_fields.items()}


# --------------------------------------------------------------------------------------------------
# Schema errors


def _inner_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """Models reachable through Optional, list, dict and Annotated wrappers."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            yield from _inner_models(arg)


def _field_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[type[BaseModel] | None, FieldInfo | None]:
    """The model that holds the field an error points at, and that field (looked up by alias)."""
    keys = [k for k in loc if isinstance(k, str)]
    holder: type[BaseModel] | None = model
    for depth, key in enumerate(keys):
        if holder is None:
            return None, None
        info = {(f.alias or n): f for n, f in holder.model_fields.items()}.get(key)
        if info is None or depth == len(keys) - 1:
            return holder, info
        holder = next(_inner_models(info.annotation), None)
    return holder, None


def _bounds(info: FieldInfo | None) -> str:
    """The allowed range of a numeric field in interval notation, e.g. `[1, 14]` or `(0, 1]`."""
    if info is None:
        return ""
    low = high = ""
    for item in [*info.metadata, *_nested_metadata(info)]:
        if isinstance(item, Ge):
            low = f"[{item.ge}"
        elif isinstance(item, Gt):
            low = f"({item.gt}"
        if isinstance(item, Le):
            high = f"{item.le}]"
        elif isinstance(item, Lt):
            high = f"{item.lt})"
    return f"; allowed: {low}, {high}" if low and high else ""


def _nested_metadata(info: FieldInfo) -> list[Any]:
    """Constraints of list items (e.g. capture sizes), which sit inside the item annotation."""
    found: list[Any] = []
    for arg in get_args(info.annotation):
        found.extend(getattr(arg, "__metadata__", ()))
        for inner in get_args(arg):
            found.extend(getattr(inner, "__metadata__", ()))
    return found


_TYPE_NAMES = {
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "string": "string",
    "str": "string",
    "list": "array",
    "dict": "object",
    "model": "object",
    "model_attributes": "object",
    "literal": "string",
}


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _schema_message(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    loc = tuple(error["loc"])
    holder, info = _field_at(root, loc)
    if kind == "missing":
        return "Required value" + (f": {info.description}" if info and info.description else "")
    if kind == "extra_forbidden":
        allowed = ", ".join(sorted((f.alias or n) for n, f in holder.model_fields.items())) if holder else ""
        return f'unknown field "{loc[-1]}"' + (f"; allowed fields: {allowed}" if allowed else "")
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", '"').replace(" or ", ", ")
        return f"Unsupported value: {_show(value)}: supported values: {expected}"
    if kind.endswith("_type") or kind in ("int_from_float", "bool_parsing", "int_parsing"):
        name = _TYPE_NAMES.get(kind.removesuffix("_type").removesuffix("_parsing").split("_from")[0], "")
        return f"Invalid value: {_show(value)}: must be of type {name or kind}"
    hint = _bounds(info)
    comparisons = {
        "greater_than_equal": ("should be greater than or equal to", "ge"),
        "greater_than": ("should be greater than", "gt"),
        "less_than_equal": ("should be less than or equal to", "le"),
        "less_than": ("should be less than", "lt"),
    }
    if kind in comparisons:
        words, key = comparisons[kind]
        return f"Invalid value: {_show(value)}: {words} {ctx[key]}{hint}"
    if kind == "too_long":
        return f"Too many: {ctx.get('actual_length')}: must have at most {ctx.get('max_length')} items"
    if kind == "too_short":
        return f"Invalid value: {ctx.get('actual_length')} items: should have at least {ctx.get('min_length')} items"
    if kind == "string_too_long":
        return f"Too long: may not be more than {ctx.get('max_length')} bytes"
    if kind == "string_too_short":
        return f"Invalid value: {_show(value)}: should be at least {ctx.get('min_length')} chars long"
    if kind == "string_pattern_mismatch":
        return f"Invalid value: {_show(value)}: should match '{ctx.get('pattern')}'"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    return f"Invalid value: {_show(value)}: {error['msg']}"


def _list_bound(root: type[BaseModel], data: Any, list_loc: tuple[str | int, ...]) -> tuple[int, int] | None:
    """(length, maxItems) of the list at `list_loc`, when it is over its bound."""
    value = data
    for key in list_loc:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and isinstance(key, int):
            value = value[key]
    _, info = _field_at(root, list_loc)
    limit = next((m.max_length for m in (info.metadata if info else []) if hasattr(m, "max_length")), None)
    if isinstance(value, list) and limit is not None and len(value) > limit:
        return len(value), limit
    return None


def schema_problems(error: ValidationError, root: type[BaseModel], prefix: str, data: Any) -> list[Problem]:
    """One problem per error; a list over its bound is one `Too many`, not one error per item."""
    problems: dict[tuple[str, str], Problem] = {}
    bounds: dict[tuple[str | int, ...], tuple[int, int] | None] = {}
    for detail in error.errors():
        loc = tuple(detail["loc"])
        items = [i for i, key in enumerate(loc) if isinstance(key, int)]
        list_loc = loc[: items[-1]] if items else None
        if list_loc is not None and list_loc not in bounds:
            bounds[list_loc] = _list_bound(root, data, list_loc)
        over = bounds.get(list_loc) if list_loc is not None else None
        if list_loc is not None and over is not None:
            loc, message = list_loc, f"Too many: {over[0]}: must have at most {over[1]} items"
        else:
            message = _schema_message(detail, root)
        path = prefix
        for key in loc:
            path = join_path(path, key)
        problems.setdefault((path, message), Problem(path, message))
    return list(problems.values())


# --------------------------------------------------------------------------------------------------
# CEL rules


def rule_violations(
    rules: tuple[Rule, ...], data: Any, path: str = "", variable: str = "self", params: Any = None
) -> list[Problem]:
    """The rules `data` breaks, as problems; admission rules see it as `object`, with `params` if any."""
    return [Problem(v.path.lstrip("."), v.message, v.rule.id) for v in check(rules, data, path, variable, params)]


def _item_rules(annotation: Any) -> tuple[Rule, ...]:
    """The CelRules on the items of a list field (`list[Annotated[str, ..., CelRules(...)]] | None`)."""
    for arg in get_args(annotation):
        if get_origin(arg) is list:
            item = get_args(arg)[0]
            return tuple(r for m in getattr(item, "__metadata__", ()) if isinstance(m, CelRules) for r in m.rules)
        found = _item_rules(arg)
        if found:
            return found
    return ()


def rule_problems(value: Section, data: dict[str, Any], path: str) -> list[Problem]:
    """Evaluate the CEL rules of `value` and of every section and rule-bearing list inside it: each rule
    once over every object it applies to (`data` is `value` dumped)."""
    found: Found = {}
    _collect(type(value), data, path, found)
    violations = (v for rules, items in found.values() for v in check_each(rules, items))
    return [Problem(v.path.lstrip("."), v.message, v.rule.id) for v in violations]


# The objects rules apply to, by the identity of their rules: (the rules, [(path, object)]).
Found = dict[int, tuple[tuple[Rule, ...], list[tuple[str, Any]]]]


def _collect(model: type[Section], data: dict[str, Any], path: str, found: Found) -> None:
    """The objects in `data` (a `model`) that rules apply to, grouped by their rules."""
    if model.cel_rules:
        found.setdefault(id(model.cel_rules), (model.cel_rules, []))[1].append((path, data))
    for key, inner, item_rules in _ruled_fields(model):
        sub = data.get(key)
        at = join_path(path, key)
        if isinstance(sub, dict) and inner is not None:
            _collect(inner, sub, at, found)
        elif isinstance(sub, list):
            for i, item in enumerate(sub):
                if inner is not None and isinstance(item, dict):
                    _collect(inner, item, join_path(at, i), found)
                elif item_rules:
                    found.setdefault(id(item_rules), (item_rules, []))[1].append((join_path(at, i), item))


@functools.cache
def _ruled_fields(model: type[Section]) -> tuple[tuple[str, type[Section] | None, tuple[Rule, ...]], ...]:
    """The fields of `model` with rules somewhere inside: (key, the section inside, rules on its items)."""
    out = []
    for name, info in model.model_fields.items():
        inner = next((m for m in _inner_models(info.annotation) if issubclass(m, Section)), None)
        item_rules = _item_rules(info.annotation)
        if (inner is not None and _has_rules(inner)) or item_rules:
            out.append((info.alias or name, inner if inner is not None and _has_rules(inner) else None, item_rules))
    return tuple(out)


@functools.cache
def _has_rules(model: type[Section]) -> bool:
    return bool(model.cel_rules) or bool(_ruled_fields(model))


Advisor = Callable[[M, dict[str, Any]], list[Problem]]  # the document, and as stored


def validate(
    model: type[M], data: Any, prefix: str = "", advise: Advisor[M] | None = None, context: dict[str, Any] | None = None
) -> Report[M]:
    """Schema, then CEL rules, then (for a valid document) warnings. `context` is pydantic's validation context."""
    report: Report[M] = Report()
    dropped: list[str] = []
    data = strip_nulls(data, model, prefix, dropped)
    report.warnings += [Problem(p, "null value ignored (the API server drops nulls)") for p in dropped]
    try:
        value = model.model_validate(data, context=context)
    except ValidationError as error:
        report.errors = sorted(schema_problems(error, model, prefix, data), key=lambda p: p.path)
        return report
    dumped = value.dump()
    report.errors = sorted(rule_problems(value, dumped, prefix), key=lambda p: p.path)
    if not report.errors:  # admission policies run after the schema and its rules have passed
        report.errors = rule_violations(model.admission_rules, dumped, prefix, "object")
    if report.errors:
        return report
    report.value, report.stored = value, dumped
    if advise is not None:
        report.warnings += advise(value, dumped)
    return report
