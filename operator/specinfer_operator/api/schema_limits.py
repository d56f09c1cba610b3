"""Fit a status (or a status patch) into what the CRD's status schema accepts (pure).

Much of the status comes from pods: figures scraped from their `/metrics`, their termination messages.
A value the schema refuses (a list past its maxItems, a message past its maxLength, an integer past int64,
a number that is not finite) would make the API server refuse the whole patch, and with it every figure
and condition in it. The limits are read from the generated CRD, so they cannot drift from it.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from specinfer_operator.api.crd import openapi_schema

INT64 = (-(1 << 63), (1 << 63) - 1)
ELLIPSIS = "…"


@cache
def status_schema() -> dict[str, Any]:
    schema: dict[str, Any] = openapi_schema()["properties"]["status"]
    return schema


def _number(value: float, schema: dict[str, Any]) -> float | None:
    if not math.isfinite(value):
        return None  # in a merge patch: no figure rather than a refused patch
    return float(min(max(value, schema.get("minimum", -math.inf)), schema.get("maximum", math.inf)))


def fit(value: Any, schema: dict[str, Any]) -> Any:
    """`value` within `schema`'s bounds; None (a merge patch's removal) is kept as it is."""
    if isinstance(value, dict):
        properties, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            inner = properties.get(key, extra if isinstance(extra, dict) else None)
            out[key] = fit(item, inner) if inner is not None else item
        return out
    if isinstance(value, list):
        limit = schema.get("maxItems", len(value))
        items = schema.get("items") or {}
        return [fit(item, items) for item in value[:limit]]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        low, high = schema.get("minimum", INT64[0]), schema.get("maximum", INT64[1])
        return int(min(max(value, low, INT64[0]), high, INT64[1]))
    if isinstance(value, float):
        return _number(value, schema)
    if isinstance(value, str):
        limit = schema.get("maxLength")
        return value if limit is None or len(value) <= limit else value[: limit - 1] + ELLIPSIS
    return value


def clamp(status: dict[str, Any]) -> dict[str, Any]:
    """A status, or a merge patch of it, that the API server accepts."""
    fitted: dict[str, Any] = fit(status, status_schema())
    return fitted
