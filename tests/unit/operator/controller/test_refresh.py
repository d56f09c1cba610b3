"""Coalescing of child events: a burst costs few refreshes, and the last event is never lost."""

from __future__ import annotations

import threading
from typing import Any

from specinfer_operator.controller.context import Context
from specinfer_operator.controller.refresh import Refreshes
from specinfer_operator.render.children import RenderDefaults


class SlowKube:
    """Only `resource()` is used when the resource has no status yet; the first read waits for a go."""

    def __init__(self) -> None:
        self.reads = 0
        self.first_read, self.go = threading.Event(), threading.Event()

    def resource(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        if self.reads == 1:
            self.first_read.set()
            self.go.wait(5)
        return {"metadata": {"name": name, "namespace": namespace, "generation": 1}}


def context(kube: SlowKube) -> Context:
    return Context(kube, RenderDefaults(), lambda *args: None)  # type: ignore[arg-type]


def test_an_event_during_a_refresh_runs_it_once_more() -> None:
    kube = SlowKube()
    refreshes = Refreshes(context(kube))
    running = threading.Thread(target=refreshes.refresh, args=("ns", "r"))
    running.start()
    assert kube.first_read.wait(5)
    for _ in range(5):  # a burst while the first refresh is in flight: coalesced, not dropped
        refreshes.refresh("ns", "r")
    kube.go.set()
    running.join(5)
    assert kube.reads == 2
    refreshes.refresh("ns", "r")  # and a later event runs again
    assert kube.reads == 3
    refreshes.stop()
