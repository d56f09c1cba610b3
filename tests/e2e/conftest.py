"""A real Kubernetes control plane for the e2e suite.

By default `hack/cluster up` starts one on loopback (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok simulating Ascend NPU nodes, all built from Go modules) and `hack/cluster down`
stops it at the end. Set SPECINFER_E2E_KUBECONFIG to run the same suite against an existing cluster
(kind, or a real one) instead; SPECINFER_E2E_KEEP=1 leaves a started cluster running.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from hack.controlplane.nodes import NPU_RESOURCE
from hack.hostile import Server
from hack.kubeclient import Cluster, wait_until

# The real engine (skipped without SPECINFER_ENGINE_VENV) for the tests that put one behind a pod.
from tests.engine.conftest import engine_env, engine_venv, models  # noqa: F401

REAL_ENGINE = "real_engine"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{REAL_ENGINE}: a real engine stands behind the pods (-m 'not {REAL_ENGINE}' leaves them out)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests with a real engine behind their pods, marked by the fixture they take: make test runs the
    others beside the engine suite, these after it (both want the CPU)."""
    for item in items:
        if "engine_env" in getattr(item, "fixturenames", ()):
            item.add_marker(REAL_ENGINE)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report ends with the cluster's state then: whether each node was Ready (or tainted) and
    which pods held NPUs, so that a failure seen only in CI's log says whether the nodes or a neighbour were the
    cause."""
    report = yield
    handle = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and call.when == "call" and isinstance(handle, Cluster):
        report.sections.append(("cluster state at the failure", cluster_state(handle)))
    return report


def cluster_state(cluster: Cluster) -> str:
    """Nodes (Ready, taints) and the pods that request NPUs, one line each; what could not be read, said."""
    lines = []
    try:
        for node in cluster.get("nodes")["items"]:
            conditions: list[dict[str, str]] = node["status"].get("conditions", [])
            ready = next((c for c in conditions if c["type"] == "Ready"), {})
            taints = [t["key"] for t in node["spec"].get("taints", [])]
            lines.append(f"node {node['metadata']['name']}: Ready={ready.get('status')} taints={taints}")
        for pod in cluster.get("pods", "--all-namespaces")["items"]:
            asked = sum(
                int(c.get("resources", {}).get("requests", {}).get(NPU_RESOURCE, 0)) for c in pod["spec"]["containers"]
            )
            if asked:
                meta = pod["metadata"]
                gone = " terminating" if meta.get("deletionTimestamp") else ""
                lines.append(
                    f"pod {meta['namespace']}/{meta['name']}: {asked} NPUs on {pod['spec'].get('nodeName')}"
                    f" {pod['status'].get('phase')}{gone}"
                )
    except (AssertionError, subprocess.SubprocessError, KeyError, ValueError) as failure:
        lines.append(f"(not read: {failure})")
    return "\n".join(lines)


ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "hack" / "cluster"
CRD_NAME = "speculativeinferences.specinfer.io"
EAGER_REFRESH = 5  # seconds: eager_operator's --status-refresh
# The simulated cluster the NPU tests are written for (their messages count these nodes).
NODES, NPUS_PER_NODE = 2, 8


def _cluster_env() -> dict[str, str]:
    """KUBECONFIG and PATH as `hack/cluster env` prints them."""
    out = subprocess.run([str(CLUSTER), "env"], capture_output=True, text=True, check=True).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line.removeprefix("export ").split("=", 1)
            env[key] = value.strip("'\"")
    return env


def _kubectl_for(env: dict[str, str]) -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl", path=env.get("PATH"))
    if not found:
        raise RuntimeError("kubectl not found: set KUBECTL or put kubectl on PATH")
    return found


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("SPECINFER_E2E_KUBECONFIG")
    started = False
    if external:
        kubeconfig, env = external, dict(os.environ)
    else:
        already_up = subprocess.run([str(CLUSTER), "status"], capture_output=True, check=False).returncode == 0
        subprocess.run([str(CLUSTER), "up", "--nodes", str(NODES), "--npus", str(NPUS_PER_NODE)], check=True)
        started = not already_up
        env = _cluster_env()
        kubeconfig = env["KUBECONFIG"]
    api = config.new_client_from_config(config_file=kubeconfig)
    handle = Cluster(kubeconfig, _kubectl_for(env), api)
    handle.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    handle.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    try:
        yield handle
    finally:
        api.close()
        if started and not os.environ.get("SPECINFER_E2E_KEEP"):
            subprocess.run([str(CLUSTER), "down"], check=False)


CACHE = Path(os.environ.get("SPECINFER_CACHE", Path.home() / ".cache" / "specinfer"))


def pinned() -> dict[str, str]:
    """hack/versions.env: each pinned version by its variable."""
    lines = (ROOT / "hack" / "versions.env").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition("=") for line in lines) if value}


def module_crd(target: str, stem: str, version: str) -> Path:
    """A CRD build-binaries.sh fetches from its project's module (`target`), once, into the cache as
    crds/STEM-VERSION.yaml, VERSION pinned in hack/versions.env under `version`."""
    subprocess.run([str(ROOT / "hack" / "build-binaries.sh"), target], check=True)
    return CACHE / "crds" / f"{stem}-{pinned()[version]}.yaml"


@pytest.fixture(scope="session")
def gitops_tools() -> dict[str, Path]:
    """The healthcheck tool (Argo CD Lua, kstatus), the prometheus-operator CRDs and the Flux and Argo CD CRDs
    (directories), Prometheus, promtool and prometheus-adapter, built or fetched once into the cache."""
    build = [
        str(ROOT / "hack" / "build-binaries.sh"),
        *("healthcheck", "monitoring-crds", "gitops-crds", "prometheus", "prometheus-adapter"),
    ]
    subprocess.run(build, check=True)
    versions = pinned()
    binaries = CACHE / "bin"
    crds = CACHE / "crds" / f"monitoring-{versions['PROMETHEUS_OPERATOR_VERSION']}"
    flux = ("FLUX_SOURCE_CONTROLLER_VERSION", "FLUX_HELM_CONTROLLER_VERSION", "FLUX_KUSTOMIZE_CONTROLLER_VERSION")
    gitops = "-".join(versions[v] for v in (*flux, "ARGOCD_VERSION"))  # as build-binaries.sh names it
    return {
        "healthcheck": binaries / "healthcheck",
        "monitoring-crds": crds,
        "gitops-crds": CACHE / "crds" / f"gitops-{gitops}",
        "prometheus": binaries / "prometheus",
        "promtool": binaries / "promtool",
        "prometheus-adapter": binaries / "prometheus-adapter",
    }


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Loopback servers a test starts (behind simulated pods' addresses), stopped afterwards."""
    started: list[Server] = []
    yield started
    for server in started:
        server.__exit__()


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace of its own for each test, deleted afterwards (and waited for: its pods hold NPUs)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_until(
        f"the default ServiceAccount in {name}",
        lambda: cluster.core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
    )
    try:
        yield name
    finally:
        cluster.core.delete_namespace(name, propagation_policy="Background")
        wait_until(
            f"namespace {name} to be deleted",
            lambda: cluster.kubectl("get", "namespace", name, check=False).returncode != 0,
            timeout=120,
        )


def admission_policy(
    name: str, namespace: str, rule: dict[str, Any], expression: str, message: str
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy, and its binding to `namespace`, refusing the requests of `rule` (a
    resourceRule) for which `expression` is false: the kind of policy platforms run (Kyverno, Gatekeeper)."""
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [{"expression": expression, "message": message}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        },
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def terminate(process: subprocess.Popen[bytes]) -> None:
    """Stop a server the tests started: SIGTERM, then SIGKILL after 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


def local_get(port: int, path: str) -> str:
    """The body of a local endpoint, or "" while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            text: str = response.read().decode()
            return text
    except OSError:
        return ""


class Operator:
    """specinfer-operator as a process, the way a Deployment would run it."""

    def __init__(self, kubeconfig: str, log_dir: Path, *flags: str) -> None:
        self.kubeconfig, self.log_dir, self.flags = kubeconfig, log_dir, flags
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port, self.health_port = free_port(), free_port()
        self.starts = 0

    def start(self, wait: bool = True) -> None:
        self.starts += 1
        log = open(self.log_dir / f"operator-{self.metrics_port}-{self.starts}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                str(ROOT / ".venv" / "bin" / "specinfer-operator"),
                # Plain HTTP on loopback, as for a sidecar: the suite reads the figures without a token.
                # test_operator_endpoints.py runs the default, HTTPS with the API server's authorization.
                "--metrics-bind-address",
                f"127.0.0.1:{self.metrics_port}",
                "--metrics-secure=false",
                "--health-port",
                str(self.health_port),
                "--runtime-image",
                "registry.example.com/specinfer-runtime:test",
                *self.flags,
            ],
            env={**os.environ, "KUBECONFIG": self.kubeconfig},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        if wait:
            wait_until("the operator's metrics endpoint", self.metrics, timeout=30)

    def metrics(self) -> str:
        return local_get(self.metrics_port, "/metrics")

    def health(self) -> str:
        return local_get(self.health_port, "/healthz")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as when a node dies."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
            self.process = None


@pytest.fixture(scope="session")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    handle = Operator(cluster.kubeconfig, tmp_path_factory.mktemp("operator"))
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def no_shared_operator(operator: Operator) -> Iterator[None]:
    """Stop the session's (cluster-admin) operator, so that whatever reconciles is the one under test."""
    operator.stop()
    try:
        yield
    finally:
        operator.start()


@pytest.fixture
def eager_operator(cluster: Cluster, namespace: str, tmp_path: Path, no_shared_operator: None) -> Iterator[Operator]:
    """An operator of this namespace that writes the measured figures at every scrape of the tests' resources
    (--status-refresh EAGER_REFRESH, their spec.telemetry.intervalSeconds): steady figures are otherwise written
    every five minutes, and these tests read windows that begin after a change."""
    handle = Operator(cluster.kubeconfig, tmp_path, "--namespace", namespace, "--status-refresh", str(EAGER_REFRESH))
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()


def bind_claim(cluster: Cluster, volume: str, namespace: str, claim: str) -> None:
    """A PersistentVolume `volume` bound in advance to the claim the operator will make (the local cluster has
    no provisioner; kwok mounts nothing: the harnesses use a directory of the test for the claim)."""
    persistent = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "e2e",
            "hostPath": {"path": f"/data/{volume}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(persistent))


@pytest.fixture
def learning_operator(cluster: Cluster, namespace: str, tmp_path: Path, no_shared_operator: None) -> Iterator[Operator]:
    """An operator of this namespace under a tenant policy that allows learning, which the default refuses."""
    name = f"{namespace}-learning"
    policy = {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInferencePolicy",
        "metadata": {"name": name},
        "spec": {"learningAllowed": True},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(policy))
    handle = Operator(cluster.kubeconfig, tmp_path, "--namespace", namespace, "--tenant-policy", name)
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()
        cluster.kubectl("delete", "speculativeinferencepolicy", name, "--wait=false", check=False)


@pytest.fixture
def namespaces(cluster: Cluster) -> Iterator[list[str]]:
    """Namespaces a test makes (each with labels of its own), deleted afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        cluster.core.delete_namespace(name, propagation_policy="Background")
    for name in made:
        wait_until(
            f"namespace {name} to be deleted",
            lambda name=name: cluster.kubectl("get", "namespace", name, check=False).returncode != 0,
            timeout=120,
        )
