"""Which SpeculativeInference made an object, by its chain of controller references (uids, not names).

Labels are whatever their writer chose: anyone who may create pods in a namespace can label one as an
engine of any resource there. A controller reference names its controller's uid, which only that object
has, so a pod counts as a resource's engine when its controller chain ends at the resource's uid:
pod -> ReplicaSet -> Deployment -> SpeculativeInference, or, for a group over several nodes, leader pod ->
StatefulSet -> LeaderWorkerSet -> SpeculativeInference (a worker: pod -> StatefulSet -> its leader pod ->
...). Each link is read once from the API and kept (a uid names one object for its whole life), so a
steady fleet costs no requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

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
MAX_DEPTH = 6  # the longest chain: a worker, its StatefulSet, the leader, the leader's StatefulSet, the set
KEEP = 10_000  # links remembered; the oldest go first
RETRY_SECONDS = 60.0  # a link that could not be followed is read again after this long


def controller(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The controller reference in an object's metadata, if it has one."""
    return next((r for r in meta.get("ownerReferences") or [] if r.get("controller") is True), None)


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


class Ownership:
    """Controller chains followed through the API, each link read once."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        # uid -> (the controller reference of that object, or None; when a None may be read again)
        self._links: OrderedDict[str, tuple[dict[str, Any] | None, float]] = OrderedDict()
        self._guard = threading.Lock()

    def resource_of(self, namespace: str, ref: dict[str, Any] | None) -> str | None:
        """The uid of the SpeculativeInference at the top of the controller chain that starts with `ref` (an
        object's controller reference), or None."""
        for _ in range(MAX_DEPTH):
            if ref is None:
                return None
            if (ref.get("apiVersion"), ref.get("kind")) == (API_VERSION, KIND):
                return str(ref.get("uid") or "") or None
            ref = self._above(namespace, ref)
        return None

    def _above(self, namespace: str, ref: dict[str, Any]) -> dict[str, Any] | None:
        """The controller reference of the object `ref` names, read once (a dead end again after a while)."""
        uid = str(ref.get("uid") or "")
        with self._guard:
            known = self._links.get(uid)
        if known is not None and (known[0] is not None or known[1] > self.clock()):
            return known[0]
        above = None
        plural = LINKS.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
        if plural is not None and uid:
            try:
                obj = self.kube.get(str(ref["apiVersion"]), plural, namespace, str(ref.get("name")))
            except ApiException as error:
                log.warning("cannot read %s %s/%s: %s", ref.get("kind"), namespace, ref.get("name"), error.reason)
                obj = None
            meta = (obj or {}).get("metadata") or {}
            above = controller(meta) if meta.get("uid") == uid else None
        with self._guard:
            self._links[uid] = (above, self.clock() + RETRY_SECONDS)
            self._links.move_to_end(uid)
            while len(self._links) > KEEP:
                self._links.popitem(last=False)
        return above
