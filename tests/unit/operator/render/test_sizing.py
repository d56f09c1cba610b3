"""What an engine pod requests of its node: a share of an NPU node per NPU, Guaranteed unless limits say
otherwise, size limits on every scratch volume, and the warnings when a pod or a group is sized against itself."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator.render.admission import check
from specinfer_operator.render.children import render
from specinfer_operator.render.sizing import guaranteed, size
from tests.support.builders import cr, example
from tests.support.casetable import load_cases

NPU = "huawei.com/Ascend910"
HUB: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-8B"},
    "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
}
PVC = {"pvc": {"claimName": "models"}}


def pods(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates rendered for `spec`: a Deployment's, or a group's leader and workers."""
    workload = next(o for o in render(cr(spec)) if o["kind"] in ("Deployment", "LeaderWorkerSet"))["spec"]
    group = workload.get("leaderWorkerTemplate")
    templates = [group["leaderTemplate"], group["workerTemplate"]] if group else [workload["template"]]
    return [t["spec"] for t in templates]


def engine(spec: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = pods(spec)[0]["containers"][0]["resources"]
    return found


def scratch(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v["emptyDir"] for v in pods(spec)[0]["volumes"] if "emptyDir" in v}


def warnings(spec: dict[str, Any]) -> dict[str, str]:
    report = check({"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "metadata": {"name": "s"},
                    "spec": spec})  # fmt: skip
    assert report.ok, [str(p) for p in report.errors]
    return {p.path: p.message for p in report.warnings}


def test_a_pod_asks_for_its_npus_share_of_the_node_and_is_guaranteed() -> None:
    resources = engine(HUB)
    # 16 CPUs and 64Gi per NPU, plus the 16Gi of /dev/shm (memory counted against the limit); the Hub cache.
    assert resources["requests"] == {NPU: "1", "cpu": "16", "memory": "80Gi", "ephemeral-storage": "64Gi"}
    assert resources["limits"] == {NPU: "1", "cpu": "16", "memory": "80Gi"}
    assert guaranteed(resources["requests"], resources["limits"])
    eight = engine({**HUB, "parallelism": {"tensor": 8}, "resources": {"sharedMemory": "64Gi"}})
    assert (eight["requests"]["cpu"], eight["requests"]["memory"]) == ("128", "576Gi")


def test_every_figure_is_overridable_and_limits_above_requests_make_it_burstable() -> None:
    mine = engine({**HUB, "resources": {"cpu": "8", "memory": "32Gi", "modelCache": "20Gi"}})
    assert mine["requests"] == {NPU: "1", "cpu": "8", "memory": "32Gi", "ephemeral-storage": "20Gi"}
    assert guaranteed(mine["requests"], mine["limits"])
    burst = engine({**HUB, "resources": {"cpuLimit": "64", "memory": "100Gi", "memoryLimit": "200Gi"}})
    # A limit alone is the request too, as Kubernetes takes it: never a request above its limit.
    assert (burst["requests"]["cpu"], burst["limits"]["cpu"]) == ("64", "64")
    assert (burst["requests"]["memory"], burst["limits"]["memory"]) == ("100Gi", "200Gi")
    assert not guaranteed(burst["requests"], burst["limits"])
    small = engine({**HUB, "resources": {"cpuLimit": "4", "memoryLimit": "8Gi"}})
    assert (small["requests"]["cpu"], small["requests"]["memory"]) == ("4", "8Gi")


@pytest.mark.parametrize(
    ("parallelism", "limit"),
    [
        ({"tensor": 4}, "256Gi"),
        ({"tensor": 2, "data": 4}, "128Gi"),  # data parallelism copies the weights
        ({"tensor": 2, "data": 4, "expert": True}, "512Gi"),  # expert parallelism shards them over every rank
        ({"tensor": 16, "expert": True, "nodes": 2}, "1Ti"),  # each pod of a group downloads the whole model
    ],
)
def test_downloads_are_limited_to_what_the_weights_can_take(parallelism: dict[str, Any], limit: str) -> None:
    spec = {**HUB, "parallelism": parallelism}
    for pod in pods(spec):
        cache = next(v for v in pod["volumes"] if v["name"] == "hf-cache")
        assert cache["emptyDir"] == {"sizeLimit": limit}
        assert pod["containers"][0]["resources"]["requests"]["ephemeral-storage"] == limit


def test_the_pod_requests_the_disk_of_every_download_and_none_without() -> None:
    draft = {"name": "org/draft", "source": {"huggingFace": {"tokenSecretRef": {"name": "draft-token"}}}}
    both = {**HUB, "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": draft}}
    assert scratch(both)["hf-cache"] == scratch(both)["model-draft"] == {"sizeLimit": "64Gi"}
    assert engine(both)["requests"]["ephemeral-storage"] == "128Gi"
    volumes = {**HUB, "model": {"name": "Qwen/Qwen3-8B", "source": PVC}}
    assert "ephemeral-storage" not in engine(volumes)["requests"]
    claimed = {**HUB, "resources": {"modelCacheClaim": "hf"}}
    assert "ephemeral-storage" not in engine(claimed)["requests"]
    assert set(scratch(claimed)) == {"shm"}


def test_every_scratch_volume_of_every_valid_resource_has_a_size_limit() -> None:
    specs = [c.resource["spec"] for c in load_cases() if c.valid and check(c.resource).ok]
    specs += [
        example(name)["spec"] for name in ("ngram", "eagle3", "multinode/deepseek-v3.2-mtp", "pod/ascend-cluster")
    ]
    assert len(specs) > 80
    for spec in specs:
        for pod in pods(spec):
            for volume in pod["volumes"]:
                if "emptyDir" in volume:
                    assert volume["emptyDir"].get("sizeLimit"), (spec, volume)
            assert all(c.get("resources") or c["name"] != "engine" for c in pod["containers"])


def test_sizes_are_whole_mebibytes_in_the_largest_whole_unit() -> None:
    assert [size(2**40), size(80 * 2**30), size(1.5 * 2**30), size(10**9)] == ["1Ti", "80Gi", "1536Mi", "954Mi"]
    assert engine({**HUB, "resources": {"sharedMemory": "1G"}})["requests"]["memory"] == "66490Mi"


def test_a_group_downloading_into_emptydirs_is_told_to_use_a_claim() -> None:
    group = {**HUB, "parallelism": {"tensor": 16, "nodes": 2}}
    said = warnings(group)["spec.resources.modelCacheClaim"]
    assert said.startswith("not set: each of the 2 pods of a group downloads the Hub models into an emptyDir (up to")
    assert "ReadWriteMany PersistentVolumeClaim" in said
    assert warnings({**group, "resources": {"modelCacheClaim": "hf"}}) == {}
    assert warnings({**group, "model": {"name": "Qwen/Qwen3-8B", "source": PVC}}) == {}
    assert warnings({**HUB, "replicas": 4}) == {}  # one pod per engine: each downloads once per start, as it must
    shared = example("multinode/deepseek-v3.2-mtp")["spec"]  # the example keeps one copy on a shared claim
    assert "spec.resources.modelCacheClaim" not in warnings(shared)
    assert "spec.resources.modelCacheClaim" in warnings({**shared, "resources": {"sharedMemory": "64Gi"}})
    draft = {"name": "org/draft", "source": {"huggingFace": {"tokenSecretRef": {"name": "draft-token"}}}}
    own = {**group, "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": draft}}
    found = warnings({**own, "resources": {"modelCacheClaim": "hf"}})
    assert list(found) == ["spec.speculative.draftModel.source"]
    assert (
        "modelCacheClaim holds only the shared Hub cache: load the draft from a pvc source"
        in found["spec.speculative.draftModel.source"]
    )


def test_a_sidecar_without_equal_limits_is_said_to_make_the_pods_burstable() -> None:
    def sidecars(resources: dict[str, Any] | None, **engine: str) -> dict[str, str]:
        sidecar: dict[str, Any] = {"name": "shipper", "image": "busybox:1.36"}
        init: dict[str, Any] = {"name": "warm", "image": "busybox:1.36", "restartPolicy": "Always"}
        overlay = {"spec": {"containers": [{**sidecar, **({"resources": resources} if resources else {})}],
                            "initContainers": [init]}}  # fmt: skip
        return warnings({**HUB, "podTemplate": overlay, "resources": engine})

    both = sidecars(None)
    assert set(both) == {
        "spec.podTemplate.spec.containers[0].resources",
        "spec.podTemplate.spec.initContainers[0].resources",
    }
    assert both["spec.podTemplate.spec.containers[0].resources"].startswith(
        "shipper has no cpu and memory limits equal to its requests, so the engine pods are Burstable"
    )
    limited = sidecars({"limits": {"cpu": "100m", "memory": "64Mi"}})
    assert list(limited) == ["spec.podTemplate.spec.initContainers[0].resources"]  # requests default to limits
    unequal = sidecars({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}})
    assert "spec.podTemplate.spec.containers[0].resources" in unequal
    assert sidecars(None, cpu="16", cpuLimit="32") == {}  # the engine itself is Burstable: nothing to lose
