"""A cluster as the e2e tests and `make run` drive it: kubectl with its kubeconfig, the API clients, and a poll."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

# What kubectl prints when the connection failed rather than the request: the API server stalled or restarted
# (an HTTP/2 ping unanswered for 15 s after 30 s of silence is "client connection lost"). Every command the tests
# send is safe to send again (apply, get, patch to a value, delete --ignore-not-found), as a real client would.
TRANSPORT_FAILURES = (
    "http2: client connection lost",
    "connection refused",
    "connection reset by peer",
    "TLS handshake timeout",
    "unexpected EOF",
)
ATTEMPTS = 3
SLOW_WAIT = 30  # seconds: a wait this long is reported, so that a test that fails later says where time went


@dataclass
class Cluster:
    kubeconfig: str
    kubectl_path: str
    api: client.ApiClient

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; output is text. A command whose connection failed is sent again."""
        for attempt in range(1, ATTEMPTS + 1):
            result = subprocess.run(
                [self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if result.returncode == 0 or attempt == ATTEMPTS or not transport_failure(result.stderr):
                break
            print(f"kubectl {' '.join(args)}: {result.stderr.strip()[-200:]}; sending it again", file=sys.stderr)
            time.sleep(2)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ... -o json`, parsed."""
        loaded: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return loaded

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


def transport_failure(stderr: str) -> bool:
    """Whether kubectl failed to reach the API server, as opposed to the server refusing the request."""
    return any(failure in stderr for failure in TRANSPORT_FAILURES)


def wait_until(
    what: str, check: Any, timeout: float = 60, interval: float = 0.5, state: Callable[[], str] | None = None
) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds, and with what
    `state` says then, if given (what the test saw, to explain the failure)."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        value = check()
        if value:
            if (waited := time.monotonic() - start) > SLOW_WAIT:
                print(f"waited {waited:.0f}s for {what}", file=sys.stderr)  # shown with a failure of the test
            return value
        if time.monotonic() > deadline:
            seen = f" ({state()})" if state is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{seen}")
        time.sleep(interval)


def engine_selector(name: str) -> str:
    """The label selector of resource `name`'s engine pods (its training pods, spec.learning's, are not among them)."""
    return f"app.kubernetes.io/name=specinfer-engine,app.kubernetes.io/instance={name}"


def pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The engine pods of resource `name` that are not terminating."""
    items: list[dict[str, Any]] = cluster.get("pods", "-n", namespace, "-l", engine_selector(name))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]
