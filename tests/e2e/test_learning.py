"""spec.learning end to end, on real engines and real training runs behind simulated pods: the draft gets better
from the traffic it serves, without a person.

The target is hack/learnmodel's (trained on the corpus), its starting draft its untrained EAGLE-3 head. A loopback
client sends the corpus' first 70 % as traffic; the engines record it on the resource's claim (a directory of the
test behind a bound PersistentVolume), the operator starts a training Job once enough was recorded, the harness
runs specinfer-train behind the Job's pod (hack/podtrainer.py), and the trained generation goes to its canary,
which sees prompts from the corpus' last 30 %, never trained on, and promotes it. A second resource, whose draft
already serves well, records only junk: the generation trained on it is rolled back by its canary, the junk is
quarantined, and the next run trains on what was recorded after it alone.

Learning is off in the default tenant policy (served prompts are the tenant's data): these tests run an operator
of their namespace under a policy that opts in.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.claims import claim_directory
from hack.engine import MAX_MODEL_LEN, SERVED_NAME, engine_python, environment
from hack.kubeclient import Cluster, wait_until
from hack.learnmodel import PROMPT_CHARACTERS, TRAFFIC, LearningModels, prompts
from hack.podengine import Fleet, PodEngine
from hack.podtrainer import Trainers
from specinfer_operator.measure.window import Counts
from tests.e2e.conftest import bind_claim
from tests.e2e.test_acceptance import engine_counts
from tests.e2e.test_operator import apply, resource, wait_ready
from tests.e2e.test_rollback import events

NAME = "learner"
NEED = 150  # draft tokens on each side before each comparison
VERDICT = 600  # seconds of canary traffic before its verdict must be in
TRAINED = 900  # seconds from enough traffic to a trained generation on its canary (learning steps every 30 s)


@pytest.fixture(scope="module")
def learning_models(engine_venv: Path) -> LearningModels:
    return LearningModels.from_json(engine_python(engine_venv, "-m", "hack.learnmodel", timeout=900))


@pytest.fixture
def env(
    engine_venv: Path, learning_models: LearningModels, engine_env: dict[str, str], tmp_path: Path
) -> dict[str, str]:
    """The engines' environment with the learning target's model cache (engine_env marks the test as one with a
    real engine behind its pods)."""
    return environment(engine_venv, learning_models.hf_home, tmp_path / "engine")


def recorded_times(claim: Path) -> list[int]:
    """When each sample on the claim was recorded, every pod's."""
    lines = (line for path in (claim / "samples").glob("*/*") for line in path.read_text().splitlines())
    return [json.loads(line)["time"] for line in lines if line.strip()]


def body(models: LearningModels, draft: str) -> dict[str, Any]:
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": draft}},
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
        "replicas": 2,
        "rollout": {"strategy": "Canary", "canary": {"minDraftTokens": NEED, "minComparisons": 3}},
        # minDrafts: a promoted draft's own figures are taken over about a round of held-out prompts per engine.
        "telemetry": {"intervalSeconds": 5, "windowSeconds": 900, "minDrafts": 300},
        "learning": {
            "storage": {"size": "1Gi", "storageClassName": "e2e"},
            "sampling": {"percent": 100},
            # One run per test: the prompts of the canary's traffic, recorded too, would start another.
            "triggers": {"minNewSamples": 40, "minIntervalMinutes": 60, "acceptanceDropPercent": 0},
            "training": {"epochs": 20, "learningRate": 0.001, "deadlineSeconds": 1800},
        },
    }


@pytest.fixture
def trainers(cluster: Cluster, namespace: str, env: dict[str, str], tmp_path: Path) -> Iterator[Trainers]:
    found = Trainers(cluster, namespace, env, tmp_path)
    stop = found.follow()
    yield found
    stop()


def learning_of(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = resource(cluster, namespace, NAME)["status"].get("learning") or {}
    return found


def generation(cluster: Cluster, namespace: str, number: int, phases: tuple[str, ...]) -> dict[str, Any] | None:
    for entry in learning_of(cluster, namespace).get("generations") or []:
        if entry["generation"] == number and entry["phase"] in phases:
            return dict(entry)
    return None


def observed(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return dict((resource(cluster, namespace, NAME)["status"].get("speculation") or {}).get("observed") or {})


def on_its_canary(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """Generation 1 once it reached its canary; a run that failed on the way fails the test at once, with
    status.learning as it was (as does a wait that ends without it)."""
    ended = wait_until(
        "generation 1 on its canary",
        lambda: generation(cluster, namespace, 1, ("Canary", "Failed", "RolledBack", "Promoted")),
        TRAINED,
        state=lambda: f"status.learning: {json.dumps(learning_of(cluster, namespace))}",
    )
    assert ended["phase"] == "Canary", learning_of(cluster, namespace)
    return dict(ended)


def canary_of(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return dict(
        wait_until(
            "the canary", lambda: (resource(cluster, namespace, NAME)["status"].get("rollout") or {}).get("canary")
        )
    )


def engines_own(engines: list[PodEngine]) -> float | None:
    """The mean acceptance length the engines count themselves (their /metrics, since they started)."""
    return sum((engine_counts(e) for e in engines), Counts()).figures().mean_acceptance_length


def in_force(cluster: Cluster, namespace: str, draft: str) -> dict[str, Any] | None:
    """The resource, once `draft` serves on every pod."""
    obj = resource(cluster, namespace, NAME)
    return obj if (obj["status"].get("learning") or {}).get("draft") == draft else None


@pytest.mark.usefixtures("learning_operator", "claim_volume")
def test_a_draft_learns_from_the_traffic_it_serves(
    cluster: Cluster,
    namespace: str,
    learning_models: LearningModels,
    env: dict[str, str],
    trainers: Trainers,
    tmp_path: Path,
) -> None:
    traffic, held_out = prompts()
    apply(cluster, namespace, NAME, body(learning_models, learning_models.head))
    stable = wait_ready(cluster, namespace, NAME, timeout=300)["status"]["configHash"]
    fleet = Fleet(cluster, namespace, env, tmp_path, NAME, traffic)
    try:
        fleet.serve({stable: 2})
        assert learning_of(cluster, namespace)["draft"] == "spec"
        # What the untrained head serves (lossless: the target's greedy answer), to hold the trained one to.
        expected = [fleet.of(stable)[0].complete(p, SERVED_NAME)["choices"][0]["text"] for p in held_out[:4]]

        # The traffic is recorded; enough of it starts a run, whose draft goes to its canary.
        fleet.traffic(stable, rounds=1)
        trained = on_its_canary(cluster, namespace)
        assert trained["samples"] >= 40, trained
        recorded = list((claim_directory(tmp_path, f"{NAME}-learning") / "samples").glob("*/*"))
        assert recorded, "the engines recorded nothing on the claim"
        canary = canary_of(cluster, namespace)
        fleet.serve({stable: 1, canary["configHash"]: 1})
        fleet.prompts = held_out  # from here on: prompts no run trained on, on both sides

        def measured() -> bool:
            return "after" in (generation(cluster, namespace, 1, ("Promoted",)) or {})

        fleet.traffic(stable, rounds=2)
        promoted = fleet.traffic_until(
            canary["configHash"], lambda: generation(cluster, namespace, 1, ("Promoted", "RolledBack")), VERDICT
        )
        assert promoted["phase"] == "Promoted", promoted
        obj = wait_until("gen-1 in force", lambda: in_force(cluster, namespace, "gen-1"))
        assert obj["status"]["speculation"]["draft"] == "gen-1"
        assert "DraftPromoted" in events(cluster, namespace, "DraftPromoted")
        learned = obj["status"]["rollout"]["lastGood"]["configHash"]
        fleet.serve({learned: 2})
        promoted = fleet.traffic_until(  # its own figures, once every pod measured minDrafts drafts
            learned, lambda: generation(cluster, namespace, 1, ("Promoted",)) if measured() else None, VERDICT
        )
        own = engines_own(fleet.of(learned))
        print(f"\ngeneration 1: {promoted}; its engines count {own} themselves")
        before, after = promoted["before"], promoted["after"]
        # What the operator took is what these engines measured (about a round of held-out prompts in each).
        assert own is not None, "gen-1's engines drafted nothing"
        assert abs(after["meanAcceptanceLength"] - own) <= 0.1, (after, own)
        assert after["meanAcceptanceLength"] >= 1.5 * before["meanAcceptanceLength"], promoted
        assert after["decodeTokensPerSecond"] > before["decodeTokensPerSecond"], promoted
        for engine in fleet.of(learned):
            assert [engine.complete(p, SERVED_NAME)["choices"][0]["text"] for p in held_out[:4]] == expected

    finally:
        fleet.stop()


def junk(count: int) -> list[str]:
    """Random letters and spaces: nothing the target serves for real, and nothing to learn that helps there."""
    rng = random.Random(0)
    letters = string.ascii_lowercase + " " * 5
    return ["".join(rng.choice(letters) for _ in range(PROMPT_CHARACTERS)) for _ in range(count)]


@pytest.mark.usefixtures("learning_operator", "claim_volume")
def test_a_draft_trained_on_poisoned_samples_is_rolled_back_and_never_learned_again(
    cluster: Cluster,
    namespace: str,
    learning_models: LearningModels,
    env: dict[str, str],
    trainers: Trainers,
    tmp_path: Path,
) -> None:
    """A resource whose draft serves well (trained on the traffic once) records only junk: random text, one token
    answered each. Its next generation learns that and drafts worse on what the resource really serves, which
    the canary sees on speed and rolls back: the draft in force stays, the rolled-back one stays on the claim
    until the next run, and the junk it learned from is quarantined: the next run, on the canary's traffic
    recorded since, trains without it."""
    held_out = prompts()[1]
    spec = body(learning_models, learning_models.trained_head)
    spec["learning"]["triggers"]["minIntervalMinutes"] = 0  # a second run, once enough new prompts are recorded
    apply(cluster, namespace, NAME, spec)
    stable = wait_ready(cluster, namespace, NAME, timeout=300)["status"]["configHash"]
    fleet = Fleet(cluster, namespace, env, tmp_path, NAME, held_out)
    try:
        fleet.serve({stable: 2})
        # Requests count from the operator's first sample of a pod on: the junk is quick, so it waits for both pods'
        # (one measured is not enough: the junk would go to the other before its first sample, and count for none).
        wait_until("both pods measured", lambda: (observed(cluster, namespace).get("podsMeasured") or 0) >= 2)
        for prompt in junk(TRAFFIC):
            fleet.of(stable)[0].complete(prompt, SERVED_NAME, max_tokens=1)
        trained = on_its_canary(cluster, namespace)
        assert trained["samples"] == TRAFFIC, trained
        canary = canary_of(cluster, namespace)
        fleet.serve({stable: 1, canary["configHash"]: 1})
        fleet.traffic(stable, rounds=2)
        ended = fleet.traffic_until(
            canary["configHash"], lambda: generation(cluster, namespace, 1, ("Promoted", "RolledBack")), VERDICT
        )
        print(f"\ngeneration 1: {ended}")
        assert ended["phase"] == "RolledBack", ended
        assert "DraftRolledBack" in events(cluster, namespace, "DraftRolledBack")
        obj = resource(cluster, namespace, NAME)
        assert obj["status"]["learning"]["draft"] == "spec", obj["status"]["learning"]
        assert obj["status"]["rollout"]["lastGood"]["configHash"] == stable
        claim = claim_directory(tmp_path, f"{NAME}-learning")
        kept = claim / "drafts" / "gen-1"
        assert (kept / "config.json").is_file(), "the rolled-back draft is not on the claim for inspection"
        window = ended["window"]
        learning = obj["status"]["learning"]
        assert learning["quarantine"] == [{"generation": 1, **window, "samples": TRAFFIC}], learning
        assert learning["quarantinedSamples"] == TRAFFIC

        # The held-out traffic the stable pods serve is recorded and starts generation 2, which reads every sample
        # on the claim but the quarantined junk.
        second = fleet.traffic_until(
            stable, lambda: generation(cluster, namespace, 2, ("Canary", "Promoted", "RolledBack", "Failed")), TRAINED
        )
        print(f"\ngeneration 2: {second}")
        assert second["phase"] != "Failed", second
        after = [t for t in recorded_times(claim) if not window["oldest"] <= t <= window["newest"]]
        assert second["window"]["oldest"] > window["newest"], (second, window)
        assert second["samples"] <= len([t for t in after if t <= second["window"]["newest"]]), second
        assert not kept.exists(), "the rolled-back draft outlived the next run's retention step"
    finally:
        fleet.stop()


@pytest.fixture
def claim_volume(cluster: Cluster, namespace: str) -> Iterator[None]:
    """The learning claim's volume, bound in advance (bind_claim); removed after."""
    bind_claim(cluster, f"{namespace}-learning", namespace, f"{NAME}-learning")
    yield
    cluster.kubectl("delete", "persistentvolume", f"{namespace}-learning", "--wait=false", check=False)
