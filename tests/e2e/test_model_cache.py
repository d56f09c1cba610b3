"""Scale-out does not download the model again: engines that share spec.resources.modelCacheClaim find the
model their first engine downloaded.

The engines download from a loopback server speaking the Hub's download API (hack/hub.py, through HF_ENDPOINT),
which serves the tiny target the tests built and counts every file it sends. The claim is a real
PersistentVolumeClaim bound to a PersistentVolume; kwok mounts nothing, so the harness gives every pod that
mounts the claim the same directory, as the node would. One engine, then three.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.engine import PROMPTS, REPETITIVE, SERVED_NAME
from hack.hub import Hub
from hack.kubeclient import Cluster
from hack.podengine import Fleet
from hack.tinymodel import TinyModels
from tests.e2e.test_operator import apply, bind_claim, wait_ready
from tests.e2e.test_prometheus import body

NAME, CLAIM = "cached", "model-cache"


@pytest.mark.usefixtures("operator")
def test_engines_added_on_a_shared_model_cache_download_nothing(
    cluster: Cluster, namespace: str, engine_env: dict[str, str], models: TinyModels, tmp_path: Path
) -> None:
    bind_claim(cluster, namespace, CLAIM, f"{namespace}-{CLAIM}", "100Gi", "ReadWriteMany")
    spec = {
        **body(models, 4),
        "replicas": 1,
        "rollout": {"strategy": "RollingUpdate"},
        "resources": {"modelCacheClaim": CLAIM},
    }
    with Hub({models.target: models.target_dir}) as hub:
        fleet = Fleet(cluster, namespace, engine_env, tmp_path, NAME, [PROMPTS[REPETITIVE]], hub=hub.url)
        try:
            apply(cluster, namespace, NAME, spec)
            config_hash = wait_ready(cluster, namespace, NAME, 120)["status"]["configHash"]
            fleet.serve({config_hash: 1})
            first = dict(hub.downloads)
            files = {name for _, name in first}
            assert {"config.json", "model.safetensors"} <= files
            assert set(first.values()) == {1}, first  # every file the engine needed, once

            asked = len(hub.requests)
            cluster.kubectl("scale", "specinference", "-n", namespace, NAME, "--replicas=3")
            wait_ready(cluster, namespace, NAME, 120)
            fleet.serve({config_hash: 3})
            for engine in fleet.engines.values():
                assert engine.complete(PROMPTS[REPETITIVE], SERVED_NAME, 8)["usage"]["completion_tokens"] == 8
            later = hub.requests[asked:]
            print(f"downloads: {first}; after 1 -> 3 engines: {dict(hub.downloads)}; the added engines asked {later}")
            assert later, "the added engines never asked the Hub: they ran offline, which shows nothing"
            assert dict(hub.downloads) == first  # they found the model in the claim
        finally:
            fleet.stop()
            cluster.kubectl("delete", "specinference", "-n", namespace, NAME, "--ignore-not-found", check=False)
            cluster.kubectl("delete", "pv", f"{namespace}-{CLAIM}", "--wait=false", check=False)
