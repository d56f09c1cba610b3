"""What the tenant policy's cases are made of: a valid base spec, the pieces the cases add to it, and the
policies they are judged against (see policycases)."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-8B"},
    "speculative": {"method": "ngram", "numSpeculativeTokens": 4},
}
DRIVER = {"name": "driver", "hostPath": {"path": "/usr/local/Ascend/driver", "type": "Directory"}}
DRIVER_MOUNT = {"name": "driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True}
NON_ROOT = {"runAsNonRoot": True, "runAsUser": 1000}
PERMISSIVE = {
    "allowedHostPaths": [{"pathPrefix": "/data", "readOnly": False}, {"pathPrefix": "/usr/local/Ascend/driver"}],
    "allowedVolumeTypes": ["emptyDir", "hostPath", "configMap", "secret", "persistentVolumeClaim", "nfs", "csi"],
    "allowedNfsServers": ["nfs.example.com"],
    "sidecarsMayRunAsRoot": True,
    "sidecarsMayEscalate": True,
    "serviceAccountNameAllowed": True,
}


# The strict policy of the attacks that typed sources once slipped past: no host paths, emptyDir and configMap only.
STRICT = {"allowedHostPaths": [], "allowedVolumeTypes": ["emptyDir", "configMap"]}
# Host paths allowed (for writing too) where the volume type hostPath is not.
PATHS_NOT_TYPE = {"allowedHostPaths": [{"pathPrefix": "/data", "readOnly": False}], "allowedVolumeTypes": ["emptyDir"]}
DRAFT = {"method": "draft_model", "numSpeculativeTokens": 4}
HIDDEN = {"method": "extract_hidden_states", "numSpeculativeTokens": 1}
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
SECRET_ENV = {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "password"}}}
DIGEST = "sha256:" + "0" * 64
EAGLE3 = {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "d"}}
Refused = str | tuple[str, ...] | None


def overlay(**pod: Any) -> dict[str, Any]:
    return {"podTemplate": {"spec": pod}}


def draft(source: dict[str, Any]) -> dict[str, Any]:
    return {"speculative": {**DRAFT, "draftModel": {"name": "d", "source": source}}}


def hidden(storage: dict[str, Any]) -> dict[str, Any]:
    return {"speculative": {**HIDDEN, "hiddenStates": {"layerIds": [2], "storage": storage}}}


def learning(**training: Any) -> dict[str, Any]:
    """A spec that learns its draft (spec.learning), with these training settings."""
    return {"speculative": EAGLE3, "rollout": {"strategy": "Canary"}, "learning": {"training": training}}


def sidecar(**container: Any) -> dict[str, Any]:
    return {"name": "s", "image": "b", "securityContext": NON_ROOT, **container}


def paths(path: Refused) -> list[str]:
    """The field paths a case's policy refuses, in the order the rules run."""
    return [path] if isinstance(path, str) else list(path or ())


def spec_of(extra: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **copy.deepcopy(extra)}
