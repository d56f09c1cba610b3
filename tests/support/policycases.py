"""Resources and tenant policies whose verdicts the operator, `specinfer validate` and the API server (the
tenant ValidatingAdmissionPolicy, bound to the policy) must agree on.

Each case is (name, what the spec adds to a valid base, the policy's spec, the field path refused: one, several
(a tuple, in the order the rules run) or None).
"""

from __future__ import annotations

from typing import Any

from tests.support.policycases_pods import POD_CASES
from tests.support.policyspecs import (
    DRIVER,
    DRIVER_MOUNT,
    NON_ROOT,
    PATHS_NOT_TYPE,
    PERMISSIVE,
    SECRET_ENV,
    STRICT,
    Refused,
    draft,
    hidden,
    overlay,
    sidecar,
)

CASES: list[tuple[str, dict[str, Any], dict[str, Any], Refused]] = [
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
    # Typed sources become volumes: they obey the volume types and host paths the pod template's volumes do.
    (
        "a model on a PVC, PVCs not allowed",
        {"model": {"name": "m", "source": {"pvc": {"claimName": "models"}}}},
        STRICT,
        "spec.model.source.pvc",
    ),
    (
        "a draft on a PVC, PVCs not allowed",
        draft({"pvc": {"claimName": "models"}}),
        STRICT,
        "spec.speculative.draftModel.source.pvc",
    ),
    (
        "the Hub cache on a claim, PVCs not allowed",
        {"resources": {"modelCacheClaim": "cache"}},
        STRICT,
        "spec.resources.modelCacheClaim",
    ),
    (
        "hidden states on a PVC, PVCs not allowed",
        hidden({"pvc": {"claimName": "out"}}),
        STRICT,
        "spec.speculative.hiddenStates.storage.pvc",
    ),
    (
        "a model on an allowed host path, host paths not a volume type",
        {"model": {"name": "m", "source": {"hostPath": {"path": "/data/m"}}}},
        PATHS_NOT_TYPE,
        "spec.model.source.hostPath",
    ),
    (
        "a draft on an allowed host path, host paths not a volume type",
        draft({"hostPath": {"path": "/data/d"}}),
        PATHS_NOT_TYPE,
        "spec.speculative.draftModel.source.hostPath",
    ),
    (
        "hidden states on an allowed host path, host paths not a volume type",
        hidden({"hostPath": {"path": "/data/h"}}),
        PATHS_NOT_TYPE,
        "spec.speculative.hiddenStates.storage.hostPath",
    ),
    (
        "a host path volume at an allowed path, host paths not a volume type",
        overlay(volumes=[{"name": "d", "hostPath": {"path": "/data/x"}}]),
        PATHS_NOT_TYPE,
        "spec.podTemplate.spec.volumes",
    ),
    (
        "sources on PVCs by default",
        {**draft({"pvc": {"claimName": "models"}}), "model": {"name": "m", "source": {"pvc": {"claimName": "models"}}}},
        {},
        None,
    ),
    ("hidden states on a writable host path", hidden({"hostPath": {"path": "/data/h"}}), PERMISSIVE, None),
    (
        "a directory created under a read-only prefix",
        {
            "runtime": {"volumeMounts": [{**DRIVER_MOUNT, "mountPath": "/opt/new"}]},
            **overlay(
                volumes=[{**DRIVER, "hostPath": {"path": "/usr/local/Ascend/driver/new", "type": "DirectoryOrCreate"}}]
            ),
        },
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a file created under a read-only prefix, mounted by no one",
        overlay(volumes=[{"name": "f", "hostPath": {"path": "/usr/local/dcmi/x", "type": "FileOrCreate"}}]),
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a directory created under a writable prefix",
        overlay(volumes=[{"name": "d", "hostPath": {"path": "/data/new", "type": "DirectoryOrCreate"}}]),
        PERMISSIVE,
        None,
    ),
    (
        "a CSI volume by default",
        overlay(volumes=[{"name": "c", "csi": {"driver": "secrets-store.csi.k8s.io"}}]),
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a CSI volume of a driver not listed",
        overlay(volumes=[{"name": "c", "csi": {"driver": "evil.example.com"}}]),
        {**PERMISSIVE, "allowedCsiDrivers": ["nfs.csi.k8s.io"]},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a CSI volume of a listed driver",
        overlay(volumes=[{"name": "c", "csi": {"driver": "nfs.csi.k8s.io"}}]),
        {**PERMISSIVE, "allowedCsiDrivers": ["nfs.csi.k8s.io"]},
        None,
    ),
    *POD_CASES,
    # Secrets: only those the policy allows, wherever a spec names one.
    ("a Secret of the namespace in the engine's env", {"runtime": {"env": [SECRET_ENV]}}, {}, "spec.runtime.env"),
    (
        "a Secret of the namespace as the engine's envFrom",
        {"runtime": {"envFrom": [{"secretRef": {"name": "db"}}]}},
        {},
        "spec.runtime.envFrom",
    ),
    ("a sidecar's Secret", overlay(containers=[sidecar(env=[SECRET_ENV])]), {}, "spec.podTemplate.spec.containers"),
    (
        "an init container's Secret",
        overlay(initContainers=[sidecar(envFrom=[{"secretRef": {"name": "db"}}])]),
        {},
        "spec.podTemplate.spec.initContainers",
    ),
    (
        "a Secret volume",
        overlay(volumes=[{"name": "s", "secret": {"secretName": "db-password"}}]),
        {},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a CSI driver's Secret",
        overlay(volumes=[{"name": "c", "csi": {"driver": "nfs.csi.k8s.io", "nodePublishSecretRef": {"name": "db"}}}]),
        {**PERMISSIVE, "allowedCsiDrivers": ["nfs.csi.k8s.io"]},
        "spec.podTemplate.spec.volumes",
    ),
    (
        "a pull Secret, none being allowed by default",
        {"runtime": {"imagePullSecrets": [{"name": "registry"}]}},
        {},
        "spec.runtime.imagePullSecrets",
    ),
    (
        "a pull Secret the policy lists among application Secrets only",
        {"runtime": {"imagePullSecrets": [{"name": "team-a-registry"}]}},
        {"allowedSecrets": ["*"]},
        "spec.runtime.imagePullSecrets",
    ),
    (
        "another team's pull Secret",
        {"runtime": {"imagePullSecrets": [{"name": "team-a-registry"}, {"name": "team-b-registry"}]}},
        {"allowedImagePullSecrets": ["team-a-*"]},
        "spec.runtime.imagePullSecrets",
    ),
    (
        "pull Secrets by name and by prefix",
        {"runtime": {"imagePullSecrets": [{"name": "registry"}, {"name": "team-a-mirror"}]}},
        {"allowedImagePullSecrets": ["registry", "team-a-*"]},
        None,
    ),
    (
        "a pull Secret allowed does not allow it as an application Secret",
        {"runtime": {"envFrom": [{"secretRef": {"name": "registry"}}]}},
        {"allowedImagePullSecrets": ["registry"]},
        "spec.runtime.envFrom",
    ),
    (
        "a Secret as the Hub token",
        {"model": {"name": "m", "source": {"huggingFace": {"tokenSecretRef": {"name": "db"}}}}},
        {},
        "spec.model.source.huggingFace.tokenSecretRef.name",
    ),
    (
        "a Secret as the draft's Hub token",
        draft({"huggingFace": {"tokenSecretRef": {"name": "db"}}}),
        {},
        "spec.speculative.draftModel.source.huggingFace.tokenSecretRef.name",
    ),
    (
        "the documented Secrets",
        {
            "runtime": {
                "env": [{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "k"}}}]
            },
            "model": {"name": "m", "source": {"huggingFace": {"tokenSecretRef": {"name": "hf-token"}}}},
        },
        {},
        None,
    ),
    (
        "Secrets by prefix",
        {
            "runtime": {
                "envFrom": [{"secretRef": {"name": "team-a-db"}}],
                "imagePullSecrets": [{"name": "team-a-registry"}],
            }
        },
        {"allowedSecrets": ["team-a-*"], "allowedImagePullSecrets": ["team-a-*"]},
        None,
    ),
    (
        "every Secret, as allowed",
        overlay(volumes=[{"name": "s", "secret": {"secretName": "anything"}}]),
        {"allowedSecrets": ["*"]},
        None,
    ),
]
