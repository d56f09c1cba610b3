"""The metadata of a SpeculativeInference, checked as the API server checks every object's metadata.

The API server validates metadata itself (not through the CRD schema), so these checks mirror
apimachinery's: namespace names, label keys and values, annotation keys and their total size. They
let `specinfer validate` refuse what `kubectl apply` would refuse.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specinfer_runtime.celrules import evaluate
from specinfer_runtime.names import DNS_LABEL, LABEL_VALUE_FORMAT, QUALIFIED_NAME_FORMAT, label_value, qualified_name

ANNOTATIONS_MAX_BYTES = 256 * 1024


def _is_qualified_name(key: str) -> bool:
    return bool(evaluate(qualified_name("self"), key))


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
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (labels or {}).items():
            if not _is_qualified_name(key):
                raise ValueError(f'Invalid value: "{key}": label keys must be {QUALIFIED_NAME_FORMAT}')
            if not evaluate(label_value("self"), value):
                raise ValueError(f'Invalid value: "{value}": label values must be {LABEL_VALUE_FORMAT}')
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str] | None) -> dict[str, str] | None:
        size = 0
        for key, value in (annotations or {}).items():
            if not _is_qualified_name(key.lower()):
                raise ValueError(f'Invalid value: "{key}": annotation keys must be {QUALIFIED_NAME_FORMAT}')
            size += len(key.encode()) + len(value.encode())
        if size > ANNOTATIONS_MAX_BYTES:
            raise ValueError(f"Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes (annotations hold {size})")
        return annotations
