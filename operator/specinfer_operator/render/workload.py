"""The object that runs a configuration's pods: a Deployment, or a LeaderWorkerSet when one engine spans
several nodes (spec.parallelism.nodes), each replica then being a group of pods (pure: no I/O).

Rollouts, rollbacks and canaries work on either through the functions here: the pod templates (the
LeaderWorkerSet has a leader's and a workers'), the configuration they run, the history a rollback restores
from (ReplicaSets, or LeaderWorkerSet's ControllerRevisions), and how many replicas are up. A group's
counts come from its pods, which the operator watches anyway, so a group's status never waits on the
LeaderWorkerSet's own.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION, TEMPLATE_HASH_LABEL
from specinfer_operator.api.resource import GROUP_SUFFIX

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
# Labels LeaderWorkerSet puts on the pods of its groups.
SET_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str


DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
LEADER_WORKER_SET = Kind(LWS_API_VERSION, LWS_KIND, "leaderworkersets")
KINDS = (DEPLOYMENT, LEADER_WORKER_SET)


def object_name(kind: Kind, name: str) -> str:
    """The workload's name for the resource `name`: a LeaderWorkerSet's differs, as LeaderWorkerSet names
    its headless Service (the subdomain of the leaders' addresses) after itself, and the resource's Service
    has the resource's name. Its pods are `<name>-group-<group>` (leaders) and `<name>-group-<group>-<rank>`."""
    return f"{name}{GROUP_SUFFIX}" if kind == LEADER_WORKER_SET else name


def kind_of_spec(spec: dict[str, Any] | None) -> Kind:
    """The kind a spec (as stored, perhaps invalid) is run by."""
    nodes = ((spec or {}).get("parallelism") or {}).get("nodes")
    return LEADER_WORKER_SET if isinstance(nodes, int) and nodes > 1 else DEPLOYMENT


def is_workload(obj: dict[str, Any]) -> bool:
    return any(obj.get("kind") == k.kind for k in KINDS)


def kind_of(obj: dict[str, Any]) -> Kind:
    return LEADER_WORKER_SET if obj.get("kind") == LWS_KIND else DEPLOYMENT


def leader_worker_set(
    metadata: dict[str, Any], replicas: int, size: int, rolling: dict[str, Any], leader: dict[str, Any]
) -> dict[str, Any]:
    """Groups of `size` pods: the leader from `leader` (the engine's pod template), the workers from the
    same without the API server's port and probes (they run headless). A pod that restarts takes its group
    down with it, as the engine cannot lose a rank and go on."""
    worker = copy.deepcopy(leader)
    for container in worker["spec"]["containers"][:1]:
        for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
            container.pop(key, None)
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": rolling},
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def pod_templates(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    spec = (obj or {}).get("spec") or {}
    if "leaderWorkerTemplate" in spec:
        group = spec["leaderWorkerTemplate"] or {}
        return [t for t in (group.get("leaderTemplate"), group.get("workerTemplate")) if t]
    return [spec["template"]] if spec.get("template") else []


def template_hash(obj: dict[str, Any] | None) -> str | None:
    """The configuration the object's pods are made to run (its templates' config-hash annotation)."""
    templates = pod_templates(obj)
    value = (
        ((templates[0].get("metadata") or {}).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
        if templates
        else None
    )
    return None if value is None else str(value)


def with_templates_of(wanted: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """`wanted` running the pods of `source` (a live object or an entry of its history): a rollback."""
    out = copy.deepcopy(wanted)
    if out["kind"] == LWS_KIND:
        group = copy.deepcopy(source["spec"]["leaderWorkerTemplate"])
        group.pop("$patch", None)
        out["spec"]["leaderWorkerTemplate"] = group
        return out
    template = copy.deepcopy(source["spec"]["template"])
    template.setdefault("metadata", {}).setdefault("labels", {}).pop(TEMPLATE_HASH_LABEL, None)
    out["spec"]["template"] = template
    return out


def history_query(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(api version, plural, label selector) of the objects that keep the workload `obj`'s earlier pod
    templates; its own among them are those it controls."""
    if obj.get("kind") == LWS_KIND:
        return "apps/v1", "controllerrevisions", f"{SET_LABEL}={obj['metadata']['name']}"
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return "apps/v1", "replicasets", ",".join(f"{k}={v}" for k, v in labels.items())


def history_entries(kind: Kind, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The listed history as objects pod_templates reads: a ControllerRevision of a LeaderWorkerSet holds
    its leaderWorkerTemplate as a patch (`data.spec`)."""
    if kind != LEADER_WORKER_SET:
        return items
    return [{"spec": (item.get("data") or {}).get("spec") or {}} for item in items]


def canary(wanted: dict[str, Any], name: str, label: str, replicas: int) -> dict[str, Any]:
    """`wanted` as `name` on `replicas` replicas, its pods told apart by `label` (key=value) in every
    template (and the Deployment's selector)."""
    key, value = label.split("=", 1)
    out = copy.deepcopy(wanted)
    out["metadata"]["name"] = name
    out["metadata"]["labels"][key] = value
    out["spec"]["replicas"] = replicas
    if "selector" in out["spec"]:
        out["spec"]["selector"]["matchLabels"][key] = value
    for template in pod_templates(out):
        template["metadata"]["labels"][key] = value
    return out


@dataclass(frozen=True)
class Counts:
    """Replicas (pods, or groups of pods) of a workload: existing, ready, and running its templates."""

    replicas: int = 0
    ready: int = 0
    updated: int = 0
    observed: bool = True  # the controller has seen the latest spec (Deployments say so)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def counts(obj: dict[str, Any] | None, pods: list[dict[str, Any]]) -> Counts:
    """A Deployment's counts are in its status. A LeaderWorkerSet's are counted from `pods` (every pod of
    the resource): a group is ready when all its pods are, updated when all run its templates."""
    if obj is None:
        return Counts()
    status = obj.get("status") or {}
    if obj.get("kind") != LWS_KIND:
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        return Counts(
            int(status.get("replicas", 0)),
            int(status.get("readyReplicas", 0)),
            int(status.get("updatedReplicas", 0)),
            int(status.get("observedGeneration", 0)) >= generation,
        )
    name, wanted = obj["metadata"]["name"], template_hash(obj)
    size = int(((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(SET_LABEL) == name and not meta.get("deletionTimestamp"):
            groups[str(labels.get(GROUP_INDEX_LABEL))].append(pod)
    whole = [g for g in groups.values() if len(g) == size]
    runs = [
        g
        for g in whole
        if all((p["metadata"].get("annotations") or {}).get(CONFIG_HASH_ANNOTATION) == wanted for p in g)
    ]
    return Counts(len(groups), sum(all(_ready(p) for p in g) for g in whole), len(runs))


def kind_of_pod(pod: dict[str, Any]) -> Kind:
    """The kind of workload that made the pod."""
    return LEADER_WORKER_SET if SET_LABEL in ((pod.get("metadata") or {}).get("labels") or {}) else DEPLOYMENT


def serves(pod: dict[str, Any]) -> bool:
    """Whether the pod runs the API server: any engine pod but the workers of a group (headless)."""
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(WORKER_INDEX_LABEL, "0")) == "0"
