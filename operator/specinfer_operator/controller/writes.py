"""Writes to a resource's children, only where they are its own.

Children are named after the resource (`<name>`, `<name>-canary`, `<name>-engine-<hash>`), so a tenant who
may create a SpeculativeInference could otherwise name one after another team's Service, Deployment or
PodDisruptionBudget and have the operator, applying with force, take it over or delete it. An object is
the resource's own when its controller reference names the resource's uid. One that exists and is not is
never applied over nor deleted: the clash is reported, naming the object and its controller.

Knowing an object is ours costs a read once per process: after that the uid is remembered, and an apply
carries it as a precondition (the API server refuses it if the object was replaced meanwhile), so a
steady reconcile reads nothing more than before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from specinfer_operator.platform.kube import Conflict, Kube, plural_of
from specinfer_operator.platform.ownership import clash_message, controlled_by
from specinfer_operator.render import workload

ObjectKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)
KEEP = 20_000  # children whose uid is remembered


class Clash(Exception):  # noqa: N818 (reads as "raise Clash")
    """An object of a child's name exists and is not the resource's own; nothing was done to it."""


def _key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


@dataclass
class Owned:
    """The children known to be a resource's own, by uid; shared by every reconcile of the process."""

    kube: Kube
    _uids: OrderedDict[ObjectKey, str] = field(default_factory=OrderedDict)
    _by_owner: dict[str, set[ObjectKey]] = field(default_factory=dict)  # what forget() drops
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def _known(self, key: ObjectKey) -> str | None:
        with self._guard:
            return self._uids.get(key)

    def _remember(self, key: ObjectKey, uid: str | None, owner: str = "") -> None:
        """Keep a uid known, a child of `owner` (the oldest go first beyond KEEP: they are read again), or
        forget it."""
        with self._guard:
            if not uid:
                self._uids.pop(key, None)
                return
            self._uids[key] = uid
            self._uids.move_to_end(key)
            self._by_owner.setdefault(owner, set()).add(key)
            while len(self._uids) > KEEP:
                self._uids.popitem(last=False)

    def forget(self, owner: str) -> None:
        """The resource `owner` was deleted, and its children with it."""
        with self._guard:
            for key in self._by_owner.pop(owner, set()):
                self._uids.pop(key, None)

    def claim(self, obj: dict[str, Any], owner: str) -> dict[str, Any]:
        """`obj`, a child of the resource with uid `owner`, ready to apply: as it is when no object holds its
        name, with the uid of the one that does (a precondition) when that is the resource's own; Clash when
        another object holds the name."""
        key = _key(obj)
        uid = self._known(key)
        if uid is None:
            api_version, kind, namespace, name = key
            live = self.kube.get(api_version, plural_of(kind), namespace, name)
            if live is not None and not controlled_by(live, owner):
                raise Clash(clash_message(kind, namespace, name, live))
            uid = None if live is None else live["metadata"]["uid"]
            self._remember(key, uid, owner)
        return obj if uid is None else {**obj, "metadata": {**obj["metadata"], "uid": uid}}

    def apply(self, claimed: dict[str, Any], owner: str, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply of a claimed child (see claim)."""
        key = _key(claimed)
        try:
            result = self.kube.apply(claimed, dry_run=dry_run)
        except (ApiException, Conflict):
            self._remember(key, None)  # replaced or gone meanwhile: read again next time
            raise
        if not dry_run and controlled_by(result, owner):
            self._remember(key, result["metadata"]["uid"], owner)
        return result

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        owner: str,
        live: dict[str, Any] | None = None,
    ) -> bool:
        """Delete the resource's own child of that name (read unless `live` is given), the uid a
        precondition; an object that is not its own is left alone. Whether one was deleted."""
        key = (api_version, kind, namespace, name)
        if live is None:
            live = self.kube.get(api_version, plural_of(kind), namespace, name)
        if live is None or not controlled_by(live, owner):
            return False
        try:
            self.kube.delete(api_version, plural_of(kind), namespace, name, uid=live["metadata"]["uid"])
        except Conflict:
            return False  # replaced since it was read: not the object that was ours
        finally:
            self._remember(key, None)
        return True


def own_history(kube: Kube, live: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier pod templates of the workload `live` (its ReplicaSets, or a LeaderWorkerSet's revisions),
    as workload.pod_templates reads them: only those it controls, whatever else carries its labels."""
    api_version, plural, selector = workload.history_query(live)
    meta = live["metadata"]
    items = [i for i in kube.list(api_version, plural, meta["namespace"], selector) if controlled_by(i, meta["uid"])]
    return workload.history_entries(workload.kind_of(live), items)
