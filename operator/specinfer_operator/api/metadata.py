"""The metadata of a SpeculativeInference, checked as the API server checks every object's metadata.

The API server validates metadata itself (not through the CRD schema), so these checks mirror
apimachinery's: namespace names, label keys and values, annotation keys and their total size. They
let `specinfer validate` refuse what `kubectl apply` would refuse; the operator, which reads what the API
server stored, skips the label and annotation checks (STORED).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from specinfer_runtime.names import (
    DNS_LABEL,
    LABEL_VALUE_FORMAT,
    LABEL_VALUE_TEXT,
    QUALIFIED_NAME,
    QUALIFIED_NAME_FORMAT,
)

ANNOTATIONS_MAX_BYTES = 256 * 1024
# Validation context: the object comes from the API server, whose own checks its metadata passed. The checks
# below would only repeat them there, at the cost of the metadata (tens of thousands of labels fit in an object).
STORED = "stored"


def annotation_bytes(annotations: dict[str, str]) -> int:
    """The size the API server bounds (ANNOTATIONS_MAX_BYTES): keys and values, in bytes."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())


def _checked(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(STORED))


def _first_refused(pattern: re.Pattern[str], texts: Iterable[str]) -> str | None:
    """The first of `texts` that `pattern` does not match whole (a C-speed scan: an object may hold tens of
    thousands of labels)."""
    return next(itertools.filterfalse(pattern.fullmatch, texts), None)


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; the API server owns the rest."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    namespace: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL)
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None, info: ValidationInfo) -> dict[str, str] | None:
        if _checked(info):
            return labels
        key = _first_refused(QUALIFIED_NAME, labels or {})
        if key is not None:
            raise ValueError(f'Invalid value: "{key}": label keys must be {QUALIFIED_NAME_FORMAT}')
        value = _first_refused(LABEL_VALUE_TEXT, (labels or {}).values())
        if value is not None:
            raise ValueError(f'Invalid value: "{value}": label values must be {LABEL_VALUE_FORMAT}')
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str] | None, info: ValidationInfo) -> dict[str, str] | None:
        if _checked(info):
            return annotations
        key = next((k for k in annotations or {} if not QUALIFIED_NAME.fullmatch(k.lower())), None)
        if key is not None:
            raise ValueError(f'Invalid value: "{key}": annotation keys must be {QUALIFIED_NAME_FORMAT}')
        size = annotation_bytes(annotations or {})
        if size > ANNOTATIONS_MAX_BYTES:
            raise ValueError(f"Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes (annotations hold {size})")
        return annotations
