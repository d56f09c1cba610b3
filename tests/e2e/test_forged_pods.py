"""Pods a tenant forges as another resource's engines, on the real API server: labelled as its engines, with
its configuration's hash, and a controller reference naming the resource itself or its Deployments (their
uids are readable by anyone who may `get` them). Served from loopback with counters far from the real
engines', they must move nothing of the victim: its figures, its tuning profiles, its canary's figures and
verdict come from the pods its own workloads made, with its rendered engine, and from no other."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import yaml

from hack.hostile import Server, answer, counter_lines, engine
from hack.kubeclient import Cluster, pods, wait_until
from specinfer_operator.api.labels import CONFIG_HASH_ANNOTATION, TEMPLATE_HASH_LABEL
from specinfer_operator.controller.conditions import MEASURED_CONDITION
from specinfer_operator.measure import acceptance, timing
from tests.e2e.conftest import Operator
from tests.e2e.test_canary import phase
from tests.e2e.test_hostile_pods import metric
from tests.e2e.test_operator import apply, resource, wait_ready, wait_resource

INTERVAL = 5
NAME = "victim"
# The real engines answer hack.hostile.engine(): 100 drafts of 3 tokens and 30 accepted per scrape, decode
# steps of 10 ms, 1.32 tokens per step.
REAL_RATE, REAL_STEP_MS = 0.1, 10.0


def victim(k: int) -> dict[str, Any]:
    return {
        "model": {"name": "Qwen/Qwen3-8B"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": k, "tuning": {"mode": "Recommend"}},
        "replicas": 2,
        "rollout": {"strategy": "Canary"},
        "telemetry": {"intervalSeconds": INTERVAL, "windowSeconds": 60, "minDrafts": 1},
    }


def forged_counters(accepted: int, step_seconds: float) -> bytes:
    """Counters of 100,000 drafts of 3 tokens, `accepted` of them accepted, and 300,000 decode steps taking
    `step_seconds` in all: nothing like the real engines'."""
    return counter_lines(
        [
            f'{acceptance.DRAFTS}{{model_name="m"}} 100000',
            f'{acceptance.DRAFT_TOKENS}{{model_name="m"}} 300000',
            f'{acceptance.ACCEPTED}{{model_name="m"}} {accepted}',
            *(f'{acceptance.ACCEPTED_PER_POSITION}{{model_name="m",position="{p}"}} {accepted // 3}' for p in range(3)),
            f'{timing.STEPS}{{model_name="m"}} 300000',
            f'{timing.STEP_SECONDS}{{model_name="m"}} {step_seconds}',
            f'{timing.GENERATED}{{model_name="m"}} 900000',
            f'{timing.REQUESTS}{{model_name="m"}} 100',
            f'{timing.ITERATIONS}{{model_name="m"}} 300000',
        ]
    )


HIGH = forged_counters(accepted=299_000, step_seconds=600.0)  # nearly every draft accepted, 2 ms steps
LOW = forged_counters(accepted=1_000, step_seconds=30_000.0)  # nearly none, 100 ms steps


def made_by_workload(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The victim's pods its ReplicaSets made (not the forged ones), Ready with an address."""
    return [
        p
        for p in pods(cluster, namespace, NAME)
        if any(r.get("kind") == "ReplicaSet" for r in p["metadata"].get("ownerReferences") or [])
        and p["status"].get("podIP")
    ]


def forge(
    cluster: Cluster, namespace: str, name: str, like: dict[str, Any], owner: dict[str, Any], started: list[Server]
) -> None:
    """A pod like `like` (its labels without the pod-template hash, its configuration's hash, its
    containers), whose controller is `owner`, served `body` from its own loopback address."""
    labels = {k: v for k, v in like["metadata"]["labels"].items() if k != TEMPLATE_HASH_LABEL}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {CONFIG_HASH_ANNOTATION: like["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]},
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": copy.deepcopy(like["spec"]["containers"]),
            "volumes": copy.deepcopy(like["spec"].get("volumes") or []),
            "nodeName": like["spec"]["nodeName"],
            "automountServiceAccountToken": False,
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(body))
    address = wait_until(
        f"the address of {name}", lambda: cluster.get("pod", "-n", namespace, name)["status"].get("podIP")
    )
    for gone in [s for s in started if s.host == address]:  # a pod gone before (the canary took its place)
        gone.__exit__()
        started.remove(gone)
    served = HIGH if "high" in name else LOW
    started.append(Server(answer(served), address, 8000).__enter__())


def figures(obj: dict[str, Any]) -> dict[str, Any]:
    return ((obj.get("status") or {}).get("speculation") or {}).get("observed") or {}


def canary_figures(obj: dict[str, Any]) -> dict[str, Any]:
    return (((obj.get("status") or {}).get("rollout") or {}).get("canary") or {}).get("observed") or {}


def starved(seen: dict[str, Any], pod: dict[str, Any]) -> bool:
    """The real engine's scrape timed out, alone: its server is a thread of this test, and the engine suite beside
    it may keep both cores for longer than the operator's 2 s. A round without its figures, not forged ones."""
    failures = seen.get("scrapeFailures") or []
    return [(f["pod"], f["result"]) for f in failures] == [(pod["metadata"]["name"], "timeout")]


@pytest.mark.usefixtures("operator")
def test_forged_engines_move_nothing_of_the_victim(
    cluster: Cluster, namespace: str, operator: Operator, servers: list[Server]
) -> None:
    apply(cluster, namespace, NAME, victim(k=3))
    wait_ready(cluster, namespace, NAME)
    stable = wait_until("the two engines", lambda: len(made_by_workload(cluster, namespace)) == 2)
    assert stable
    for real in made_by_workload(cluster, namespace):
        servers.append(Server(engine(), real["status"]["podIP"], 8000).__enter__())
    wait_resource(cluster, namespace, NAME, "the real figures", lambda o: figures(o).get("podsMeasured") == 2, 60)

    # A canary of K=4: one pod beside one stable pod; nothing answers for it, so it waits for evidence.
    apply(cluster, namespace, NAME, victim(k=4))
    obj = wait_resource(cluster, namespace, NAME, "STATUS Canary", phase("Canary"), 60)
    canary_hash = obj["status"]["rollout"]["canary"]["configHash"]
    canary_pod = wait_until(
        "the canary's pod",
        lambda: next(
            (
                p
                for p in made_by_workload(cluster, namespace)
                if p["metadata"]["annotations"].get(CONFIG_HASH_ANNOTATION) == canary_hash
            ),
            None,
        ),
    )
    (stable_pod,) = wait_until(
        "one stable pod beside the canary's",
        lambda: (
            [
                p
                for p in made_by_workload(cluster, namespace)
                if p["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] != canary_hash
            ]
            if len(made_by_workload(cluster, namespace)) == 2
            else None
        ),
    )
    # The engine of the stable pod the canary replaced goes with its pod: kwok may give that pod's address to
    # the canary's, which no engine serves.
    for gone in [s for s in servers if s.host != stable_pod["status"]["podIP"]]:
        gone.__exit__()
        servers.remove(gone)
    wait_resource(cluster, namespace, NAME, "an unmeasured canary", lambda o: not canary_figures(o).get("podsMeasured"))
    owner = resource(cluster, namespace, NAME)
    stable_deployment = cluster.get("deployment", "-n", namespace, NAME)
    canary_deployment = cluster.get("deployment", "-n", namespace, f"{NAME}-canary")
    foreign = metric(operator, "specinfer_scrapes_total", 'result="foreign"')
    forge(cluster, namespace, "forged-high-owner", stable_pod, owner, servers)
    forge(cluster, namespace, "forged-high-deployment", stable_pod, stable_deployment, servers)
    forge(cluster, namespace, "forged-low-canary-owner", canary_pod, owner, servers)
    forge(cluster, namespace, "forged-low-canary-deployment", canary_pod, canary_deployment, servers)

    # Every round for six intervals: the figures are the one real stable engine's, the canary has none, the
    # tuning profiles are the real engine's, and the canary still waits.
    wait_until(
        "the forged pods to be refused",
        lambda: metric(operator, "specinfer_scrapes_total", 'result="foreign"') > foreign,
    )
    ended, rounds, measured = time.monotonic() + 6 * INTERVAL, 0, 0
    while True:
        rounds += 1
        obj = resource(cluster, namespace, NAME)
        seen = figures(obj)
        assert seen.get("pods") == 1, seen
        if seen.get("podsMeasured") != 0 or not starved(seen, stable_pod):
            assert seen.get("podsMeasured") == 1, seen.get("scrapeFailures")
            assert seen.get("acceptanceRate") == pytest.approx(REAL_RATE), seen
            assert seen.get("stepMilliseconds") == pytest.approx(REAL_STEP_MS), seen
            measured += 1
        canary = canary_figures(obj)
        assert canary.get("podsMeasured", 0) == 0, canary
        assert canary.get("pods", 1) == 1, canary
        assert obj["status"]["rollout"]["canary"]["phase"] == "Canary", obj["status"]["rollout"]
        for profile in (obj["status"].get("tuning") or {}).get("profiles") or []:
            assert profile["stepMilliseconds"] == pytest.approx(REAL_STEP_MS), profile
        # 1.3 tokens per step, below minMeanAcceptanceLength 1.5: the forged figures would lift it above.
        low = next(c for c in obj["status"]["conditions"] if c["type"] == MEASURED_CONDITION)
        assert low["status"] == "True", low
        if time.monotonic() > ended:
            break
        time.sleep(1)
    assert 2 * measured > rounds, f"the real engine's figures in {measured} rounds of {rounds}"
