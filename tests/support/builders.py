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


def engine_pod(
    name: str,
    config_hash: str = "",
    waiting: str | None = None,
    message: str = "",
    container: str = "engine",
    policy: str = "File",
) -> dict[str, Any]:
    """A pod whose `container` (terminationMessagePolicy `policy`) waits for `waiting` (or runs), its last
    exit having said `message`, after 4 restarts."""
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    terminated = {"exitCode": 1, "message": message}
    return {
        "metadata": {"name": name, "annotations": {"specinfer.io/config-hash": config_hash}},
        "spec": {"containers": [{"name": container, "terminationMessagePolicy": policy}]},
        "status": {
            "containerStatuses": [
                {"name": container, "restartCount": 4, "state": state, "lastState": {"terminated": terminated}}
            ]
        },
    }
