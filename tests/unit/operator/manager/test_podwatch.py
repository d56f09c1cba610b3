"""What the operator's pod watch does with each pod event: the status's index keeps what controller/pods.py
keeps, the telemetry loop hears of the pod, its resource is refreshed; and a list tells of the pods gone."""

from __future__ import annotations

import json
from typing import Any

from specinfer_operator.api.labels import INSTANCE_LABEL
from specinfer_operator.controller.pods import kept
from specinfer_operator.manager.podwatch import Feed, PodIndex
from specinfer_operator.platform.watch import Watch
from tests.unit.operator.platform.test_watch import Script

REPLICASET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs", "controller": True}


def pod(name: str, owner: str | None = "web", version: str = "1", namespace: str = "team-a") -> dict[str, Any]:
    labels = {INSTANCE_LABEL: owner} if owner is not None else {}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "labels": {**labels, "filler": "x"},
            "ownerReferences": [REPLICASET],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class Heard:
    def __init__(self) -> None:
        self.events: list[tuple[str | None, str, str]] = []  # (kind, namespace/name, owner)
        self.refreshed: list[tuple[str, str]] = []

    def pod_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self.events.append((kind, f"{meta['namespace']}/{meta['name']}", meta["labels"].get(INSTANCE_LABEL)))

    def feed(self, index: PodIndex) -> Feed:
        return Feed(index, self.pod_event, self.refreshed.append)


def test_each_event_keeps_what_the_status_reads_tells_the_telemetry_and_refreshes_the_resource() -> None:
    index, heard = PodIndex(), Heard()
    feed = heard.feed(index)
    feed.event("ADDED", pod("a"))
    feed.event(None, pod("b"))
    assert index[("team-a", "web")] == [kept(pod("a")), kept(pod("b"))]
    assert heard.events == [("ADDED", "team-a/a", "web"), (None, "team-a/b", "web")]
    assert heard.refreshed == [("team-a", "web")] * 2
    feed.event("DELETED", pod("a", version="2"))
    feed.event("DELETED", pod("b", version="2"))
    assert dict(index) == {}
    assert heard.events[-2:] == [("DELETED", "team-a/a", "web"), ("DELETED", "team-a/b", "web")]


def test_a_pod_without_an_owner_or_a_controller_is_not_kept_but_still_told() -> None:
    index, heard = PodIndex(), Heard()
    feed = heard.feed(index)
    orphan = pod("orphan")
    orphan["metadata"]["ownerReferences"] = []
    feed.event("ADDED", orphan)
    feed.event("ADDED", pod("nobody", owner=None))
    feed.event("ADDED", pod("long", owner="x" * 64))
    assert dict(index) == {}
    assert [e[1] for e in heard.events] == ["team-a/orphan", "team-a/nobody", "team-a/long"]
    assert heard.refreshed == [("team-a", "web"), ("team-a", "x" * 64)]


def test_a_relabelled_pod_leaves_its_former_resource() -> None:
    index, heard = PodIndex(), Heard()
    feed = heard.feed(index)
    feed.event("ADDED", pod("a", owner="web"))
    feed.event("MODIFIED", pod("a", owner="api", version="2"))
    assert dict(index) == {("team-a", "api"): [kept(pod("a", owner="api", version="2"))]}
    assert heard.events[1:] == [("DELETED", "team-a/a", "web"), ("MODIFIED", "team-a/a", "api")]
    assert heard.refreshed == [("team-a", "web"), ("team-a", "web"), ("team-a", "api")]


def test_a_list_tells_of_the_pods_gone_and_nothing_of_those_unchanged() -> None:
    index, heard = PodIndex(), Heard()
    feed = heard.feed(index)
    for name in ("a", "b", "c"):
        feed.event("ADDED", pod(name))
    heard.events.clear()
    heard.refreshed.clear()
    feed.event(None, pod("a"))  # as it was
    feed.event(None, pod("b", version="2"))  # changed since
    feed.relisted({"uid-a", "uid-b"})
    assert heard.events == [(None, "team-a/b", "web"), ("DELETED", "team-a/c", "web")]
    assert heard.refreshed == [("team-a", "web")] * 2
    assert [p["metadata"]["name"] for p in index[("team-a", "web")]] == ["a", "b"]


def test_the_index_reads_as_a_mapping_of_each_resources_pods() -> None:
    index, heard = PodIndex(), Heard()
    feed = heard.feed(index)
    feed.event("ADDED", pod("a", owner="web"))
    feed.event("ADDED", pod("b", owner="api", namespace="team-b"))
    assert sorted(index) == [("team-a", "web"), ("team-b", "api")]
    assert len(index) == 2
    assert index.get(("team-a", "none"), ()) == ()


def chunked(data: bytes) -> list[bytes]:
    return [data[i : i + 4096] for i in range(0, len(data), 4096)]


def test_the_largest_labelled_pod_reaches_neither_the_index_nor_the_telemetry() -> None:
    largest = pod("largest")
    largest["metadata"]["labels"].update({f"k{i:05d}": "" for i in range(40_000)})
    largest["metadata"]["annotations"] = {"filler": "x" * 250_000}
    listing = {"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": [pod("a"), largest]}
    events = b"".join(
        json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        for kind, obj in (("ADDED", largest), ("MODIFIED", pod("a", version="3")))
    )
    index, heard = PodIndex(), Heard()
    stream = Script(chunked(json.dumps(listing).encode()), chunked(events))
    stream.watcher = Watch(stream, heard.feed(index), "pods", wait=lambda _: True)
    stream.watcher.run()
    assert [e[1] for e in heard.events] == ["team-a/a", "team-a/a"]
    assert index[("team-a", "web")] == [kept(pod("a", version="3"))]
