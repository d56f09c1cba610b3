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

from specinfer_operator.api.container import PullPolicy
from specinfer_operator.api.labels import (
    CONFIG_HASH_ANNOTATION,
    VERSION_LABEL,
    labels,
    propagated,
    selector_labels,
    version_label,
)
from specinfer_operator.api.metadata import ANNOTATIONS_MAX_BYTES, annotation_bytes
from specinfer_operator.api.placement import PlacementSettings, Toleration
from specinfer_operator.api.resource import API_VERSION, KIND, SpeculativeInference, SpeculativeInferenceSpec
from specinfer_operator.api.service import INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND
from specinfer_operator.render import workload
from specinfer_operator.render.autoscaler import autoscaler, scaled_object
from specinfer_operator.render.learning import claim_name
from specinfer_operator.render.pod import CONFIG_FILE, pod_template
from specinfer_runtime.engine import ENGINE_PORT, EngineSpec
from specinfer_runtime.tokens import SCHEDULE_FIELD
from specinfer_runtime.validation import Problem

DEFAULT_RUNTIME_IMAGE = "ghcr.io/specinfer/specinfer-runtime:0.2.0"
DEFAULT_NPU_RESOURCE = "huawei.com/Ascend910"
DEFAULT_TRAINER_IMAGE = "ghcr.io/specinfer/specinfer-trainer:0.2.0"


@dataclass(frozen=True)
class RenderDefaults:
    """Operator-wide defaults for what a resource leaves unset."""

    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    npu_resource_name: str = DEFAULT_NPU_RESOURCE
    keda_prometheus: str = ""  # the Prometheus KEDA queries: spec.autoscaling as a ScaledObject, not an HPA
    trainer_image: str = DEFAULT_TRAINER_IMAGE  # spec.learning's Jobs
    # Pull policies of the two default images; a resource's own image is pulled by its spec.runtime.imagePullPolicy.
    runtime_pull_policy: PullPolicy = "IfNotPresent"
    trainer_pull_policy: PullPolicy = "IfNotPresent"
    # The engine and training pods' tolerations and nodeSelector where spec.placement sets none (placement()).
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # Pull Secrets of every engine and training pod, after the resource's own (the chart's imagePullSecrets).
    image_pull_secrets: tuple[str, ...] = ()


def placement(spec: SpeculativeInferenceSpec, defaults: RenderDefaults) -> PlacementSettings:
    """spec.placement with the operator's tolerations and nodeSelector (e.g. the NPU nodes' taint) where it sets
    none. The resource wins: its own list or map replaces the operator's whole, and an empty one opts out, so that
    a resource's pods run where its spec says without merging rules to learn."""
    own = spec.placement
    tolerations = own.tolerations if own.tolerations is not None else list(defaults.tolerations) or None
    node_selector = own.node_selector if own.node_selector is not None else dict(defaults.node_selector) or None
    return own.model_copy(update={"tolerations": tolerations, "node_selector": node_selector})


def pod_spec(spec: SpeculativeInferenceSpec, defaults: RenderDefaults) -> SpeculativeInferenceSpec:
    """The spec its engine pods are rendered from: placement()'s tolerations and nodeSelector, and without an image
    of its own the default image's pull policy."""
    runtime = spec.runtime
    if runtime.image is None:
        runtime = runtime.model_copy(update={"image_pull_policy": defaults.runtime_pull_policy})
    return spec.model_copy(update={"runtime": runtime, "placement": placement(spec, defaults)})


def engine_config_json(engine: EngineSpec) -> str:
    """Canonical JSON of the engine config: the file the runtime reads, and what the hash covers."""
    return json.dumps(engine.dump(), sort_keys=True, separators=(",", ":"))


def _identity(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any]:
    runtime = cr.spec.runtime
    identity: dict[str, Any] = {
        "engine": json.loads(engine_config_json(cr.spec.engine())),
        "image": runtime.image or defaults.runtime_image,
        "env": [var.dump() for var in runtime.env or []],
    }
    # What else reaches the engine process, named only when set: an unset field leaves the hash as it was.
    optional = {
        "envFrom": [source.dump() for source in runtime.env_from or []],
        "volumeMounts": [mount.dump() for mount in runtime.volume_mounts or []],
        "podTemplate": cr.spec.pod_template.dump() if cr.spec.pod_template else None,
        "samples": cr.spec.learning.sampling.dump() if cr.spec.learning else None,  # the recorder's settings
    }
    return identity | {k: v for k, v in optional.items() if v}


def _digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]


def config_hash(cr: SpeculativeInference, defaults: RenderDefaults) -> str:
    """A configuration's identity: the engine config and the image, environment, mounts and pod template
    overlay that run it, which decide how the pods serve and speculate. A change of any of them is a new
    configuration: it goes through a canary, and its failure rolls back to the last good one."""
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


def edit_hash(cr: SpeculativeInference) -> str:
    """The spec as a person edits it: all of it but replicas and autoscaling, which the autoscaler's scale
    events write and steer. A rolled-back configuration is tried again when this moves, not on a scale."""
    return _digest(cr.spec.model_dump(mode="json", by_alias=True, exclude={"replicas", "autoscaling"}))


def label_selector(labels: Mapping[str, str]) -> str:
    """Labels as a selector string, as list and watch requests take them."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def child_annotations(cr: SpeculativeInference, own: Mapping[str, str] | None = None) -> dict[str, str]:
    """A child's annotations: its `own`, which win, over the resource's (all but the reserved ones). The
    resource's are left off a child they would take past the API server's limit (the Service's own can hold
    140 KiB); annotation_warnings says so."""
    inherited = {**propagated(cr.metadata.annotations), **(own or {})}
    return inherited if annotation_bytes(inherited) <= ANNOTATIONS_MAX_BYTES else dict(own or {})


def annotation_warnings(cr: SpeculativeInference) -> list[Problem]:
    """The resource's annotations that the Service cannot carry beside spec.service.annotations."""
    size = annotation_bytes({**propagated(cr.metadata.annotations), **(cr.spec.service.annotations or {})})
    if size > ANNOTATIONS_MAX_BYTES:
        return [
            Problem(
                "metadata.annotations",
                f"with spec.service.annotations they hold {size} bytes, above the {ANNOTATIONS_MAX_BYTES} an "
                "object may carry: the Service gets only its own annotations; shorten either",
                "kubernetes",
            )
        ]
    return []


def owned_metadata(cr: SpeculativeInference, name: str, own: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A child's metadata: its name, the resource's namespace, the resource's labels (but the reserved
    ones, labels.propagated) under the operator's `own` (the engines' labels by default) and its version,
    the resource's annotations, and the resource as its owner. No selector reads the resource's labels."""
    meta: dict[str, Any] = {"name": name}
    if cr.metadata.namespace:
        meta["namespace"] = cr.metadata.namespace
    meta["labels"] = {
        **propagated(cr.metadata.labels),
        **(labels(cr.metadata.name) if own is None else own),
        VERSION_LABEL: version_label(),
    }
    annotations = child_annotations(cr)
    if annotations:
        meta["annotations"] = annotations
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


def engine_config_map_name(name: str, digest: str) -> str:
    """One ConfigMap per configuration: a rollout mounts a new one and a rollback finds the old one."""
    return f"{name}-engine-{digest}"


def engine_config_map(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any]:
    engine = cr.spec.engine()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(cr, engine_config_map_name(cr.metadata.name, config_hash(cr, defaults))),
        "immutable": True,
        "data": {CONFIG_FILE: engine_config_json(engine)},
    }


def engines(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any]:
    """The workload of the engine pods: a Deployment, or a LeaderWorkerSet of groups over several nodes."""
    spec, name = cr.spec, cr.metadata.name
    digest = config_hash(cr, defaults)
    template = pod_template(
        pod_spec(spec, defaults),
        name,
        engine_config_map_name(name, digest),
        spec.runtime.image or defaults.runtime_image,
        spec.resources.npu_resource_name or defaults.npu_resource_name,
        {CONFIG_HASH_ANNOTATION: digest},
        propagated(cr.metadata.labels),
        defaults.image_pull_secrets,
    )
    rolling = {"maxUnavailable": spec.rollout.max_unavailable, "maxSurge": spec.rollout.max_surge}
    group = spec.parallelism.group_size()
    if group > 1:
        metadata = owned_metadata(cr, workload.object_name(workload.LEADER_WORKER_SET, name))
        return workload.leader_worker_set(metadata, spec.replicas, group, rolling, template)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": owned_metadata(cr, name),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling},
            "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
            "revisionHistoryLimit": 3,
            "template": template,
        },
    }


def service_selector(cr: SpeculativeInference) -> dict[str, str]:
    """The engine pods that serve the API: all of them, or the leaders of groups."""
    leaders = {workload.WORKER_INDEX_LABEL: "0"} if cr.spec.parallelism.group_size() > 1 else {}
    return {**selector_labels(cr.metadata.name), **leaders}


def service(cr: SpeculativeInference) -> dict[str, Any]:
    name = cr.metadata.name
    metadata = owned_metadata(cr, name)
    annotations = child_annotations(cr, cr.spec.service.annotations)
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": cr.spec.service.type,
            "selector": service_selector(cr),
            "ports": [{"name": "http", "port": cr.spec.service.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def disruption_budget(cr: SpeculativeInference) -> dict[str, Any] | None:
    """The PodDisruptionBudget of spec.disruptionBudget over every engine pod (canary pods included, and every
    pod of a group: evicting one takes its group down, whose pods are then unavailable until it is back, so a
    budget of one pod is one group). Unset, maxUnavailable 1 once the resource may run several engines: a
    single engine's budget would only block drains or allow what no budget allows."""
    budget = cr.spec.disruption_budget
    if (budget is None and not cr.spec.several()) or (budget is not None and not budget.enabled):
        return None
    name = cr.metadata.name
    terms = budget.terms() if budget is not None else {"maxUnavailable": 1}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owned_metadata(cr, name),
        "spec": {"selector": {"matchLabels": selector_labels(name)}, **terms},
    }


def resource_autoscaler(cr: SpeculativeInference, defaults: RenderDefaults) -> dict[str, Any] | None:
    """The autoscaler of spec.autoscaling, scaling this resource (render/autoscaler.py): KEDA's ScaledObject
    where the operator is given KEDA's Prometheus, else a HorizontalPodAutoscaler."""
    settings = cr.spec.autoscaling
    if settings is None:
        return None
    metadata = owned_metadata(cr, cr.metadata.name)
    if defaults.keda_prometheus:
        return scaled_object(settings, metadata, defaults.keda_prometheus)
    return autoscaler(settings, cr.metadata.name, metadata)


def inference_pool(cr: SpeculativeInference) -> dict[str, Any] | None:
    """The InferencePool of spec.inferencePool: the pods the Service reaches (stable and canary alike, the
    leaders of groups) on the engine's own port, as the Gateway sends to pods directly."""
    pool = cr.spec.inference_pool
    if pool is None:
        return None
    name, picker = cr.metadata.name, pool.endpoint_picker_ref
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": owned_metadata(cr, name),
        "spec": {
            "selector": {"matchLabels": service_selector(cr)},
            "targetPorts": [{"number": ENGINE_PORT}],
            "appProtocol": "http",  # vLLM's OpenAI API is HTTP/1.1
            "endpointPickerRef": {
                "group": picker.group,
                "kind": picker.kind,
                "name": picker.name_for(name),
                "port": {"number": picker.port},
                "failureMode": picker.failure_mode,
            },
        },
    }


def learning_claim(cr: SpeculativeInference) -> dict[str, Any] | None:
    """The claim of spec.learning's samples and drafts, owned by the resource: it goes when the resource does."""
    settings = cr.spec.learning
    if settings is None:
        return None
    storage = settings.storage
    spec: dict[str, Any] = {"accessModes": [storage.access_mode], "resources": {"requests": {"storage": storage.size}}}
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": owned_metadata(cr, claim_name(cr.metadata.name)),
        "spec": spec,
    }


def is_pool(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == INFERENCE_POOL_KIND


def render(cr: SpeculativeInference, defaults: RenderDefaults | None = None) -> list[dict[str, Any]]:
    """All children, in apply order: the learning claim and the config first, so a new pod never waits for
    them; the InferencePool last (reconcile applies it apart: it must never be in the way of the others)."""
    defaults = defaults or RenderDefaults()
    claim = learning_claim(cr)
    children = [*([claim] if claim else []), engine_config_map(cr, defaults), engines(cr, defaults), service(cr)]
    optional = (disruption_budget(cr), resource_autoscaler(cr, defaults), inference_pool(cr))
    return children + [child for child in optional if child is not None]
