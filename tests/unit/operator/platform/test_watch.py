"""The bounded list and watch: events in order, the resource version carried on, lists again when the version
is gone or events were dropped, and backing off after failures; on a scripted source, without sleeping."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from specinfer_operator.platform.jsonstream import MAX_DOCUMENT_BYTES, MAX_VALUES
from specinfer_operator.platform.watch import BACKOFF, Gone, Watch

Step = list[bytes] | Exception


def pod(name: str, version: str = "1", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version, **extra}}


def listed(version: str, *items: dict[str, Any]) -> list[bytes]:
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": version}, "items": list(items)})
    return [body.encode()[i : i + 5] for i in range(0, len(body), 5)]


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def watched(*lines: bytes) -> list[bytes]:
    stream = b"".join(lines)
    return [stream[i : i + 7] for i in range(0, len(stream), 7)]


class Script:
    """A source that answers each list and watch with its next step, and stops the watch once none is left."""

    def __init__(self, *steps: Step) -> None:
        self.steps: deque[Step] = deque(steps)
        self.asked: list[str] = []
        self.watcher: Watch | None = None

    @contextmanager
    def _next(self) -> Iterator[Iterator[bytes]]:
        if not self.steps:
            assert self.watcher is not None
            self.watcher.stop()
            raise ConnectionError("the script has ended")
        step = self.steps.popleft()
        if isinstance(step, Exception):
            raise step
        yield iter(step)

    def list(self) -> Any:
        self.asked.append("list")
        return self._next()

    def watch(self, version: str) -> Any:
        self.asked.append(f"watch {version}")
        return self._next()

    def interrupt(self) -> None:
        pass


class Sink:
    def __init__(self) -> None:
        self.told: list[tuple[str, ...]] = []

    def event(self, kind: str | None, obj: dict[str, Any]) -> None:
        self.told.append((str(kind), obj["metadata"]["name"]))

    def relisted(self, uids: set[str]) -> None:
        self.told.append(("relisted", *sorted(uids)))


def run(*steps: Step) -> tuple[Script, Sink, list[float]]:
    source, sink, waited = Script(*steps), Sink(), []

    def wait(seconds: float) -> bool:
        waited.append(seconds)
        return False

    source.watcher = Watch(source, sink, "pods", wait=wait)
    source.watcher.run()
    return source, sink, waited


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("specinfer_pod_events_refused_total", {"reason": reason}) or 0.0


def test_a_list_then_each_event_in_order_the_version_carried_on() -> None:
    source, sink, waited = run(
        listed("10", pod("a")),
        watched(
            line("ADDED", pod("b", "11")),
            line("MODIFIED", pod("a", "12")),
            line("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
            line("DELETED", pod("b", "16")),
        ),
        watched(line("BOOKMARK", {"metadata": {"resourceVersion": "20"}})),
    )
    assert source.asked == ["list", "watch 10", "watch 16", "watch 20"]
    assert sink.told == [
        ("None", "a"),
        ("relisted", "uid-a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    assert waited == []  # each watch brought something


def test_a_version_gone_lists_again_at_once() -> None:
    source, sink, waited = run(
        listed("10", pod("a"), pod("b")),
        watched(line("ADDED", pod("c", "11")), line("ERROR", {"kind": "Status", "code": 410, "message": "too old"})),
        listed("30", pod("b", "25")),
        Gone(410, "Gone"),
        listed("40", pod("b", "25")),
        watched(),
    )
    assert source.asked[:6] == ["list", "watch 10", "list", "watch 30", "list", "watch 40"]
    assert sink.told[-4:] == [("None", "b"), ("relisted", "uid-b"), ("None", "b"), ("relisted", "uid-b")]
    assert waited == [1.0]  # after the empty watch


def test_another_error_event_lists_again_after_a_wait() -> None:
    source, _, waited = run(
        listed("10"),
        watched(line("ERROR", {"kind": "Status", "code": 500, "message": "internal"})),
        listed("11"),
    )
    assert source.asked[:4] == ["list", "watch 10", "list", "watch 11"]
    assert waited[0] == BACKOFF[0]


def test_failures_back_off_doubling_to_the_cap_and_an_event_resets_it() -> None:
    failure = ApiException(status=500, reason="Internal")
    source, _, waited = run(
        listed("10"),
        *[failure] * 7,
        watched(line("BOOKMARK", {"metadata": {"resourceVersion": "11"}})),
        failure,
    )
    assert waited == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 1.0]
    assert source.asked[1:9] == ["watch 10"] * 8  # from where the last watch ended, not a new list


def test_a_failed_list_backs_off_and_lists_again() -> None:
    source, _, waited = run(ApiException(status=403, reason="Forbidden"), listed("10"), watched())
    assert source.asked[:3] == ["list", "list", "watch 10"]
    assert waited[0] == 1.0


def test_a_stop_during_a_wait_ends_the_run() -> None:
    source = Script(ConnectionError("down"))
    watch = Watch(source, Sink(), "pods", wait=lambda seconds: True)
    source.watcher = watch
    watch.run()
    assert source.asked == ["list"]


def test_events_over_the_bounds_are_dropped_and_the_list_is_read_again() -> None:
    too_large, too_many = refused("too_large"), refused("too_many_values")
    huge = line("ADDED", pod("huge", "11", annotations={"x": "x" * MAX_DOCUMENT_BYTES}))
    many = line("ADDED", pod("many", "12", labels={f"k{i}": "" for i in range(MAX_VALUES)}))
    source, sink, _ = run(
        listed("10", pod("a")),
        watched(huge, many, line("MODIFIED", pod("a", "13"))),
        listed("14", pod("a", "13")),
        watched(line("BOOKMARK", {"metadata": {"resourceVersion": "15"}})),
    )
    assert source.asked == ["list", "watch 10", "list", "watch 14", "watch 15"]
    assert ("ADDED", "huge") not in sink.told
    assert ("ADDED", "many") not in sink.told
    assert ("MODIFIED", "a") in sink.told
    assert (refused("too_large") - too_large, refused("too_many_values") - too_many) == (1, 1)


def test_a_listed_item_over_the_bounds_is_gone_for_the_sink_and_no_cause_to_list_again() -> None:
    many = pod("many", "9", labels={f"k{i}": "" for i in range(MAX_VALUES)})
    source, sink, _ = run(
        listed("10", pod("a"), many), watched(line("BOOKMARK", {"metadata": {"resourceVersion": "11"}}))
    )
    assert sink.told[:2] == [("None", "a"), ("relisted", "uid-a")]
    assert source.asked[:3] == ["list", "watch 10", "watch 11"]


def test_a_list_without_a_version_is_a_failure() -> None:
    source, _, waited = run([b'{"kind":"PodList","items":[]}'], listed("10"), watched())
    assert source.asked[:3] == ["list", "list", "watch 10"]
    assert waited[0] == 1.0
