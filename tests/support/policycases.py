"""Resources and tenant policies whose verdicts the operator, `specinfer validate` and the API server (the
tenant ValidatingAdmissionPolicy, bound to the policy) must agree on.

Each case is (name, what the spec adds to a valid base, the policy's spec, the field path refused or None).
"""

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


def overlay(**pod: Any) -> dict[str, Any]:
    return {"podTemplate": {"spec": pod}}


CASES: list[tuple[str, dict[str, Any], dict[str, Any], str | None]] = [
    ("the driver read-only", {"runtime": {"volumeMounts": [DRIVER_MOUNT]}, **overlay(volumes=[DRIVER])}, {}, None),
    (
        "the driver mounted writable",
        {"runtime": {"volumeMounts": [{**DRIVER_MOUNT, "readOnly": False}]}, **overlay(volumes=[DRIVER])},
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a path next to the driver's prefix",
        overlay(volumes=[{"name": "d", "hostPath": {"path": "/usr/local/Ascend/driver2"}}]),
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "the node's root",
        overlay(volumes=[{"name": "d", "hostPath": {"path": "/etc"}}]),
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a model on a host path",
        {"model": {"name": "m", "source": {"hostPath": {"path": "/data/models/qwen"}}}},
        {},
        "spec.model.source.hostPath.path",
    ),
    (
        "a model on an allowed host path",
        {"model": {"name": "m", "source": {"hostPath": {"path": "/data/models/qwen"}}}},
        PERMISSIVE,
        None,
    ),
    (
        "NFS by default",
        overlay(volumes=[{"name": "share", "nfs": {"server": "nfs.example.com", "path": "/x"}}]),
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "NFS to an allowed server",
        overlay(volumes=[{"name": "share", "nfs": {"server": "nfs.example.com", "path": "/x"}}]),
        PERMISSIVE,
        None,
    ),
    (
        "NFS to another server",
        overlay(volumes=[{"name": "share", "nfs": {"server": "10.0.0.9", "path": "/x"}}]),
        PERMISSIVE,
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a sidecar as root",
        overlay(containers=[{"name": "s", "image": "busybox"}]),
        {},
        "spec.podTemplate.spec.containers",
    ),
    (
        "a sidecar as uid 0 in a non-root pod",
        overlay(
            securityContext=NON_ROOT, containers=[{"name": "s", "image": "b", "securityContext": {"runAsUser": 0}}]
        ),
        {},
        "spec.podTemplate.spec.containers",
    ),
    (
        "sidecars of a non-root pod",
        overlay(securityContext=NON_ROOT, containers=[{"name": "s", "image": "b"}]),
        {},
        None,
    ),
    (
        "an init container that escalates",
        overlay(
            initContainers=[
                {"name": "i", "image": "b", "securityContext": {"runAsUser": 5, "allowPrivilegeEscalation": True}}
            ]
        ),
        {},
        "spec.podTemplate.spec.containers",
    ),
    ("a service account", overlay(serviceAccountName="admin"), {}, "spec.podTemplate.spec.serviceAccountName"),
    ("a service account, allowed", overlay(serviceAccountName="admin"), PERMISSIVE, None),
    (
        "an image from elsewhere",
        {"runtime": {"image": "docker.io/evil/runtime:1"}},
        {"allowedImagePrefixes": ["registry.example.com/"]},
        "spec.runtime.image",
    ),
    (
        "images from the registry",
        {
            "runtime": {"image": "registry.example.com/specinfer-runtime:1"},
            **overlay(securityContext=NON_ROOT, containers=[{"name": "s", "image": "registry.example.com/s:1"}]),
        },
        {"allowedImagePrefixes": ["registry.example.com/"]},
        None,
    ),
    (
        "a method the default image's release predates",
        {},
        {"defaultEngineVersions": {"vllmAscend": "0.11.0rc0"}},
        "spec.speculative.method",
    ),
    ("a method the default image runs", {}, {"defaultEngineVersions": {"vllmAscend": "0.23.0"}}, None),
    (
        "an image of its own, with its own versions, beside an old default image",
        {"runtime": {"image": "registry.example.com/runtime:1", "engineVersions": {"vllmAscend": "0.23.0"}}},
        {"defaultEngineVersions": {"vllmAscend": "0.11.0rc0"}},
        None,
    ),
]


def spec_of(extra: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **copy.deepcopy(extra)}
