"""Child objects: deterministic, NPU requests, config-hash rollouts, volumes, ownership."""

from __future__ import annotations

import json
from typing import Any

import yaml

from specinfer_operator.render.children import RenderDefaults, config_hash, render
from tests.support.builders import cr, example

BASE: dict[str, Any] = {
    "model": {"name": "org/target", "source": {"pvc": {"claimName": "models", "subPath": "target"}}},
    "parallelism": {"tensor": 2, "data": 2},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
}


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    found: dict[str, Any] = pod["containers"][0]
    return found


def test_rendering_is_deterministic() -> None:
    first = yaml.safe_dump_all(render(cr(BASE, uid="u1", namespace="ml")), sort_keys=False)
    second = yaml.safe_dump_all(render(cr(BASE, uid="u1", namespace="ml")), sort_keys=False)
    assert first == second


def test_pod_requests_tensor_times_data_npus_and_their_share_of_the_node() -> None:
    resources = container(render(cr(BASE)))["resources"]
    # 16 CPUs and 64Gi per NPU, /dev/shm's 16Gi, and the Hub cache of the draft: 64Gi per NPU of the weights.
    share = {"huawei.com/Ascend910": "4", "cpu": "64", "memory": "272Gi"}
    assert resources["requests"] == {**share, "ephemeral-storage": "128Gi"}
    assert resources["limits"] == share


def test_npu_resource_name_and_image_defaults() -> None:
    objects = render(cr(BASE), RenderDefaults(runtime_image="reg/rt:1", npu_resource_name="huawei.com/Ascend310P"))
    assert container(objects)["image"] == "reg/rt:1"
    assert container(objects)["resources"]["limits"]["huawei.com/Ascend310P"] == "4"
    spec = {
        **BASE,
        "runtime": {"image": "mine:2"},
        "resources": {"npuResourceName": "x.io/npu", "npusPerPod": 8},
    }
    assert container(render(cr(spec)))["image"] == "mine:2"
    limits = container(render(cr(spec)))["resources"]["limits"]
    assert (limits["x.io/npu"], limits["cpu"], limits["memory"]) == ("8", "128", "528Gi")


def test_config_change_changes_config_map_name_and_pod_template() -> None:
    before = by_kind(render(cr(BASE)))
    changed = {**BASE, "speculative": {**BASE["speculative"], "numSpeculativeTokens": 4}}
    after = by_kind(render(cr(changed)))
    assert before["ConfigMap"]["metadata"]["name"] != after["ConfigMap"]["metadata"]["name"]
    old_tpl, new_tpl = (o["Deployment"]["spec"]["template"] for o in (before, after))
    assert old_tpl["metadata"]["annotations"] != new_tpl["metadata"]["annotations"]
    assert old_tpl["spec"]["volumes"][0]["configMap"]["name"] == before["ConfigMap"]["metadata"]["name"]
    assert '"num_speculative_tokens":4' in " ".join(new_tpl["spec"]["containers"][0]["args"])


def test_replicas_change_keeps_the_config_and_an_image_or_environment_change_makes_a_new_one() -> None:
    defaults = RenderDefaults()
    base = config_hash(cr(BASE), defaults)
    assert config_hash(cr({**BASE, "replicas": 5}), defaults) == base
    assert config_hash(cr({**BASE, "placement": {"nodeSelector": {"pool": "a"}}}), defaults) == base
    assert config_hash(cr({**BASE, "runtime": {"image": "runtime:2"}}), defaults) != base
    assert config_hash(cr({**BASE, "runtime": {"env": [{"name": "HCCL_BUFFSIZE", "value": "400"}]}}), defaults) != base
    assert config_hash(cr(BASE), RenderDefaults(runtime_image="runtime:3")) != base  # the operator's default


def test_config_map_is_immutable_and_holds_the_engine_part_only() -> None:
    config_map = by_kind(render(cr({**BASE, "replicas": 3})))["ConfigMap"]
    assert config_map["immutable"] is True
    engine = yaml.safe_load(config_map["data"]["engine.json"])
    assert set(engine) == {"model", "parallelism", "speculative", "graph", "scheduling"}


def test_owner_references_only_for_objects_from_the_cluster() -> None:
    owned = render(cr(BASE, uid="1234", namespace="ml"))
    for obj in owned:
        ref = obj["metadata"]["ownerReferences"][0]
        assert ref == {
            "apiVersion": "specinfer.io/v1alpha1",
            "kind": "SpeculativeInference",
            "name": "demo",
            "uid": "1234",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert obj["metadata"]["namespace"] == "ml"
    assert all("ownerReferences" not in o["metadata"] for o in render(cr(BASE)))


def test_volumes_for_pvc_target_and_hub_draft() -> None:
    spec = {**BASE, "speculative": {**BASE["speculative"], "draftModel": {"name": "org/draft"}}}
    objects = render(cr(spec))
    engine = container(objects)
    pod = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["model-target"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert "hf-cache" in volumes
    mounts = {m["name"]: m for m in engine["volumeMounts"]}
    assert mounts["model-target"] == {
        "name": "model-target",
        "mountPath": "/models/target",
        "readOnly": True,
        "subPath": "target",
    }
    assert mounts["shm"]["mountPath"] == "/dev/shm"
    assert [e["name"] for e in engine["env"]] == ["HF_HOME"]


def hub(name: str, secret: str) -> dict[str, Any]:
    return {"name": name, "source": {"huggingFace": {"tokenSecretRef": {"name": secret}, "revision": "v1"}}}


def test_target_and_draft_tokens_from_different_secrets() -> None:
    """vLLM has one token (HF_TOKEN, the target's); the runtime downloads a draft that has its own."""
    spec = {
        "model": hub("org/target", "target-token"),
        "speculative": {**BASE["speculative"], "draftModel": hub("org/draft", "draft-token")},
    }
    engine = container(render(cr(spec)))
    env = {e["name"]: e.get("valueFrom", e.get("value")) for e in engine["env"]}
    assert env == {
        "HF_TOKEN": {"secretKeyRef": {"name": "target-token", "key": "token"}},
        "SPECINFER_DRAFT_HF_TOKEN": {"secretKeyRef": {"name": "draft-token", "key": "token"}},
        "HF_HOME": "/var/cache/huggingface",
    }
    assert {"name": "model-draft", "mountPath": "/models/draft"} in engine["volumeMounts"]
    config = json.loads(engine["args"][engine["args"].index("--speculative-config") + 1])
    assert config["model"] == "/models/draft"
    assert "revision" not in config  # fetched at that revision
    assert engine["args"][engine["args"].index("--revision") + 1] == "v1"  # the target's, for vLLM


def test_hidden_states_storage_is_writable() -> None:
    objects = render(cr(example("extract-hidden-states")["spec"]))
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    assert mounts["hidden-states"] == {
        "name": "hidden-states",
        "mountPath": "/hidden-states",
        "readOnly": False,
    }


def test_rollout_probes_and_placement() -> None:
    spec = {
        **BASE,
        "placement": {
            "nodeSelector": {"accelerator": "huawei-Ascend910"},
            "tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists"}],
            "schedulerName": "volcano",
        },
    }
    deployment = by_kind(render(cr(spec)))["Deployment"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert deployment["spec"]["progressDeadlineSeconds"] == 1800
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"accelerator": "huawei-Ascend910"}
    assert pod["tolerations"] == [{"key": "huawei.com/Ascend910", "operator": "Exists"}]
    assert pod["schedulerName"] == "volcano"
    engine = pod["containers"][0]
    assert engine["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert engine["startupProbe"]["failureThreshold"] * engine["startupProbe"]["periodSeconds"] >= 1800
    assert engine["securityContext"]["privileged"] is False
    assert engine["command"][:3] == ["specinfer-runtime", "--config", "/etc/specinfer/engine.json"]
    assert engine["args"][:2] == ["vllm", "serve"]


def test_service_targets_the_engine_port() -> None:
    service = by_kind(render(cr({**BASE, "service": {"port": 80, "type": "NodePort"}})))["Service"]
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "specinfer-engine",
        "app.kubernetes.io/instance": "demo",
    }
