"""Which pods the loop scrapes: Ready ones with an address of their own, at the port the operator rendered, of
the configuration the status names."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from specinfer_operator.measure.scrape import Endpoint
from specinfer_operator.platform.ownership import Runs
from specinfer_operator.telemetry.targets import Target, Watched, target_of


def pod(
    name: str, config_hash: str = "abc", ready: bool = True, ip: str | None = "127.100.0.5", **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {"specinfer.io/config-hash": config_hash},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "demo-abc", "uid": "rs-1", "controller": True}
            ],
            **meta,
        },
        "spec": {"containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            **({"podIP": ip} if ip else {}),
            "containerStatuses": [
                {"name": "engine", "restartCount": 2, "state": {"running": {"startedAt": "2026-11-23T10:00:00Z"}}}
            ],
        },
    }


def test_a_ready_pod_is_a_target_with_its_series() -> None:
    started = datetime(2026, 11, 23, 10, tzinfo=UTC).timestamp()
    controller = ("apps/v1", "ReplicaSet", "demo-abc", "rs-1")
    runs = Runs.of({}, pod("a")["spec"])
    assert runs.made is not None
    assert target_of(pod("a")) == Target(
        "a", "uid-a/2", "abc", Endpoint("127.100.0.5", 8000), started, controller, runs
    )


def test_the_port_is_the_one_rendered_whatever_the_pod_declares() -> None:
    other = pod("a")
    other["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 10250}]
    target = target_of(other)
    assert target is not None
    assert target.endpoint == Endpoint("127.100.0.5", 8000)


def test_a_pod_on_the_host_network_is_never_a_target() -> None:
    on_host = pod("a")
    on_host["spec"]["hostNetwork"] = True
    assert target_of(on_host) is None
    shares_the_node_address = pod("a")
    shares_the_node_address["status"]["hostIP"] = "127.100.0.5"
    assert target_of(shares_the_node_address) is None


def test_a_start_time_that_cannot_be_read_is_unknown() -> None:
    odd = pod("a")
    odd["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "yesterday"}}
    waiting = pod("a")
    waiting["status"]["containerStatuses"][0]["state"] = {"waiting": {}}
    for body in (odd, waiting):
        target = target_of(body)
        assert target is not None
        assert target.started is None


def test_pods_that_cannot_answer_are_not_targets() -> None:
    assert target_of(pod("a", ready=False)) is None
    assert target_of(pod("a", ip=None)) is None
    assert target_of(pod("a", deletionTimestamp="2026-11-23T10:00:00Z")) is None
    assert target_of(pod("a", annotations={})) is None


def test_a_restart_changes_the_series() -> None:
    restarted = pod("a")
    restarted["status"]["containerStatuses"][0]["restartCount"] = 3
    first, second = target_of(pod("a")), target_of(restarted)
    assert first is not None
    assert second is not None
    assert first.series != second.series


def test_only_the_current_configuration_is_measured() -> None:
    watched = Watched(status={"configHash": "new"})
    for name, config_hash in (("old-1", "old"), ("new-1", "new"), ("new-2", "new")):
        target = target_of(pod(name, config_hash))
        assert target is not None
        watched.targets[name] = target
    assert sorted(t.pod for t in watched.current()) == ["new-1", "new-2"]


def test_what_a_target_keeps_is_bounded_whatever_the_pod_writes() -> None:
    assert target_of(pod("a", config_hash="h" * 250_000)) is None
    forged = pod("a")
    forged["metadata"]["ownerReferences"][0]["name"] = "n" * 250_000
    target = target_of(forged)
    assert target is not None
    assert target.controller is None  # refused as foreign before any scrape
