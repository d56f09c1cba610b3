"""What spec.learning adds to the children: a claim the resource owns, and the recorder in every engine pod."""

from __future__ import annotations

import json
from typing import Any

from specinfer_operator.render.children import RenderDefaults, config_hash, render
from tests.support.builders import cr

LEARNING: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
    "rollout": {"strategy": "Canary"},
    "learning": {"storage": {"size": "50Gi", "storageClassName": "rwx"}, "sampling": {"percent": 10}},
}


def pod_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_the_claim_is_the_resources_own_and_comes_first() -> None:
    objects = render(cr(LEARNING, uid="u1", namespace="ml"))
    claim = objects[0]
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"]["name"] == "demo-learning"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "50Gi"}},
        "storageClassName": "rwx",
    }
    without = {k: v for k, v in LEARNING.items() if k != "learning"}
    assert all(o["kind"] != "PersistentVolumeClaim" for o in render(cr(without)))


def test_every_engine_records_into_its_own_directory_of_the_claim() -> None:
    pod = pod_of(render(cr(LEARNING)))
    assert {"name": "learning", "persistentVolumeClaim": {"claimName": "demo-learning"}} in pod["volumes"]
    engine = pod["containers"][0]
    # Its own directory only, by its name: it neither reads nor removes another pod's prompts.
    mounts = [m for m in engine["volumeMounts"] if m["name"] == "learning"]
    assert mounts == [
        {"name": "learning", "mountPath": "/var/lib/specinfer/samples", "subPathExpr": "samples/$(SPECINFER_POD_NAME)"}
    ]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in engine["env"]}
    assert env["SPECINFER_SAMPLES_DIR"] == "/var/lib/specinfer/samples"
    assert env["SPECINFER_SAMPLES_PERCENT"] == "10"
    assert env["SPECINFER_SAMPLES_MAX_BYTES"] == "1Gi"
    assert env["SPECINFER_SAMPLES_RETENTION_SECONDS"] == str(168 * 3600)
    assert env["SPECINFER_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SPECINFER_SAMPLES_ROLES"] == "user"  # the users' turns only, unless the spec says more
    assert env["SPECINFER_SAMPLES_REDACT"] == "[]"


def test_the_roles_and_redaction_patterns_reach_the_recorder() -> None:
    sampling = {"roles": ["user", "system"], "redact": [r"postgres://\S+", r"sk-[A-Za-z0-9]{8,}"]}
    more = {**LEARNING, "learning": {**LEARNING["learning"], "sampling": sampling}}
    env = {e["name"]: e.get("value") for e in pod_of(render(cr(more)))["containers"][0]["env"]}
    assert env["SPECINFER_SAMPLES_ROLES"] == "user,system"
    assert json.loads(env["SPECINFER_SAMPLES_REDACT"]) == sampling["redact"]


def test_what_the_engines_record_is_part_of_the_configuration() -> None:
    more = {**LEARNING, "learning": {**LEARNING["learning"], "sampling": {"percent": 20}}}
    later = {**LEARNING, "learning": {**LEARNING["learning"], "triggers": {"minNewSamples": 10}}}
    assert config_hash(cr(more), RenderDefaults()) != config_hash(cr(LEARNING), RenderDefaults())
    assert config_hash(cr(later), RenderDefaults()) == config_hash(
        cr(LEARNING), RenderDefaults()
    )  # the Job's, not the pods'
