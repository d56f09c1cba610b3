"""The operator's own watch of the pods labelled as its children, in place of kopf's: each event is reduced
to what the operator keeps of a pod as soon as it is read, and nothing of it is held after.

What anyone who may create a pod may put in one (40,000 labels, 256 KiB of annotations) cost the operator
about 10 MiB per pod under kopf, which parsed, queued and kept each event whole (docs/security.md). Here
each watched namespace (or the cluster) has one bounded watch (platform/watch.py), and each event, one at a
time, updates three things before the next is read: the status's index (`PodIndex`, what controller/pods.py
`kept` keeps), the telemetry loop's scrape targets, and the refresh of the pod's resource.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.labels import CHILD_LABELS, INSTANCE_LABEL
from specinfer_operator.controller.pods import MAX_VALUE, kept
from specinfer_operator.platform.kube import Kube, collection
from specinfer_operator.platform.watch import ApiSource, Watch
from specinfer_operator.render.children import label_selector

Key = tuple[str, str]  # (namespace, the owner's name: the pod's instance label)
PodEvent = Callable[[str | None, dict[str, Any]], None]  # Telemetry.pod_event


class PodIndex(Mapping[Key, list[dict[str, Any]]]):
    """Each resource's pods as the status reads them (controller/pods.py), by (namespace, name): what
    `Context.pods` reads, from any thread, while the watches write it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._pods: dict[Key, dict[str, dict[str, Any]]] = {}
        self._where: dict[str, Key] = {}  # uid -> key

    def __getitem__(self, key: Key) -> list[dict[str, Any]]:
        with self._guard:
            return list(self._pods[key].values())

    def __iter__(self) -> Iterator[Key]:
        with self._guard:
            return iter(list(self._pods))

    def __len__(self) -> int:
        with self._guard:
            return len(self._pods)

    def put(self, uid: str, key: Key | None, pod: dict[str, Any] | None) -> None:
        """Pod `uid` is now `pod` under `key`; with either None, it is in the index no more."""
        with self._guard:
            old = self._where.pop(uid, None)
            if old is not None:
                pods = self._pods[old]
                pods.pop(uid, None)
                if not pods:
                    del self._pods[old]
            if key is not None and pod is not None:
                self._pods.setdefault(key, {})[uid] = pod
                self._where[uid] = key


@dataclass(frozen=True)
class Seen:
    """What a feed remembers of a pod it told about, to tell of its end: at most a few hundred bytes."""

    namespace: str
    name: str
    owner: str
    version: str


class Feed:
    """Where one watch's pods go (platform/watch.py's Sink): the index, the telemetry loop, the refreshes."""

    def __init__(self, index: PodIndex, pod_event: PodEvent, refresh: Callable[[Key], None]) -> None:
        self.index, self.pod_event, self.refresh = index, pod_event, refresh
        self._seen: dict[str, Seen] = {}

    def event(self, kind: str | None, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
        owner = str((meta.get("labels") or {}).get(INSTANCE_LABEL) or "")
        if not uid:
            return
        seen = Seen(namespace, str(meta.get("name") or ""), owner, str(meta.get("resourceVersion") or ""))
        before = self._seen.pop(uid, None)
        if kind is None and before == seen:
            self._seen[uid] = seen
            return  # listed again as it was: nothing to tell
        key = (namespace, owner) if owner and namespace and len(owner) <= MAX_VALUE else None
        if kind == "DELETED":
            self.index.put(uid, None, None)
        else:
            self._seen[uid] = seen
            self.index.put(uid, key, kept(pod) if key is not None else None)
        if before is not None and (before.namespace, before.owner) != (namespace, owner):
            self._gone(before)  # relabelled: it left its former resource
        self.pod_event(kind, pod)
        if owner and namespace:
            self.refresh((namespace, owner))

    def relisted(self, uids: set[str]) -> None:
        for uid in [uid for uid in self._seen if uid not in uids]:
            self.index.put(uid, None, None)
            self._gone(self._seen.pop(uid))

    def _gone(self, seen: Seen) -> None:
        if seen.owner and seen.namespace:
            labels = {INSTANCE_LABEL: seen.owner}
            self.pod_event("DELETED", {"metadata": {"name": seen.name, "namespace": seen.namespace, "labels": labels}})
            self.refresh((seen.namespace, seen.owner))


class PodWatches:
    """One watch per watched namespace, or one for the cluster: listed at start, before any kopf handler
    runs (as kopf's index was), then each watched in a thread of its own."""

    def __init__(
        self, kube: Kube, namespaces: Sequence[str], pod_event: PodEvent, refresh: Callable[[Key], None]
    ) -> None:
        self.index = PodIndex()
        selector = label_selector(CHILD_LABELS)
        scopes: Sequence[str | None] = namespaces or [None]
        self.watches = [
            Watch(
                ApiSource(kube.api, collection("v1", "pods", namespace), selector),
                Feed(self.index, pod_event, refresh),
                f"pods in {namespace}" if namespace else "pods",
            )
            for namespace in scopes
        ]

    def start(self) -> None:
        """List every watch's pods, then start watching; a failed list raises (kopf retries the startup),
        and the lists done are not done again."""
        for watch in self.watches:
            if watch.version is None:
                watch.relist()
        for watch in self.watches:
            watch.start()

    def stop(self, timeout: float = 5.0) -> None:
        for watch in self.watches:
            watch.stop()
        for watch in self.watches:
            watch.join(timeout)
