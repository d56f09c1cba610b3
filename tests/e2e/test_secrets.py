"""A Secret's value never reaches what whoever may read the resource reads: its status, its events, the
operator's log. A process that cannot start prints its environment (Python: `PYTHONHOME = '<value>'`), and
the kubelet makes a crashed container's last log lines its termination message when the container asks for
it (terminationMessagePolicy FallbackToLogsOnError).

kwok runs no containers, so this test is the node: it starts each container's process for real (Python,
with the environment the kubelet would give it, the Secret's value resolved), and reports the crash in the
pod's status the way the kubelet does, by the container's own terminationMessagePolicy."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from typing import Any

import yaml

from hack.kubeclient import Cluster, pods, wait_until
from tests.e2e.conftest import Operator
from tests.e2e.test_operator import apply, condition, resource, wait_ready, wait_resource

SECRET, KEY = "vllm-api-key", "PYTHONHOME"  # a name the default tenant policy allows
KUBELET_TAIL_LINES, KUBELET_TAIL_BYTES = 80, 2048  # what the kubelet takes of a log for a termination message


def environment(cluster: Cluster, namespace: str, container: dict[str, Any]) -> dict[str, str]:
    """The environment the kubelet gives `container`, Secrets resolved."""
    found: dict[str, str] = {}

    def secret(name: str) -> dict[str, str]:
        data = cluster.get("secret", "-n", namespace, name)["data"]
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    for source in container.get("envFrom") or []:
        if "secretRef" in source:
            found.update(secret(source["secretRef"]["name"]))
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            found[var["name"]] = secret(ref["name"])[ref["key"]]
        elif "value" in var:
            found[var["name"]] = var["value"]
    return found


def crash(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    """Start each container's process with its environment, and report how it ended as the kubelet would.
    Every process is Python, which cannot start with this PYTHONHOME and prints it. The engine's process is
    specinfer-runtime, which never got to write its termination log; the sidecar writes its own output
    there (what a process may do with what it reads)."""
    statuses = []
    for container in pod["spec"]["containers"]:
        env = {"PATH": "/usr/bin:/bin", **environment(cluster, namespace, container)}
        ran = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, check=False)
        assert ran.returncode != 0, ran
        assert "PYTHONHOME" in ran.stderr, ran
        written = "" if container["name"] == "engine" else ran.stderr
        if not written and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            written = "\n".join(ran.stderr.splitlines()[-KUBELET_TAIL_LINES:])[-KUBELET_TAIL_BYTES:]
        statuses.append(
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}},
                "lastState": {"terminated": {"exitCode": ran.returncode, "reason": "Error", "message": written}},
            }
        )
    not_ready = {"status": "False", "reason": "ContainersNotReady"}
    conditions = [{"type": "Ready", **not_ready}, {"type": "ContainersReady", **not_ready}]
    patch = {"status": {"conditions": conditions, "containerStatuses": statuses}}
    cluster.kubectl(
        "patch",
        "pod",
        "-n",
        namespace,
        pod["metadata"]["name"],
        "--subresource=status",
        "--type=strategic",
        "-p",
        yaml.safe_dump(patch),
    )


def crashing(obj: dict[str, Any]) -> bool:
    """The status tells the crash loop."""
    return condition(obj, "Ready").get("reason") == "CrashLoopBackOff"


def test_a_secrets_value_reaches_no_status_event_or_log(cluster: Cluster, namespace: str, operator: Operator) -> None:
    value = f"value-of-a-secret-{uuid.uuid4().hex}"
    cluster.kubectl("create", "secret", "generic", SECRET, "-n", namespace, f"--from-literal=PYTHONHOME={value}")
    spec = {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
        "replicas": 1,
        "runtime": {
            "env": [{"name": "PYTHONHOME", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "PYTHONHOME"}}}]
        },
        "podTemplate": {
            "spec": {
                "containers": [
                    {
                        "name": "proxy",
                        "image": "registry.example.com/proxy:1",
                        "envFrom": [{"secretRef": {"name": SECRET}}],
                        "securityContext": {"runAsUser": 1000},
                    }
                ]
            }
        },
    }
    apply(cluster, namespace, "leaky", spec)
    wait_ready(cluster, namespace, "leaky")
    (pod,) = wait_until("the pod", lambda: pods(cluster, namespace, "leaky"))
    crash(cluster, namespace, pod)
    obj = wait_resource(cluster, namespace, "leaky", "CrashLoopBackOff", crashing)
    said = condition(obj, "Ready")["message"]
    assert said.endswith("last exit: exit code 1") or "last exit of container proxy: exit code 1" in said, said

    shown = {
        "the resource": yaml.safe_dump(resource(cluster, namespace, "leaky")),
        "its events": cluster.kubectl("get", "events", "-n", namespace, "-o", "yaml").stdout,
        "the operator's log": "".join(p.read_text(errors="replace") for p in operator.log_dir.iterdir()),
    }
    for where, text in shown.items():
        assert value not in text, f"the Secret's value is in {where}"
