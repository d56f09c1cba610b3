"""A cluster as the e2e tests and `make run` drive it: kubectl with its kubeconfig, the API clients, and a poll."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client


@dataclass
class Cluster:
    kubeconfig: str
    kubectl_path: str
    api: client.ApiClient

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; output is text."""
        result = subprocess.run(
            [self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
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


def wait_until(what: str, check: Any, timeout: float = 60, interval: float = 0.5) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={name}"
    items: list[dict[str, Any]] = cluster.get("pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]
