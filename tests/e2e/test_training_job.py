"""What the learning loop reads of a training run and writes for one, on the real API server, Job controller and
operator: only the trainer's own words from the Job's own pod reach the status and events, and a Job of the run's
name the resource does not own is never written over.

No real run is needed: the tests write the Jobs' pods' statuses as the kubelet would (hack/podtrainer.py does the
same after a real run), and put the resource where a step reads them (status.learning, which only the learning
loop writes) rather than serving traffic until a run starts (tests/e2e/test_learning.py does that, on real
engines).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, wait_until
from specinfer_operator.learning.draft import draft_label
from specinfer_operator.render.training import pod_labels
from tests.e2e.conftest import Operator, bind_claim
from tests.e2e.test_operator import apply, resource, wait_ready

CREDENTIAL = "postgres://app:hunter22@db.internal/prompts"
FORGED = {"generation": 1, "samples": 999_999_999, "tokens": 1, "trainingSeconds": 0}
RESULT = {"generation": 1, "samples": 80, "tokens": 7355, "trainingSeconds": 55.8}
LEARNED = 180  # seconds for a learning step to have run: they run every 30 s


def spec() -> dict[str, Any]:
    return {
        "model": {"name": "org/target"},
        "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
        "rollout": {"strategy": "Canary"},
        "learning": {
            "storage": {"size": "1Gi", "storageClassName": "e2e"},
            "sampling": {"percent": 100},
            "triggers": {"minNewSamples": 1, "minIntervalMinutes": 0},
        },
    }


@pytest.fixture
def volumes(cluster: Cluster, namespace: str) -> Iterator[list[str]]:
    """PersistentVolumes bound in advance to the claims of the resources named in the list (the local cluster has
    no provisioner), so that their engine pods schedule; removed after."""
    names: list[str] = []
    yield names
    for name in names:
        cluster.kubectl("delete", "persistentvolume", f"{namespace}-{name}", "--wait=false", check=False)


def ready_learner(cluster: Cluster, namespace: str, volumes: list[str], name: str) -> dict[str, Any]:
    bind_claim(cluster, f"{namespace}-{name}", namespace, f"{name}-learning")
    volumes.append(name)
    apply(cluster, namespace, name, spec())
    return wait_ready(cluster, namespace, name, timeout=180)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def patch_status(cluster: Cluster, namespace: str, kind: str, name: str, status: dict[str, Any]) -> None:
    patch = json.dumps({"status": status})
    cluster.kubectl("patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge", "-p", patch)


def set_learning(cluster: Cluster, namespace: str, name: str, learning: dict[str, Any]) -> None:
    patch_status(cluster, namespace, "specinference", name, {"learning": learning})


def training(name: str) -> dict[str, Any]:
    """status.learning with generation 1 in training: what the loop wrote when it created the Job."""
    job = f"{name}-draft-1"
    generation = {"generation": 1, "phase": "Training", "job": job, "replaces": "spec", "startedAt": now()}
    return {"since": now(), "draft": "spec", "requestsSinceTraining": 0, "generations": [generation]}


def job_of(owner: dict[str, Any], name: str) -> dict[str, Any]:
    """A Job the resource owns (as the loop makes it), whose pod runs the trainer and an injected sidecar that
    writes its log tail as its message."""
    meta = owner["metadata"]
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": "SpeculativeInference",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    containers = [
        {"name": "trainer", "image": "trainer:test", "terminationMessagePolicy": "File"},
        {"name": "istio-proxy", "image": "proxy:test", "terminationMessagePolicy": "FallbackToLogsOnError"},
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": meta["namespace"], "ownerReferences": [reference]},
        "spec": {
            "backoffLimit": 0,
            "template": {
                # kwok leaves pods with the trainer's name label running: the test ends them.
                "metadata": {"labels": pod_labels(meta["name"])},
                "spec": {"restartPolicy": "Never", "containers": containers},
            },
        },
    }


def end_pod(cluster: Cluster, namespace: str, pod: str, phase: str, said: dict[str, str]) -> None:
    """Write how the pod's containers ended, as the kubelet would: `said` their termination messages."""
    code = 0 if phase == "Succeeded" else 1
    statuses = [
        {
            "name": container,
            "image": f"{container}:test",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": m}},
        }
        for container, m in said.items()
    ]
    patch_status(cluster, namespace, "pod", pod, {"phase": phase, "containerStatuses": statuses})


def job_pod(cluster: Cluster, namespace: str, job: str) -> str:
    def running() -> str:
        pods = cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]
        own = [p for p in pods if p["metadata"].get("ownerReferences") and p["status"].get("phase") == "Running"]
        return str(own[0]["metadata"]["name"]) if own else ""

    found: str = wait_until(f"the pod of Job {job} to run", running, timeout=120)
    return found


def generation_ended(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        generations = (resource(cluster, namespace, name).get("status", {}).get("learning") or {}).get("generations")
        last = (generations or [{}])[-1]
        return last if last.get("phase") not in (None, "Training") else None

    found: dict[str, Any] = wait_until(f"{name}'s generation 1 to end", ended, timeout=LEARNED)
    return found


def said_about(cluster: Cluster, namespace: str, name: str) -> str:
    """What anyone who may read the resource and its events sees of it."""
    events = cluster.get("events", "-n", namespace)["items"]
    told = [e.get("message", "") for e in events if e["involvedObject"].get("name") == name]
    return json.dumps(resource(cluster, namespace, name).get("status", {})) + "\n".join(told)


def test_only_the_trainers_own_words_from_the_jobs_own_pod_reach_the_status(
    cluster: Cluster, namespace: str, learning_operator: Operator, volumes: list[str]
) -> None:
    completed, failed = "learner", "failing"
    owners = {name: ready_learner(cluster, namespace, volumes, name) for name in (completed, failed)}
    for name, owner in owners.items():
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job_of(owner, f"{name}-draft-1")))
    pods = {name: job_pod(cluster, namespace, f"{name}-draft-1") for name in owners}

    # A pod of the tenant's own, newer than the Job's, labelled with the Job's name, and a result of its making.
    # (Not with its uid label: the Job controller would adopt it, as one pod too many, and delete it.)
    forged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "forged-result",
            "labels": {
                **pod_labels(completed),
                "batch.kubernetes.io/job-name": f"{completed}-draft-1",
                "job-name": f"{completed}-draft-1",
            },
        },
        "spec": {"containers": [{"name": "trainer", "image": "trainer:test", "terminationMessagePolicy": "File"}]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(forged))
    wait_until(
        "the forged pod to run",
        lambda: cluster.get("pod", "-n", namespace, "forged-result")["status"].get("phase") == "Running",
    )
    end_pod(cluster, namespace, "forged-result", "Succeeded", {"trainer": json.dumps(FORGED)})
    # The sidecar's log tail comes first among the statuses: it is what a reader of any container would take.
    end_pod(
        cluster,
        namespace,
        pods[completed],
        "Succeeded",
        {"istio-proxy": f"connecting to {CREDENTIAL}", "trainer": json.dumps(RESULT)},
    )
    end_pod(
        cluster,
        namespace,
        pods[failed],
        "Failed",
        {"istio-proxy": f"connecting to {CREDENTIAL}", "trainer": f"cannot open {CREDENTIAL}: refused"},
    )
    for name in owners:
        set_learning(cluster, namespace, name, training(name))

    trained = generation_ended(cluster, namespace, completed)
    assert trained["phase"] == "Canary", trained
    assert (trained["samples"], trained["trainingSeconds"]) == (80, 55.8)
    shown = said_about(cluster, namespace, completed)
    assert "999999999" not in shown
    assert "hunter22" not in shown
    assert f"{draft_label(1)} trained on 80 prompts" in shown

    refused = generation_ended(cluster, namespace, failed)
    assert refused["phase"] == "Failed", refused
    assert refused["reason"] == "cannot open postgres://***@db.internal/prompts: refused"
    shown = said_about(cluster, namespace, failed)
    assert "hunter22" not in shown
    assert "connecting to" not in shown


def test_a_job_of_the_runs_name_that_another_made_is_left_untouched_and_reported(
    cluster: Cluster, namespace: str, learning_operator: Operator, volumes: list[str]
) -> None:
    name = "learner"
    ready_learner(cluster, namespace, volumes, name)
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{name}-draft-1", "namespace": namespace, "labels": {"team": "b"}},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox:test"}]}},
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(foreign))
    before = cluster.get("job", "-n", namespace, f"{name}-draft-1")
    # Prompts recorded since learning began: a run starts at the next step.
    set_learning(cluster, namespace, name, {"since": now(), "draft": "spec", "requestsSinceTraining": 100})

    ended = generation_ended(cluster, namespace, name)
    assert ended["phase"] == "Failed", ended
    assert ended["reason"].startswith(f"Job {namespace}/{name}-draft-1 exists and is not this SpeculativeInference's")
    assert "DraftTrainingFailed" in json.dumps(cluster.get("events", "-n", namespace)["items"])
    after = cluster.get("job", "-n", namespace, f"{name}-draft-1")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"].get("ownerReferences") is None
    assert "specinfer-operator" not in {m.get("manager") for m in after["metadata"].get("managedFields") or []}
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:test"
