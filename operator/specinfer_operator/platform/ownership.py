"""Which SpeculativeInference made a pod: its chain of controller references (uids, not names), and the
template of the workload that claims it.

Labels are whatever their writer chose: anyone who may create pods in a namespace can label one as an
engine of any resource there. Controller references are chosen by the writer too: a pod may name the
resource itself, whose uid anyone who may `get` it can read, or one of its real ReplicaSets. So a pod
counts as a resource's engine only when all of this holds:

- its controller chain is one the resource's workloads make, and ends at the resource's uid: pod ->
  ReplicaSet -> Deployment -> SpeculativeInference, or, for a group over several nodes, leader pod ->
  StatefulSet -> LeaderWorkerSet -> SpeculativeInference (a worker: pod -> StatefulSet -> its leader pod
  -> ...); a pod that names the resource, or a Deployment, directly is nobody's;
- it carries the pod-template hash of the ReplicaSet that claims it (what the status counts: the pods of a
  StatefulSet being rolled run an older template for a while, and still count);
- for its figures, it also runs the engine as rendered: its engine container (image, command, arguments,
  environment, mounts and the volumes behind them) is that of its ReplicaSet's (or StatefulSet's) template.
  Kubernetes' own additions are left out of the comparison: the service account token's mount, and the
  LWS_* variables LeaderWorkerSet's webhook sets.

Each link is read once from the API and kept (a uid names one object for its whole life); a template that
does not match a pod it claims is read again, at most every REREAD_SECONDS, since a StatefulSet's template
changes in place (the telemetry loop asks again every round). A steady fleet costs no requests.

What is kept is the namespace's own: links are keyed by namespace and uid, and each remembers the name it
was read by. A reference is followed only in its pod's namespace, so a pod elsewhere that names a victim's
ReplicaSet uid under a missing name leaves a dead end in its own namespace, not in the victim's; and within
one namespace, a dead end read under one name is read again for a reference by another (the object of that
uid has only one), while a live link read under its real name refuses a reference by any other, unread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from specinfer_operator.api.container import ENGINE_CONTAINER
from specinfer_operator.api.labels import TEMPLATE_HASH_LABEL
from specinfer_operator.api.resource import API_VERSION, KIND
from specinfer_operator.platform.kube import Kube

log = logging.getLogger(__name__)

# Kinds that stand between a resource and its pods, and where each is read.
LINKS = {
    ("apps/v1", "ReplicaSet"): "replicasets",
    ("apps/v1", "Deployment"): "deployments",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkersets",
    ("v1", "Pod"): "pods",  # a group's leader, which LeaderWorkerSet makes its workers' StatefulSet's controller
}
# The chains of kinds from a pod's controller up to (not including) the resource that its workloads make.
CHAINS = {
    ("ReplicaSet", "Deployment"),
    ("StatefulSet", "LeaderWorkerSet"),
    ("StatefulSet", "Pod", "StatefulSet", "LeaderWorkerSet"),
}
MAKERS = ("ReplicaSet", "StatefulSet")  # the kinds that make pods from a template of their own
MAX_DEPTH = max(len(c) for c in CHAINS) + 1
KEEP = 10_000  # links remembered; the oldest go first
RETRY_SECONDS = 60.0  # a link that could not be followed is read again after this long
REREAD_SECONDS = 10.0  # a template that does not match a pod it claims is read again after this long
Key = tuple[str, str]  # (namespace, uid): an object's uid is only ever looked up in its own namespace
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
GROUP_ENV_PREFIX = "LWS_"


def controller(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The controller reference in an object's metadata, if it has one."""
    return next((r for r in meta.get("ownerReferences") or [] if r.get("controller") is True), None)


def maker(ref: dict[str, Any]) -> bool:
    """Whether a pod's controller reference is of a kind that makes engine pods from a template (the first
    link of every chain): a pod whose controller is anything else is nobody's, whatever it names."""
    return ref.get("apiVersion") == "apps/v1" and ref.get("kind") in MAKERS


def controlled_by(obj: dict[str, Any] | None, uid: str | None) -> bool:
    """Whether `obj`'s controller is the object with this uid."""
    ref = controller((obj or {}).get("metadata") or {})
    return bool(uid) and ref is not None and ref.get("uid") == uid


def described(obj: dict[str, Any]) -> str:
    """Who controls `obj`, for a message: `Deployment web (uid ...)`, or `no controller`."""
    ref = controller(obj.get("metadata") or {})
    if ref is None:
        return "no controller"
    return f"{ref.get('kind', '?')} {ref.get('name', '?')} (uid {ref.get('uid', '?')})"


def clash_message(kind: str, namespace: str, name: str, live: dict[str, Any]) -> str:
    """Why a child was not written: `live`, another object, holds its name."""
    return (
        f"{kind} {namespace}/{name} exists and is not this SpeculativeInference's (its controller: "
        f"{described(live)}): it was left untouched; rename this SpeculativeInference, or remove that {kind}"
    )


def made(labels: dict[str, Any] | None, spec: dict[str, Any] | None) -> str | None:
    """What a pod (or a pod template) runs, as a digest to compare a pod with the template of the workload
    that claims it: its pod-template hash, its engine container and the volumes that container mounts. None
    without an engine container: then it matches nothing."""
    spec = spec or {}
    engine = next((c for c in spec.get("containers") or [] if c.get("name") == ENGINE_CONTAINER), None)
    if engine is None:
        return None
    mounts = [m for m in engine.get("volumeMounts") or [] if m.get("mountPath") != SERVICE_ACCOUNT_MOUNT]
    mounted = {m.get("name") for m in mounts}
    picked = {
        "hash": (labels or {}).get(TEMPLATE_HASH_LABEL, ""),
        **{key: engine.get(key) for key in ("image", "command", "args", "workingDir", "envFrom")},
        "env": [e for e in engine.get("env") or [] if not str(e.get("name", "")).startswith(GROUP_ENV_PREFIX)],
        "volumeMounts": mounts,
        "volumes": sorted(
            (v for v in spec.get("volumes") or [] if v.get("name") in mounted), key=lambda v: str(v.get("name"))
        ),
    }
    return hashlib.sha256(json.dumps(picked, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Runs:
    """What a pod runs, or a pod template makes: its pod-template hash (a ReplicaSet's), and `made`."""

    hash: str
    made: str | None

    @classmethod
    def of(cls, labels: dict[str, Any] | None, spec: dict[str, Any] | None) -> Runs:
        return cls(str((labels or {}).get(TEMPLATE_HASH_LABEL, "")), made(labels, spec))

    def claimed_by(self, template: Runs, engine: bool) -> bool:
        """Whether a pod running this is what `template` makes: by the hash, and with `engine`, by `made`."""
        return self.hash == template.hash and (not engine or (self.made is not None and self.made == template.made))


def runs_of(obj: dict[str, Any]) -> Runs:
    """What an object runs: a pod's own, or a ReplicaSet's or StatefulSet's template's."""
    if obj.get("kind") == "Pod":
        return Runs.of((obj.get("metadata") or {}).get("labels"), obj.get("spec"))
    template = (obj.get("spec") or {}).get("template") or {}
    return Runs.of((template.get("metadata") or {}).get("labels"), template.get("spec"))


@dataclass(frozen=True)
class Link:
    """What was read of one object of a chain."""

    name: str  # the name it was read by: the name of the object of its uid, if it was found
    above: dict[str, Any] | None  # its controller reference
    runs: Runs | None  # a pod's; a ReplicaSet's or StatefulSet's template's
    until: float  # when it is read again: a dead end after RETRY_SECONDS, a template after REREAD_SECONDS


class Ownership:
    """Controller chains followed through the API, each link read once."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        self._links: OrderedDict[Key, Link] = OrderedDict()  # by namespace and uid
        self._under: dict[Key, set[Key]] = {}  # the links of the chains that end at a resource, by its key
        self._guard = threading.Lock()

    def resource_of(self, namespace: str, ref: dict[str, Any] | None, runs: Runs, engine: bool) -> str | None:
        """The uid of the SpeculativeInference that made a pod, or None: `ref` is the pod's controller reference
        and `runs` what it runs; with `engine`, its engine must be the template's too (its figures count)."""
        kinds: list[str] = []
        walked: list[Key] = []
        below: Runs | None = runs
        for _ in range(MAX_DEPTH):
            if ref is None:
                return None
            if (ref.get("apiVersion"), ref.get("kind")) == (API_VERSION, KIND):
                top = str(ref.get("uid") or "")
                if not top or tuple(kinds) not in CHAINS:
                    return None
                with self._guard:
                    self._under.setdefault((namespace, top), set()).update(walked)
                return top
            kind = str(ref.get("kind"))
            link = self._link(namespace, ref)
            if link is None:
                return None
            if below is not None:  # a pod below: it must run what this object makes
                if kind not in MAKERS:
                    return None
                if link.runs is None or not below.claimed_by(link.runs, engine):
                    link = self._link(namespace, ref, stale=True)
                    if link is None or link.runs is None or not below.claimed_by(link.runs, engine):
                        return None
            kinds.append(kind)
            walked.append((namespace, str(ref.get("uid"))))
            below = link.runs if kind == "Pod" else None
            ref = link.above
        return None

    def forget(self, namespace: str, resource: str) -> None:
        """The resource of this uid in `namespace` was deleted, and the objects of its chains with it."""
        with self._guard:
            for key in self._under.pop((namespace, resource), set()):
                self._links.pop(key, None)

    def pod_resource(self, namespace: str, pod: dict[str, Any]) -> str | None:
        """resource_of a pod, as the status counts it (its engine is not compared)."""
        meta = pod.get("metadata") or {}
        return self.resource_of(namespace, controller(meta), Runs.of(meta.get("labels"), None), engine=False)

    def _link(self, namespace: str, ref: dict[str, Any], stale: bool = False) -> Link | None:
        """What `ref` names, read once (a dead end again after a while; with `stale`, again if it was read
        more than REREAD_SECONDS ago); None for a kind no chain has."""
        uid, name = str(ref.get("uid") or ""), str(ref.get("name"))
        plural = LINKS.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
        if plural is None or not uid:
            return None
        key = (namespace, uid)
        with self._guard:
            known = self._links.get(key)
        now = self.clock()
        if known is not None and known.name != name:
            if known.above is not None:
                return None  # the object of this uid is known by another name: this reference names nothing
            known = None  # a dead end under another name says nothing of this one
        if known is not None and ((known.above is not None and not stale) or known.until > now):
            return known
        try:
            obj = self.kube.get(str(ref["apiVersion"]), plural, namespace, name)
        except ApiException as error:
            log.warning("cannot read %s %s/%s: %s", ref.get("kind"), namespace, name, error.reason)
            obj = None
        meta = (obj or {}).get("metadata") or {}
        if obj is None or meta.get("uid") != uid:
            link = Link(name, None, None, now + RETRY_SECONDS)
        else:
            link = Link(name, controller(meta), runs_of({"kind": ref.get("kind"), **obj}), now + REREAD_SECONDS)
        with self._guard:
            held = self._links.get(key)
            if link.above is None and held is not None and held.above is not None and held.name != name:
                return link  # a live link read meanwhile under the real name is not replaced by a dead end
            self._links[key] = link
            self._links.move_to_end(key)
            while len(self._links) > KEEP:
                self._links.popitem(last=False)
        return link
