"""Small builders for resources in unit tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from specinfer_operator.api.resource import SpeculativeInference
from specinfer_runtime.engine import EngineSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def resource(spec: dict[str, Any], name: str = "demo", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "metadata": {"name": name, **metadata},
        "spec": copy.deepcopy(spec),
    }


def cr(spec: dict[str, Any], **metadata: Any) -> SpeculativeInference:
    return SpeculativeInference.model_validate(resource(spec, **metadata))


def engine(spec: dict[str, Any]) -> EngineSpec:
    return EngineSpec.model_validate(spec)


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return data
