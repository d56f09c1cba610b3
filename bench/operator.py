"""Operator benchmarks against the local control plane, each figure next to its floor.

The floor is the same work without the operator: the rendered children applied directly, as
`specinfer render | kubectl apply -f -` would. Creating the resource itself is timed apart, with no operator
running: its schema and CEL admission is a cost every apply pays before any operator sees it. Targets
(DESIGN section 9): apply -> Deployment p50 < 150 ms and p99 < 1 s; 500 resources Ready in < 120 s; operator
RSS < 200 MB; 0 API writes per minute at steady state (telemetry's refresh aside, none here: the simulated
pods answer no scrape). Run with `make bench-operator` (starts the cluster with room for 500 pods).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from specinfer_operator.api.resource import GROUP, PLURAL, VERSION, SpeculativeInference
from specinfer_operator.platform.kube import Kube
from specinfer_operator.render.children import render

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "hack" / "cluster"
LATENCY_SAMPLES = 100
SETTLED_SAMPLES, SETTLE_SECONDS = 50, 1.0
SCALE = 500
IDLE_SECONDS = 60
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
OURS = ("speculativeinferences", "deployments", "services", "configmaps")


def body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeInference",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "Qwen/Qwen3-8B"},
            "speculative": {"method": "ngram", "numSpeculativeTokens": 4},
            "replicas": 1,
        },
    }


PLURALS = {"ConfigMap": "configmaps", "Service": "services", "Deployment": "deployments"}


class Bench:
    def __init__(self, api: client.ApiClient) -> None:
        self.api, self.kube = api, Kube(api)
        self.apps = client.AppsV1Api(api)

    def namespace(self, name: str) -> str:
        self.kube.create(
            "v1", "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        while not self.kube.list("v1", "serviceaccounts", name):
            time.sleep(0.2)
        return name

    def drop(self, name: str) -> None:
        self.kube.delete("v1", "namespaces", None, name)
        while self.kube.get("v1", "namespaces", None, name) is not None:
            time.sleep(1)

    def create_children(self, namespace: str, name: str) -> None:
        cr = SpeculativeInference.model_validate({**body(name), "metadata": {"name": name, "namespace": namespace}})
        for obj in render(cr):
            self.kube.create(obj["apiVersion"], PLURALS[obj["kind"]], namespace, obj)

    def create_resource(self, namespace: str, name: str) -> None:
        self.kube.create(f"{GROUP}/{VERSION}", PLURAL, namespace, body(name))

    def deployment_latency(
        self, namespace: str, create: Callable[[str, str], None], samples: int = LATENCY_SAMPLES, gap: float = 0
    ) -> list[float]:
        """Seconds from the create request to the Deployment's ADDED event, one resource at a time, each
        created as soon as the last one's Deployment appeared or, with a `gap`, once the work it set off
        (its status, pods, their events) has settled."""
        seen: dict[str, float] = {}
        ready = threading.Event()

        def watcher() -> None:
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            ready.set()
            events = stream.stream(self.apps.list_namespaced_deployment, namespace, timeout_seconds=600)  # type: ignore[no-untyped-call]
            for event in events:
                if event["type"] == "ADDED":
                    seen.setdefault(event["raw_object"]["metadata"]["name"], time.perf_counter())
                if len(seen) >= samples:
                    stream.stop()  # type: ignore[no-untyped-call]

        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        ready.wait()
        time.sleep(0.5)
        latencies = []
        for i in range(samples):
            name = f"lat-{i}"
            start = time.perf_counter()
            create(namespace, name)
            while name not in seen:
                time.sleep(0.001)
            latencies.append(seen[name] - start)
            time.sleep(gap)
        thread.join(timeout=5)
        return latencies

    def request_latency(self, namespace: str, create: Callable[[str, str], None]) -> list[float]:
        """Seconds each create request takes, one at a time."""
        latencies = []
        for i in range(LATENCY_SAMPLES):
            start = time.perf_counter()
            create(namespace, f"req-{i}")
            latencies.append(time.perf_counter() - start)
        return latencies

    def to_ready(self, namespace: str, create: Callable[[str, str], None], ready: Callable[[str], int]) -> float:
        """Seconds from the first create to SCALE resources ready."""
        start = time.perf_counter()
        for i in range(SCALE):
            create(namespace, f"scale-{i}")
        while ready(namespace) < SCALE:
            time.sleep(1)
        return time.perf_counter() - start

    def resources_ready(self, namespace: str) -> int:
        items = self.kube.list(f"{GROUP}/{VERSION}", PLURAL, namespace)
        return sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in (i.get("status") or {}).get("conditions", []))
            for i in items
        )

    def deployments_available(self, namespace: str) -> int:
        deployments = self.kube.list("apps/v1", "deployments", namespace)
        return sum((d.get("status") or {}).get("availableReplicas", 0) >= 1 for d in deployments)

    def writes(self) -> dict[str, float]:
        """apiserver_request_total of write verbs on the resources the operator writes, by resource."""
        method, url, headers, _, _ = self.api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers)
        text = response.read().decode()  # type: ignore[no-untyped-call]
        totals: dict[str, float] = dict.fromkeys(OURS, 0.0)
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":
                continue
            for sample in family.samples:
                labels = sample.labels
                if sample.name.endswith("_total") and labels.get("verb") in WRITES and labels.get("resource") in OURS:
                    totals[labels["resource"]] += sample.value
        return totals


def status_writes(port: int) -> dict[str, float]:
    """The operator's own count of status writes, by writer (reconcile, telemetry)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.labels["writer"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "specinfer_status_writes"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def line(what: str, ours: str, floor: str, target: str) -> None:
    print(f"{what:<38} {ours:>22} {floor:>22}   target {target}", flush=True)


def start_operator(metrics_port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "specinfer-operator"), "--metrics-bind-address",
         f"127.0.0.1:{metrics_port}", "--metrics-secure=false",
         "--health-port", str(free_port()), "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def local_cluster(nodes: int, npus: int) -> Bench:
    """The local control plane with `nodes` simulated nodes of `npus` NPUs each, and the CRDs installed."""
    subprocess.run([str(CLUSTER), "up", "--nodes", str(nodes), "--npus", str(npus)], check=True, capture_output=True)
    env = subprocess.run([str(CLUSTER), "env"], capture_output=True, text=True, check=True).stdout
    kubeconfig = next(part.split("=", 1)[1] for part in env.split() if part.startswith("KUBECONFIG="))
    os.environ["KUBECONFIG"] = kubeconfig
    bin_dir = next(part.split('"', 2)[1].split(":", 1)[0] for part in env.split() if part.startswith('PATH="'))
    kubectl = str(Path(bin_dir) / "kubectl")  # the cluster's own, wherever SPECINFER_CLUSTER_DIR puts the cluster
    subprocess.run([kubectl, "apply", "--server-side", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    subprocess.run(
        [kubectl, "wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}"], check=True, capture_output=True
    )
    return Bench(config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]


def main() -> None:
    latency_only = "--latency-only" in sys.argv[1:]
    bench = local_cluster(32, 16)

    print(f"{'':<38} {'operator':>22} {'floor (children direct)':>22}")
    floor_ns = bench.namespace("bench-floor-latency")
    floor_latency = bench.deployment_latency(floor_ns, bench.create_children)
    bench.drop(floor_ns)
    floor_ns = bench.namespace("bench-floor-settled")
    floor_settled = bench.deployment_latency(floor_ns, bench.create_children, SETTLED_SAMPLES, SETTLE_SECONDS)
    admission = bench.request_latency(floor_ns, bench.create_resource)  # no operator: the request alone
    bench.drop(floor_ns)
    metrics_port = free_port()
    process = start_operator(metrics_port)
    time.sleep(3)
    ns = bench.namespace("bench-latency")
    latency = bench.deployment_latency(ns, bench.create_resource)
    for label, q, target in (
        ("apply -> Deployment p50", 0.5, "< 150 ms"),
        ("apply -> Deployment p99", 0.99, "< 1000 ms"),
    ):
        line(label, f"{percentile(latency, q) * 1000:.0f} ms", f"{percentile(floor_latency, q) * 1000:.0f} ms", target)
    print(f"{'  (mean over ' + str(LATENCY_SAMPLES) + ')':<38} {statistics.mean(latency) * 1000:>19.0f} ms "
          f"{statistics.mean(floor_latency) * 1000:>19.0f} ms")  # fmt: skip
    bench.drop(ns)
    ns = bench.namespace("bench-settled")
    settled = bench.deployment_latency(ns, bench.create_resource, SETTLED_SAMPLES, SETTLE_SECONDS)
    line(f"same, {SETTLE_SECONDS:g} s apart, p50", f"{percentile(settled, 0.5) * 1000:.0f} ms",
         f"{percentile(floor_settled, 0.5) * 1000:.0f} ms", "< 150 ms")  # fmt: skip
    line("creating the resource alone, p50", "-", f"{percentile(admission, 0.5) * 1000:.0f} ms", "-")
    bench.drop(ns)
    if latency_only:
        process.terminate()
        process.wait(timeout=60)
        return

    ns = bench.namespace("bench-scale")
    seconds = bench.to_ready(ns, bench.create_resource, bench.resources_ready)
    rss, peak = rss_mb(process.pid)
    # The first minute after Ready holds each resource's first measurement (one status write when its
    # pods answer no scrape); the second is the steady state.
    minutes = []
    for _ in range(2):
        before, writers = bench.writes(), status_writes(metrics_port)
        time.sleep(IDLE_SECONDS)
        after, writers_after = bench.writes(), status_writes(metrics_port)
        api = {k: after[k] - before[k] for k in OURS if after[k] != before[k]}
        ours = {k: v - writers.get(k, 0) for k, v in writers_after.items() if v != writers.get(k, 0)}
        minutes.append((api, ours))
    bench.drop(ns)
    process.terminate()
    process.wait(timeout=30)

    floor_ns = bench.namespace("bench-floor-scale")
    floor_seconds = bench.to_ready(floor_ns, bench.create_children, bench.deployments_available)
    bench.drop(floor_ns)
    line(f"{SCALE} resources to Ready", f"{seconds:.1f} s", f"{floor_seconds:.1f} s", "< 120 s")
    line("operator RSS (now / peak)", f"{rss:.0f} / {peak:.0f} MB", "-", "< 200 MB")
    for label, (api, ours) in zip(("first minute after Ready", "steady state, next minute"), minutes, strict=True):
        per_minute = sum(api.values()) * 60 / IDLE_SECONDS
        line(f"API writes/min, {label}", f"{per_minute:.0f}", "0", "0" if label.startswith("steady") else "-")
        print(f"{'':<6}by resource {api or '{}'}; status writes by writer {ours or '{}'}", flush=True)


if __name__ == "__main__":
    main()
