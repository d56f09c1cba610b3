"""Resources and tenant policies whose verdicts the operator, `specinfer validate` and the API server (the
tenant ValidatingAdmissionPolicy, bound to the policy) must agree on.

Each case is (name, what the spec adds to a valid base, the policy's spec, the field path refused: one, several
(a tuple, in the order the rules run) or None).
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


# The strict policy of the attacks that typed sources once slipped past: no host paths, emptyDir and configMap only.
STRICT = {"allowedHostPaths": [], "allowedVolumeTypes": ["emptyDir", "configMap"]}
# Host paths allowed (for writing too) where the volume type hostPath is not.
PATHS_NOT_TYPE = {"allowedHostPaths": [{"pathPrefix": "/data", "readOnly": False}], "allowedVolumeTypes": ["emptyDir"]}
DRAFT = {"method": "draft_model", "numSpeculativeTokens": 4}
HIDDEN = {"method": "extract_hidden_states", "numSpeculativeTokens": 1}
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
SECRET_ENV = {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "password"}}}
DIGEST = "sha256:" + "0" * 64
Refused = str | tuple[str, ...] | None


def overlay(**pod: Any) -> dict[str, Any]:
    return {"podTemplate": {"spec": pod}}


def draft(source: dict[str, Any]) -> dict[str, Any]:
    return {"speculative": {**DRAFT, "draftModel": {"name": "d", "source": source}}}


def hidden(storage: dict[str, Any]) -> dict[str, Any]:
    return {"speculative": {**HIDDEN, "hiddenStates": {"layerIds": [2], "storage": storage}}}


def sidecar(**container: Any) -> dict[str, Any]:
    return {"name": "s", "image": "b", "securityContext": NON_ROOT, **container}


def paths(path: Refused) -> list[str]:
    """The field paths a case's policy refuses, in the order the rules run."""
    return [path] if isinstance(path, str) else list(path or ())


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
    # Placement, scheduling, runtime class, grace period, AppArmor, Service type, NPU resource.
    (
        "a system priority class",
        {"placement": {"priorityClassName": "system-node-critical"}},
        {},
        "spec.placement.priorityClassName",
    ),
    ("a priority class of the cluster", {"placement": {"priorityClassName": "inference"}}, {}, None),
    (
        "a priority class not listed",
        {"placement": {"priorityClassName": "inference"}},
        {"allowedPriorityClasses": ["batch"]},
        "spec.placement.priorityClassName",
    ),
    (
        "a system priority class, listed",
        {"placement": {"priorityClassName": "system-cluster-critical"}},
        {"allowedPriorityClasses": ["system-cluster-critical"]},
        None,
    ),
    (
        "every taint tolerated on control-plane nodes",
        {"placement": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {CONTROL_PLANE: ""}}},
        {},
        ("spec.placement.tolerations", "spec.placement.nodeSelector"),
    ),
    (
        "every NoSchedule taint tolerated",
        {"placement": {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}},
        {},
        "spec.placement.tolerations",
    ),
    (
        "the control plane's taint tolerated",
        {"placement": {"tolerations": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}},
        {},
        "spec.placement.tolerations",
    ),
    (
        "control-plane nodes by affinity",
        {
            "placement": {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 1,
                                "preference": {"matchExpressions": [{"key": CONTROL_PLANE, "operator": "Exists"}]},
                            }
                        ]
                    }
                }
            }
        },
        {},
        "spec.placement.affinity.nodeAffinity",
    ),
    (
        "away from control-plane nodes",
        {
            "placement": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": CONTROL_PLANE, "operator": "DoesNotExist"}]}
                            ]
                        }
                    }
                }
            }
        },
        {},
        None,
    ),
    (
        "NPU taints tolerated",
        {"placement": {"tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}]}},
        {},
        None,
    ),
    (
        "control-plane nodes, every taint tolerated as allowed",
        {"placement": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {CONTROL_PLANE: ""}}},
        {"tolerateAllTaintsAllowed": True},
        "spec.placement.nodeSelector",
    ),
    (
        "control-plane nodes, as allowed",
        {"placement": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {CONTROL_PLANE: ""}}},
        {"tolerateAllTaintsAllowed": True, "controlPlaneAllowed": True},
        None,
    ),
    ("a runtime class", overlay(runtimeClassName="privileged-runc"), {}, "spec.podTemplate.spec.runtimeClassName"),
    ("a listed runtime class", overlay(runtimeClassName="ascend"), {"allowedRuntimeClasses": ["ascend"]}, None),
    ("another scheduler", {"placement": {"schedulerName": "my-scheduler"}}, {}, "spec.placement.schedulerName"),
    ("the default scheduler by name", {"placement": {"schedulerName": "default-scheduler"}}, {}, None),
    ("a listed scheduler", {"placement": {"schedulerName": "volcano"}}, {"allowedSchedulers": ["volcano"]}, None),
    (
        "an unconfined AppArmor profile for the engine",
        {
            "podTemplate": {
                "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/engine": "unconfined"}}
            }
        },
        {},
        "spec.podTemplate.metadata.annotations",
    ),
    (
        "the runtime's AppArmor profile",
        {
            "podTemplate": {
                "metadata": {
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/engine": "runtime/default"}
                }
            }
        },
        {},
        None,
    ),
    (
        "an endless grace period",
        overlay(terminationGracePeriodSeconds=2**53 - 1),
        {},
        "spec.podTemplate.spec.terminationGracePeriodSeconds",
    ),
    ("a grace period of two minutes", overlay(terminationGracePeriodSeconds=120), {}, None),
    ("a LoadBalancer Service", {"service": {"type": "LoadBalancer"}}, {}, "spec.service.type"),
    ("a NodePort Service", {"service": {"type": "NodePort"}}, {}, "spec.service.type"),
    (
        "a LoadBalancer Service, allowed",
        {"service": {"type": "LoadBalancer"}},
        {"allowedServiceTypes": ["ClusterIP", "LoadBalancer"]},
        None,
    ),
    (
        "another extended resource",
        {"resources": {"npuResourceName": "example.com/anything"}},
        {},
        "spec.resources.npuResourceName",
    ),
    ("a budget that lets no pod go", {"disruptionBudget": {"maxUnavailable": 0}}, {}, "spec.disruptionBudget"),
    (
        "a budget that keeps every pod",
        {"disruptionBudget": {"minAvailable": 1}},
        {},
        "spec.disruptionBudget",
    ),
    ("a budget that lets one pod go", {"disruptionBudget": {"maxUnavailable": 1}}, {}, None),
    (
        "a budget that lets no pod go, allowed",
        {"disruptionBudget": {"maxUnavailable": 0}},
        {"drainBlockingBudgetsAllowed": True},
        None,
    ),
    ("an Ascend 310P", {"resources": {"npuResourceName": "huawei.com/Ascend310P"}}, {}, None),
    # Image references are parsed before a prefix is compared.
    (
        "an image that climbs out of the prefix",
        {"runtime": {"image": "registry.example.com/ml/../../evil:1"}},
        {"allowedImagePrefixes": ["registry.example.com/ml/"]},
        "spec.runtime.image",
    ),
    (
        "an image with an empty path component",
        {"runtime": {"image": "registry.example.com/ml//evil:1"}},
        {"allowedImagePrefixes": ["registry.example.com/ml/"]},
        "spec.runtime.image",
    ),
    (
        "a sidecar image next to the prefix",
        overlay(containers=[sidecar(image="registry.example.com/ml-evil/s:1")]),
        {"allowedImagePrefixes": ["registry.example.com/ml"]},
        "spec.runtime.image",
    ),
    (
        "a registry whose name extends the prefix",
        {"runtime": {"image": "registry.example.com.evil.io/ml/x:1"}},
        {"allowedImagePrefixes": ["registry.example.com"]},
        "spec.runtime.image",
    ),
    (
        "another port of the registry",
        {"runtime": {"image": "registry.example.com:5000/ml/x:1"}},
        {"allowedImagePrefixes": ["registry.example.com"]},
        "spec.runtime.image",
    ),
    (
        "images under a prefix without a slash",
        {
            "runtime": {"image": f"registry.example.com/ml/x:1@{DIGEST}"},
            **overlay(containers=[sidecar(image="registry.example.com/ml:2")]),
        },
        {"allowedImagePrefixes": ["registry.example.com/ml"]},
        None,
    ),
    *(
        (
            f"a malformed image reference: {why}",
            {"runtime": {"image": image}},
            {"allowedImagePrefixes": ["r.example.com/"]},
            "spec.runtime.image",
        )
        for why, image in (
            ("capitals in the path", "r.example.com/ml/Evil:1"),
            ("an empty tag", "r.example.com/ml/x:"),
            ("a short digest", "r.example.com/ml/x@sha256:0123"),
            ("a separator at the end of a component", "r.example.com/ml-/x:1"),
        )
    ),
    (
        "an image by digest, under a registry's prefix",
        {"runtime": {"image": f"r.example.com/ml/x@{DIGEST}"}},
        {"allowedImagePrefixes": ["r.example.com/"]},
        None,
    ),
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
        "another team's pull Secret",
        {"runtime": {"imagePullSecrets": ["their-registry"]}},
        {},
        "spec.runtime.imagePullSecrets",
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
        {"runtime": {"envFrom": [{"secretRef": {"name": "team-a-db"}}], "imagePullSecrets": ["team-a-registry"]}},
        {"allowedSecrets": ["team-a-*"]},
        None,
    ),
    (
        "every Secret, as allowed",
        overlay(volumes=[{"name": "s", "secret": {"secretName": "anything"}}]),
        {"allowedSecrets": ["*"]},
        None,
    ),
]


def spec_of(extra: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **copy.deepcopy(extra)}
