"""The operator's own ports against the real API server: /metrics over HTTPS for the tokens RBAC allows, and
ports whose threads and descriptors do not grow with the connections anyone opens."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hack.kubeclient import Cluster, wait_until
from tests.e2e.conftest import Operator, free_port, local_get

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


def reader_rbac(namespace: str) -> list[dict[str, object]]:
    """What the chart grants Prometheus: get on the non-resource URL /metrics, bound to one ServiceAccount."""
    name = f"{namespace}-metrics-reader"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus", "namespace": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "someone", "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
        },
    ]


@pytest.fixture
def secure_operator(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[tuple[Operator, int]]:
    """An operator of this namespace with the default metrics serving (HTTPS, reviewed tokens) on a loopback port."""
    port = free_port()
    flags = ("--namespace", namespace, "--metrics-bind-address", f"127.0.0.1:{port}", "--metrics-secure=true")
    handle = Operator(cluster.kubeconfig, tmp_path, *flags)  # these flags come last, so they win
    handle.start(wait=False)
    try:
        wait_until("the operator's health endpoint", handle.health, timeout=30)
        wait_until("the operator's metrics port", lambda: get(port)[0] == 401, timeout=30)
        yield handle, port
    finally:
        handle.stop()


def test_metrics_answer_only_tokens_rbac_allows(
    cluster: Cluster, namespace: str, secure_operator: tuple[Operator, int]
) -> None:
    _, port = secure_operator
    objects = reader_rbac(namespace)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    try:
        reader = cluster.kubectl("create", "token", "prometheus", "-n", namespace).stdout.strip()
        someone = cluster.kubectl("create", "token", "someone", "-n", namespace).stdout.strip()
        assert get(port)[0] == 401
        assert get(port, token="not-a-token")[0] == 401
        assert get(port, token=someone)[0] == 403
        _, body = wait_until(
            "the reader's binding to take effect", lambda: (s := get(port, token=reader))[0] == 200 and s
        )
        assert "specinfer_reconcile_duration_seconds" in body
        assert get(port, "/healthz", token=reader)[0] == 404  # the metrics port serves nothing else
    finally:
        for kind in ("clusterrolebinding", "clusterrole"):
            cluster.kubectl("delete", kind, f"{namespace}-metrics-reader", "--ignore-not-found")


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
        held_threads, held_descriptors = threads_and_descriptors(pid)
        assert held_threads - threads < 8, (threads, held_threads)
        assert held_descriptors - descriptors < 64, (descriptors, held_descriptors)  # 8 + 4 per peer, not 600
    finally:
        for sock in idle + health:
            sock.close()
    wait_until("the port to serve again", lambda: get(port)[0] == 401, timeout=30)
    wait_until("the health port to serve again", lambda: local_get(operator.health_port, "/healthz"), timeout=30)
    assert local_get(operator.health_port, "/metrics") == ""  # 404: health answers nothing but the probes
