"""Render a SpeculativeInference into its child objects (pure: same input, same objects).

The engine config goes into an immutable ConfigMap whose name carries the config hash (config_hash), and
the pod template references it by name: any config change changes the template and rolls out, and a pod
of the old ReplicaSet that restarts mid-rollout still mounts the config it was started with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.resource import API_VERSION, KIND, SpeculativeInference
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.engine import ENGINE_PORT, EngineSpec
from specinfer_runtime.sources import (
    DRAFT_TOKEN_ENV,
    HF_HOME_ENV,
    HF_TOKEN_ENV,
    HIDDEN_STATES_PATH,
    MODEL_ROOT,
    HostPathSource,
    PersistentVolumeClaimSource,
    SecretKeyReference,
)
from specinfer_runtime.tokens import SCHEDULE_FIELD

DEFAULT_RUNTIME_IMAGE = "ghcr.io/specinfer/specinfer-runtime:0.1.0"
DEFAULT_NPU_RESOURCE = "huawei.com/Ascend910"
CONFIG_DIR = "/etc/specinfer"
CONFIG_FILE = "engine.json"
HF_HOME = "/var/cache/huggingface"
MANAGER = "specinfer-operator"
CONFIG_HASH_ANNOTATION = "specinfer.io/config-hash"


@dataclass(frozen=True)
class RenderDefaults:
    """Operator-wide defaults for what a resource leaves unset."""

    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    npu_resource_name: str = DEFAULT_NPU_RESOURCE


def engine_config_json(engine: EngineSpec) -> str:
    """Canonical JSON of the engine config: the file the runtime reads, and what the hash covers."""
    return json.dumps(engine.dump(), sort_keys=True, separators=(",", ":"))


def _identity(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any]:
    return {
        "engine": json.loads(engine_config_json(cr.spec.engine())),
        "image": cr.spec.runtime.image or defaults.runtime_image,
        "env": [var.dump() for var in cr.spec.runtime.env or []],
    }


def _digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]


def config_hash(cr: SpeculativeInference, defaults: RenderDefaults) -> str:
    """A configuration's identity: the engine config and the image and environment that run it, which
    decide how the pods serve and speculate. A change of any of them is a new configuration: it goes
    through a canary, and its failure rolls back to the last good one."""
    return _digest(_identity(cr, defaults))


def family_hash(cr: SpeculativeInference, defaults: RenderDefaults) -> str:
    """The configuration's identity but for K and its schedule: configurations that differ only in how many
    tokens they draft (capture sizes computed from K are rendered, not part of the config). Their figures
    describe one acceptance profile, which tuning learns from, and a canary between them is judged on
    speed, not on acceptance."""
    identity = _identity(cr, defaults)
    speculative = identity["engine"]["speculative"]
    for key in ("numSpeculativeTokens", SCHEDULE_FIELD):
        speculative.pop(key, None)
    return _digest(identity)


def label_selector(labels: Mapping[str, str]) -> str:
    """Labels as a selector string, as list and watch requests take them."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def selector_labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "specinfer-engine", "app.kubernetes.io/instance": name}


def _labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/component": "engine",
        "app.kubernetes.io/managed-by": MANAGER,
    }


def _metadata(cr: SpeculativeInference, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if cr.metadata.namespace:
        meta["namespace"] = cr.metadata.namespace
    meta["labels"] = _labels(cr.metadata.name)
    if cr.metadata.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": cr.metadata.name,
                "uid": cr.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


Volume = PersistentVolumeClaimSource | HostPathSource


def _volume(name: str, source: Volume, read_only: bool) -> dict[str, Any]:
    if isinstance(source, PersistentVolumeClaimSource):
        return {
            "name": name,
            "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": read_only},
        }
    kind = "Directory" if read_only else "DirectoryOrCreate"
    return {"name": name, "hostPath": {"path": source.path, "type": kind}}


def _mount(name: str, path: str, source: Volume, read_only: bool) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": name, "mountPath": path, "readOnly": read_only}
    if isinstance(source, PersistentVolumeClaimSource) and source.sub_path:
        mount["subPath"] = source.sub_path
    return mount


@dataclass
class Storage:
    """What the models and the hidden-state output add to the pod."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, path: str, source: Volume, read_only: bool) -> None:
        self.volumes.append(_volume(name, source, read_only))
        self.mounts.append(_mount(name, path, source, read_only))


def _secret_env(name: str, secret: SecretKeyReference) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}


def storage(spec: EngineSpec) -> Storage:
    """Volume models are mounted under /models/<role>. Hub models share a cache; vLLM downloads them with
    the target's token (HF_TOKEN), and a draft with a token of its own is downloaded into /models/draft
    by specinfer-runtime with that token (SPECINFER_DRAFT_HF_TOKEN)."""
    out = Storage()
    from_hub = False
    for role, ref in (("target", spec.model), ("draft", spec.speculative.draft_model)):
        if ref is None:
            continue
        volume = ref.source.volume() if ref.source else None
        token = ref.hub_token()
        if volume is not None:
            out.add(f"model-{role}", f"{MODEL_ROOT}/{role}", volume, read_only=True)
        elif role == "draft" and token is not None:
            out.volumes.append({"name": "model-draft", "emptyDir": {}})
            out.mounts.append({"name": "model-draft", "mountPath": f"{MODEL_ROOT}/draft"})
            out.env.append(_secret_env(DRAFT_TOKEN_ENV, token))
        else:
            from_hub = True
            if token is not None:
                out.env.append(_secret_env(HF_TOKEN_ENV, token))
    if from_hub:
        out.volumes.append({"name": "hf-cache", "emptyDir": {}})
        out.mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
        out.env.append({"name": HF_HOME_ENV, "value": HF_HOME})
    hidden = spec.speculative.hidden_states
    if hidden is not None:
        target = hidden.storage.pvc or hidden.storage.host_path
        if target is not None:
            out.add("hidden-states", HIDDEN_STATES_PATH, target, read_only=False)
    return out


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def engine_config_map_name(name: str, digest: str) -> str:
    """One ConfigMap per configuration: a rollout mounts a new one and a rollback finds the old one."""
    return f"{name}-engine-{digest}"


def engine_config_map(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any]:
    engine = cr.spec.engine()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(cr, engine_config_map_name(cr.metadata.name, config_hash(cr, defaults))),
        "immutable": True,
        "data": {CONFIG_FILE: engine_config_json(engine)},
    }


def deployment(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any]:
    spec, name = cr.spec, cr.metadata.name
    engine = spec.engine()
    digest = config_hash(cr, defaults)
    npu = spec.resources.npu_resource_name or defaults.npu_resource_name
    limits: dict[str, Any] = {npu: str(spec.npus_per_pod())}
    if spec.resources.cpu:
        limits["cpu"] = spec.resources.cpu
    if spec.resources.memory:
        limits["memory"] = spec.resources.memory
    models = storage(engine)
    volumes = [
        {"name": "engine-config", "configMap": {"name": engine_config_map_name(name, digest)}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shared_memory}},
        *models.volumes,
    ]
    mounts = [
        {"name": "engine-config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        *models.mounts,
    ]
    env = models.env + [var.dump() for var in spec.runtime.env or []]
    container: dict[str, Any] = {
        "name": "engine",
        "image": spec.runtime.image or defaults.runtime_image,
        "imagePullPolicy": spec.runtime.image_pull_policy,
        "command": ["specinfer-runtime", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}", "--"],
        "args": vllm_argv(engine),
        "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "env": env,
        "resources": {"requests": dict(limits), "limits": limits},
        "volumeMounts": mounts,
        # Model loading takes minutes: the startup probe allows an hour before liveness takes over.
        "startupProbe": _probe("/health", 10, 360),
        "readinessProbe": _probe("/health", 5, 3),
        "livenessProbe": _probe("/health", 15, 4),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False},
    }
    if not env:
        del container["env"]
    placement = spec.placement
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": 60,
    }
    optional = {
        "nodeSelector": placement.node_selector,
        "tolerations": [t.dump() for t in placement.tolerations] if placement.tolerations else None,
        "affinity": placement.affinity.dump() if placement.affinity else None,
        "schedulerName": placement.scheduler_name,
        "priorityClassName": placement.priority_class_name,
        "imagePullSecrets": [{"name": s} for s in spec.runtime.image_pull_secrets or []] or None,
    }
    pod_spec.update({k: v for k, v in optional.items() if v})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(cr, name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxUnavailable": spec.rollout.max_unavailable,
                    "maxSurge": spec.rollout.max_surge,
                },
            },
            "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": {"labels": _labels(name), "annotations": {CONFIG_HASH_ANNOTATION: digest}},
                "spec": pod_spec,
            },
        },
    }


def service(cr: SpeculativeInference) -> dict[str, Any]:
    name = cr.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cr, name),
        "spec": {
            "type": cr.spec.service.type,
            "selector": selector_labels(name),
            "ports": [{"name": "http", "port": cr.spec.service.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render(cr: SpeculativeInference, defaults: RenderDefaults | None = None) -> list[dict[str, Any]]:
    """All children, in apply order: the config first, so a new pod never waits for it."""
    defaults = defaults or RenderDefaults()
    return [engine_config_map(cr, defaults), deployment(cr, defaults), service(cr)]
