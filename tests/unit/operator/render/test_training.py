"""The training Job: the resource's own, one try within its deadline, an engine pod's sibling without its
Service labels, privilege or API token, with the claim and the target's volumes, and its run as the runtime
reads it."""

from __future__ import annotations

import json
from typing import Any

from specinfer_operator.render.children import RenderDefaults
from specinfer_operator.render.training import TRAINER_CONTAINER, Kept, job_name, training_job
from specinfer_runtime.training.job import TrainingRun
from specinfer_runtime.validation import validate
from tests.support.builders import cr

SPEC: dict[str, Any] = {
    "model": {"name": "org/target", "source": {"pvc": {"claimName": "models", "subPath": "target"}}},
    "parallelism": {"tensor": 2},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
    "rollout": {"strategy": "Canary"},
    "placement": {"nodeSelector": {"accelerator": "ascend-910b"}},
    "podTemplate": {"spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}},
    "runtime": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]},
    "learning": {"training": {"npus": 1, "memory": "64Gi", "deadlineSeconds": 1800, "epochs": 5}},
}


def job(generation: int = 2, in_force: int = 1) -> dict[str, Any]:
    return training_job(cr(SPEC, uid="u1", namespace="ml"), generation, in_force, 1_700_000_000.0, RenderDefaults())


def test_one_try_within_the_deadline_owned_by_the_resource() -> None:
    found = job()
    assert found["metadata"]["name"] == "demo-draft-2"
    assert found["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert (found["spec"]["backoffLimit"], found["spec"]["activeDeadlineSeconds"]) == (0, 1800)
    labels = found["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "specinfer-trainer"  # not the engines' selector: no Service traffic
    assert "app.kubernetes.io/managed-by" not in labels  # nor in the operator's watch of engine pods


def test_the_pod_is_an_engine_pods_sibling_without_privilege_or_token() -> None:
    pod = job()["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["nodeSelector"] == {"accelerator": "ascend-910b"}
    (container,) = pod["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"]["huawei.com/Ascend910"] == "1"
    assert container["resources"]["limits"]["memory"] == "64Gi"
    assert {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"} in container["env"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "/var/lib/specinfer/learning" not in mounts  # not the whole claim: the samples are read-only here
    assert mounts["/var/lib/specinfer/learning/samples"] == {
        "name": "learning",
        "mountPath": "/var/lib/specinfer/learning/samples",
        "subPath": "samples",
        "readOnly": True,
    }
    for writable in ("drafts", "scratch"):
        assert mounts[f"/var/lib/specinfer/learning/{writable}"]["readOnly"] is False
    assert mounts["/models/target"]["name"] == "model-target"
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
    assert claims["learning"] == "demo-learning"


def test_retention_is_the_first_step_the_only_one_with_the_claim_writable() -> None:
    kept = Kept(frozenset({1, 3}), ((100, 200),))
    found = training_job(cr(SPEC, uid="u1", namespace="ml"), 4, 3, 0.0, RenderDefaults(), kept)
    pod = found["spec"]["template"]["spec"]
    (prune,) = pod["initContainers"]
    (trainer,) = pod["containers"]
    assert prune["command"] == [*trainer["command"], "--prune"]
    assert prune["volumeMounts"] == [{"name": "learning", "mountPath": "/var/lib/specinfer/learning"}]
    assert prune["securityContext"] == trainer["securityContext"]
    run = validate(TrainingRun, json.loads(trainer["command"][2])).value
    assert run is not None
    assert (run.keep, run.exclude, run.max_bytes) == ([1, 3], [[100, 200]], 1 << 30)


def test_the_run_is_what_the_runtime_validates() -> None:
    command = job()["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["specinfer-train", "--config"]
    run = validate(TrainingRun, json.loads(command[2])).value
    assert run is not None
    assert run.start == "/var/lib/specinfer/learning/drafts/gen-1"
    assert run.output == "/var/lib/specinfer/learning/drafts/gen-2"
    assert (run.target, run.tensor_parallel, run.epochs, run.speculative_tokens) == ("/models/target", 2, 5, 3)
    first = json.loads(job(1, 0)["spec"]["template"]["spec"]["containers"][0]["command"][2])
    assert first["start"] == "org/draft"  # the spec's draft, from the Hub


def test_long_names_are_shortened_distinctly() -> None:
    a, b = "a" * 60, "a" * 59 + "b"
    assert job_name("demo", 7) == "demo-draft-7"
    assert len(job_name(a, 123)) <= 63
    assert job_name(a, 123) != job_name(b, 123)


def test_the_trainers_message_is_its_own_file_the_one_container_the_outcome_reads() -> None:
    """learning/outcome.py reads only the trainer container's message, and only with policy File: with
    FallbackToLogsOnError the kubelet would make its log tail the message."""
    (container,) = job()["spec"]["template"]["spec"]["containers"]
    assert container["name"] == TRAINER_CONTAINER
    assert (container["terminationMessagePath"], container["terminationMessagePolicy"]) == (
        "/dev/termination-log",
        "File",
    )


def test_the_job_pulls_with_the_resources_secrets_then_the_operators_as_the_engines_do() -> None:
    spec = {**SPEC, "runtime": {"imagePullSecrets": [{"name": "team-registry"}, {"name": "mirror"}]}}
    defaults = RenderDefaults(image_pull_secrets=("mirror", "platform-registry"))
    found = training_job(cr(spec, uid="u1", namespace="ml"), 2, 1, 0.0, defaults)
    assert found["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "team-registry"},
        {"name": "mirror"},
        {"name": "platform-registry"},
    ]
    assert "imagePullSecrets" not in job()["spec"]["template"]["spec"]
