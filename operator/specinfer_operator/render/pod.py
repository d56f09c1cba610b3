"""The engine pods' template (pure): the engine container, the operator's volumes, and the user's
pod template overlay merged under them.

What the operator sets wins wherever both set something: the selector labels and the config-hash
annotation, the engine container (its command, arguments, ports, probes, resources and the mounts of
the engine config, models and caches), the operator's volumes, and spec.placement. The overlay adds
its volumes, sidecars and pod settings beside them (docs/pod-template.md lists the fields).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specinfer_operator.api.container import CONFIG_DIR, ENGINE_CONTAINER, ProbeTiming
from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION, TRACK_LABEL, labels, selector_labels
from specinfer_operator.api.overlay import Container, PodMetadata, PodSpecOverlay, PodTemplate
from specinfer_operator.api.resource import SpeculativeInferenceSpec
from specinfer_operator.render.learning import Recorder, recorder
from specinfer_operator.render.sizing import engine_resources
from specinfer_operator.render.storage import Storage, storage
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.drain import MARGIN_SECONDS
from specinfer_runtime.engine import ENGINE_PORT, EngineSpec
from specinfer_runtime.multinode import POD_IP_ENV
from specinfer_runtime.validation import Problem

CONFIG_FILE = "engine.json"
TERMINATION_GRACE_SECONDS = 60
# The engine needs no privilege: the Ascend device plugin hands it its NPUs. With these (and the pod's
# RuntimeDefault seccomp profile) an engine pod passes Pod Security `baseline`, and `restricted` once it runs
# as a user other than root (spec.podTemplate.spec.securityContext).
NO_CAPABILITIES = {"capabilities": {"drop": ["ALL"]}}
ENGINE_SECURITY = {"allowPrivilegeEscalation": False, "privileged": False, **NO_CAPABILITIES}
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}
# (periodSeconds, failureThreshold) of each probe when spec.probes leaves it unset.
PROBE_DEFAULTS = {"startup": (10, 360), "readiness": (5, 3), "liveness": (15, 4)}
PROBE_TIMEOUT_SECONDS = 5
HOSTNAME = "kubernetes.io/hostname"


def _probe(kind: str, timing: ProbeTiming | None) -> dict[str, Any]:
    period, failures = PROBE_DEFAULTS[kind]
    timing = timing or ProbeTiming()
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": timing.period_seconds or period,
        "timeoutSeconds": timing.timeout_seconds or PROBE_TIMEOUT_SECONDS,
        "failureThreshold": timing.failure_threshold or failures,
    }


def engine_requests(spec: SpeculativeInferenceSpec, npu: str) -> dict[str, str]:
    """What each engine pod's engine container requests of its node, the NPUs included."""
    requests: dict[str, str] = engine_resources(spec, npu, storage(spec.engine(), spec.resources).downloads())[
        "requests"
    ]
    return requests


def grace_seconds(spec: SpeculativeInferenceSpec) -> int:
    """The engine pods' termination grace period: the overlay's, else TERMINATION_GRACE_SECONDS."""
    extra = spec.pod_template.spec if spec.pod_template else None
    found = extra.termination_grace_period_seconds if extra else None
    return TERMINATION_GRACE_SECONDS if found is None else found


def drain(spec: SpeculativeInferenceSpec) -> dict[str, Any]:
    """The engine's preStop (specinfer_runtime.drain): the requests in flight finish before SIGTERM, within
    the grace period less the time vLLM needs to exit."""
    timeout = max(0, grace_seconds(spec) - MARGIN_SECONDS)
    command = ["specinfer-drain", "--port", str(ENGINE_PORT), "--timeout", str(timeout)]
    return {"preStop": {"exec": {"command": command}}}


def engine_container(
    spec: SpeculativeInferenceSpec, engine: EngineSpec, image: str, npu: str, models: Storage, samples: Recorder
) -> dict[str, Any]:
    """The engine container (`engine` is spec.engine()); the user's mounts and environment come after the
    operator's."""
    runtime, probes = spec.runtime, spec.probes
    group = [{"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    env = (
        (group if engine.parallelism.group_size() > 1 else [])
        + models.env
        + samples.env
        + [var.render() for var in runtime.env or []]
    )
    container: dict[str, Any] = {
        "name": ENGINE_CONTAINER,
        "image": image,
        "imagePullPolicy": runtime.image_pull_policy,
        "command": ["specinfer-runtime", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}", "--"],
        "args": vllm_argv(engine),
        "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "env": env,
        "envFrom": [source.dump() for source in runtime.env_from or []],
        "resources": engine_resources(spec, npu, models.downloads()),
        "volumeMounts": [
            {"name": "engine-config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
            *models.mounts,
            *samples.mounts,
            *(mount.dump() for mount in runtime.volume_mounts or []),
        ],
        "startupProbe": _probe("startup", probes.startup if probes else None),
        "readinessProbe": _probe("readiness", probes.readiness if probes else None),
        "livenessProbe": _probe("liveness", probes.liveness if probes else None),
        "lifecycle": drain(spec),
        "terminationMessagePath": "/dev/termination-log",
        # What specinfer-runtime writes, and never a log tail: logs may hold what the pod reads from Secrets.
        "terminationMessagePolicy": "File",
        "securityContext": ENGINE_SECURITY,
    }
    return {k: v for k, v in container.items() if v != []}


def sidecar(container: Container) -> dict[str, Any]:
    """A sidecar or init container of the overlay: no capabilities, and no privilege escalation unless it
    asks for it (which the tenant policy allows or refuses)."""
    out = container.dump()
    out["securityContext"] = {"allowPrivilegeEscalation": False, **out.get("securityContext", {}), **NO_CAPABILITIES}
    return out


def spread(spec: SpeculativeInferenceSpec, name: str) -> list[dict[str, Any]]:
    """spec.placement's topology spread constraints, counting the resource's engine pods unless they say which;
    unset, one over nodes (placement.spreadAcrossNodes), whatever the replicas: a template that changed with
    them would restart every engine on a scale. A single pod has nothing to spread from; the pods of groups
    spread all together, so a node holds a pod of as few groups as the nodes allow and its loss takes those."""
    placement, counted = spec.placement, {"labelSelector": {"matchLabels": selector_labels(name)}}
    if placement.topology_spread_constraints:
        return [{**counted, **c.dump()} for c in placement.topology_spread_constraints]
    anti = placement.affinity.pod_anti_affinity if placement.affinity else None
    if not placement.spread_across_nodes or anti:
        return []
    return [{**counted, "maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway"}]


def pull_secrets(spec: SpeculativeInferenceSpec, operator: Sequence[str]) -> list[dict[str, str]]:
    """The pods' imagePullSecrets: the resource's own, then the operator's (its chart's, for the default images
    and a private mirror), each Secret once."""
    names = [secret.name for secret in spec.runtime.image_pull_secrets or []]
    return [{"name": name} for name in dict.fromkeys([*names, *operator])]


def pod_template(
    spec: SpeculativeInferenceSpec,
    name: str,
    config_map: str,
    image: str,
    npu: str,
    annotations: dict[str, str],
    inherited: Mapping[str, str],
    operator_pull_secrets: Sequence[str],
) -> dict[str, Any]:
    """The Deployment's pod template; the operator's labels and `annotations` win over the overlay's, whose
    labels win over the resource's `inherited` ones (the resource's annotations stay off the pods: a pod
    template change restarts every engine, and annotations change more often than they matter to pods)."""
    overlay = spec.pod_template or PodTemplate()
    extra, user = overlay.spec or PodSpecOverlay(), overlay.metadata or PodMetadata()
    engine = spec.engine()
    models = storage(engine, spec.resources)
    samples = recorder(spec, name)
    volumes = [
        {"name": "engine-config", "configMap": {"name": config_map}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shared_memory}},
        *models.volumes,
        *samples.volumes,
        *(volume.dump() for volume in extra.volumes or []),
    ]
    placement = spec.placement
    pod: dict[str, Any] = {
        "containers": [
            engine_container(spec, engine, image, npu, models, samples),
            *(sidecar(c) for c in extra.containers or []),
        ],
        "initContainers": [sidecar(c) for c in extra.init_containers or []],
        "volumes": volumes,
        "terminationGracePeriodSeconds": grace_seconds(spec),
        "securityContext": {**(extra.security_context.dump() if extra.security_context else {}), **POD_SECURITY},
        # The engine talks to no API server: no token in its pods unless a service account is chosen for them.
        "automountServiceAccountToken": None if extra.service_account_name else False,
        "serviceAccountName": extra.service_account_name,
        "runtimeClassName": extra.runtime_class_name,
        "nodeSelector": placement.node_selector,
        "tolerations": [t.dump() for t in placement.tolerations or []],
        "affinity": placement.affinity.dump() if placement.affinity else None,
        "topologySpreadConstraints": spread(spec, name),
        "schedulerName": placement.scheduler_name,
        "priorityClassName": placement.priority_class_name,
        "imagePullSecrets": pull_secrets(spec, operator_pull_secrets),
    }
    return {
        "metadata": {
            "labels": {**inherited, **(user.labels or {}), **labels(name)},
            "annotations": {**(user.annotations or {}), **annotations},
        },
        "spec": {k: v for k, v in pod.items() if v or v == 0},
    }


def overridden(template: PodTemplate | None) -> list[Problem]:
    """Warnings for overlay labels and annotations that the operator's own replace in pod_template."""
    meta = template.metadata if template else None
    if meta is None:
        return []
    owned = {"labels": (*labels(""), TRACK_LABEL), "annotations": (CONFIG_HASH_ANNOTATION,)}
    return [
        Problem(f"spec.podTemplate.metadata.{kind}.{key}", "set by the operator, whose value wins: remove it", "pod")
        for kind, keys in (("labels", meta.labels), ("annotations", meta.annotations))
        for key in sorted(keys or {})
        if key in owned[kind]
    ]
