"""The operator's own ports against the real API server: /metrics over HTTPS for the tokens RBAC allows, and
ports whose threads and descriptors do not grow with the connections anyone opens."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, wait_until
from tests.e2e.conftest import Operator, free_port, local_get
from tests.e2e.test_chart import CHART, helm
from tests.e2e.test_chart_install import token_kubeconfig

IDLE = 300  # connections opened and held: the old server spent a thread on each


def get(port: int, path: str = "/metrics", token: str = "") -> tuple[int, str]:
    """Status and body of an HTTPS GET on loopback; the certificate is the operator's self-signed one."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_rbac(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC for an operator of `namespace`, released there under a name of its
    own, with the metrics reader bound to the ServiceAccount `prometheus` (which this adds)."""
    values = [
        *("--set", f"watchNamespaces={{{namespace}}}", "--set", "leaderElection.enabled=false"),
        *("--set", "replicaCount=1", "--set", "metrics.reader.serviceAccount.name=prometheus"),
        *("--set", f"metrics.reader.serviceAccount.namespace={namespace}"),
    ]
    out = helm(cluster, "template", f"m-{namespace}", str(CHART), "--namespace", namespace, *values).stdout
    objects = [doc for doc in yaml.safe_load_all(out) if doc and doc["kind"] in RBAC_KINDS]
    for name in ("prometheus", "someone"):
        objects.append(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        )
    return objects


@pytest.fixture
def secure_operator(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[tuple[Operator, int]]:
    """An operator of this namespace under the chart's ServiceAccount and RBAC, with the default metrics serving
    (HTTPS, reviewed tokens) on a loopback port."""
    objects = chart_rbac(cluster, namespace)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    (account,) = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"].startswith("m-")
    ]
    kubeconfig = token_kubeconfig(cluster, namespace, account, tmp_path / "operator.kubeconfig")
    port = free_port()
    flags = ("--namespace", namespace, "--metrics-bind-address", f"127.0.0.1:{port}", "--metrics-secure=true")
    handle = Operator(str(kubeconfig), tmp_path, *flags)  # these flags come last, so they win
    handle.start(wait=False)
    try:
        wait_until("the operator's health endpoint", handle.health, timeout=30)
        wait_until("the operator's metrics port", lambda: get(port)[0] == 401, timeout=30)
        yield handle, port
    finally:
        handle.stop()
        for obj in objects:
            if "namespace" not in obj["metadata"]:
                cluster.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found")


def test_metrics_answer_only_tokens_rbac_allows(
    cluster: Cluster, namespace: str, secure_operator: tuple[Operator, int]
) -> None:
    """The operator reviews each token with the chart's RBAC; the chart's reader role is what lets Prometheus in."""
    _, port = secure_operator
    reader = cluster.kubectl("create", "token", "prometheus", "-n", namespace).stdout.strip()
    someone = cluster.kubectl("create", "token", "someone", "-n", namespace).stdout.strip()
    assert get(port)[0] == 401
    assert get(port, token="not-a-token")[0] == 401
    assert get(port, token=someone)[0] == 403
    # 200 once the API server's authorizer has seen the binding (a 403 before it is kept 10 s).
    _, body = wait_until("the reader's verdict", lambda: (answer := get(port, token=reader))[0] == 200 and answer)
    assert "specinfer_reconcile_duration_seconds" in body
    assert get(port, "/healthz", token=reader)[0] == 404  # the metrics port serves nothing else


def test_plain_http_gets_nothing_from_the_tls_port(secure_operator: tuple[Operator, int]) -> None:
    _, port = secure_operator
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/")


def threads_and_descriptors(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def test_idle_connections_cost_no_threads(secure_operator: tuple[Operator, int]) -> None:
    """Before, each idle connection held a thread until the client left; now those over the bound are closed at
    once, and those within it for at most the handshake timeout."""
    operator, port = secure_operator
    assert operator.process is not None
    pid = operator.process.pid
    threads, descriptors = threads_and_descriptors(pid)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(IDLE)]
    health = [socket.create_connection(("127.0.0.1", operator.health_port), timeout=10) for _ in range(IDLE)]
    try:
        # No connection ever gets a thread; each is closed at once, or after its timeout within the bound. The old
        # server spent a thread (and kept a descriptor) on each until the client left.
        assert threads_and_descriptors(pid)[0] - threads < 8
        wait_until(
            "the held connections' descriptors to be released",
            lambda: threads_and_descriptors(pid)[1] - descriptors < 64,  # 32 + 32 at most
            timeout=60,
        )
        assert threads_and_descriptors(pid)[0] - threads < 8
    finally:
        for sock in idle + health:
            sock.close()
    wait_until("the port to serve again", lambda: get(port)[0] == 401, timeout=30)
    wait_until("the health port to serve again", lambda: local_get(operator.health_port, "/healthz"), timeout=30)
    assert local_get(operator.health_port, "/metrics") == ""  # 404: health answers nothing but the probes
