"""The training Job of spec.learning (pure): one run of specinfer-train, owned by the resource.

The Job's pod is an engine pod's sibling: the same target volumes and Hub cache, environment, placement (the
operator's default tolerations and nodeSelector included), runtime class and pod security context (so it passes
the namespace's Pod Security level as the engines do), no privilege and no API token. Its init container removes
what retention says (every pod's old samples, the drafts no longer kept, every run's scratch), the one step with
the claim writable as a whole; the trainer then reads the samples read-only and writes only drafts/ and scratch/.
It runs once (no retry: a failed run is a Failed generation, and the next one waits for new prompts), within
training.deadlineSeconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.labels import (
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    PART_OF,
    PART_OF_LABEL,
    propagated,
)
from specinfer_operator.api.overlay import PodSpecOverlay
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.render.children import RenderDefaults, owned_metadata, placement
from specinfer_operator.render.learning import (
    DRAFTS_DIR,
    LEARNING_PATH,
    LEARNING_VOLUME,
    SAMPLES_DIR,
    SCRATCH_DIR,
    claim_name,
    draft_dir,
)
from specinfer_operator.render.pod import ENGINE_SECURITY, POD_SECURITY, pull_secrets
from specinfer_operator.render.sizing import engine_resources
from specinfer_operator.render.storage import storage
from specinfer_runtime.quantity import parse
from specinfer_runtime.training.job import TrainingRun

TRAINER_CONTAINER = "trainer"
PRUNE_CONTAINER = "prune"
PRUNE_RESOURCES = {"cpu": "100m", "memory": "256Mi"}  # it lists and removes files
COMPONENT = "training"
KEEP_FINISHED_SECONDS = 86_400  # the Job and its pod, for inspection; the result is in the status by then
MAX_NAME = 63  # Job names become a label value of their pods


@dataclass(frozen=True)
class Kept:
    """What retention keeps of earlier runs: the draft generations, and the quarantined windows of samples
    (Unix seconds, both ends included) no run trains on again (learning/plan.py decides both)."""

    drafts: frozenset[int] = frozenset()
    quarantine: tuple[tuple[int, int], ...] = ()


def job_name(name: str, generation: int) -> str:
    """`<name>-draft-<generation>`, shortened with a hash of the whole when it would pass 63 characters."""
    full = f"{name}-draft-{generation}"
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    suffix = f"-{digest}-draft-{generation}"
    return name[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def pod_labels(name: str) -> dict[str, str]:
    """A training pod's labels: never its engines' selector (no Service sends it requests), and not the
    operator's managed-by label, which its watches of engine pods select on (the learning loop reads the Job)."""
    return {
        "app.kubernetes.io/name": "specinfer-trainer",
        INSTANCE_LABEL: name,
        "app.kubernetes.io/component": COMPONENT,
        PART_OF_LABEL: PART_OF,
    }


def training_run(
    cr: SpeculativeInference,
    generation: int,
    start: str | None,
    since: float,
    kept: Kept = Kept(),
) -> TrainingRun:
    """What the run does. `start` is the draft in force as the Job sees it (a directory or a Hub id), `since`
    when the last run began (Unix time), `kept` what retention keeps of earlier runs."""
    settings = cr.spec.learning
    assert settings is not None
    engine = cr.spec.engine()
    return TrainingRun(
        generation=generation,
        target=engine.model.load_path("target"),
        start=start,
        samples=f"{LEARNING_PATH}/{SAMPLES_DIR}",
        output=f"{LEARNING_PATH}/{draft_dir(generation)}",
        scratch=f"{LEARNING_PATH}/{SCRATCH_DIR}/gen-{generation}",
        max_tokens=settings.sampling.max_tokens,
        max_output_tokens=settings.training.max_output_tokens,
        epochs=settings.training.epochs,
        learning_rate=settings.training.learning_rate,
        speculative_tokens=engine.effective_k(),
        retention_seconds=settings.sampling.retention_hours * 3600,
        since=since,
        max_bytes=int(parse(settings.sampling.max_bytes) or 0),
        keep=sorted(kept.drafts),
        exclude=[list(w) for w in sorted(kept.quarantine)],
        tensor_parallel=engine.parallelism.tensor,
        quantization=engine.model.quantization,
        trust_remote_code=engine.model.trust_remote_code,
    )


def start_of(cr: SpeculativeInference, in_force: int) -> str | None:
    """The draft a run continues from: the generation in force on the claim, or the spec's draft."""
    if in_force > 0:
        return f"{LEARNING_PATH}/{draft_dir(in_force)}"
    draft = cr.spec.engine().speculative.draft_model
    return draft.load_path("draft") if draft else None


def training_job(
    cr: SpeculativeInference,
    generation: int,
    in_force: int,
    since: float,
    defaults: RenderDefaults,
    kept: Kept = Kept(),
) -> dict[str, Any]:
    """The Job that makes `generation`, continuing from generation `in_force` (0: the spec's draft); it needs
    a prompt recorded after `since` (Unix time: when the last run began), outside the quarantined windows."""
    spec, name = cr.spec, cr.metadata.name
    settings = spec.learning
    assert settings is not None
    training = settings.training
    engine = spec.engine()
    models = storage(engine, spec.resources)
    npu = spec.resources.npu_resource_name or defaults.npu_resource_name
    resources = engine_resources(spec, npu, models.downloads())
    npus = str(training.npus or spec.npus_per_pod())
    for kind in ("requests", "limits"):
        resources[kind] |= {npu: npus}
        if training.cpu:
            resources[kind]["cpu"] = training.cpu
        if training.memory:
            resources[kind]["memory"] = training.memory
    run = training_run(cr, generation, start_of(cr, in_force), since, kept)
    command = ["specinfer-train", "--config", json.dumps(run.dump(), sort_keys=True, separators=(",", ":"))]
    image = training.image or defaults.trainer_image
    pull = spec.runtime.image_pull_policy if training.image else defaults.trainer_pull_policy
    prune = {
        "name": PRUNE_CONTAINER,
        "image": image,
        "imagePullPolicy": pull,
        "command": [*command, "--prune"],
        "resources": {"requests": PRUNE_RESOURCES, "limits": PRUNE_RESOURCES},
        "volumeMounts": [{"name": LEARNING_VOLUME, "mountPath": LEARNING_PATH}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": ENGINE_SECURITY,
    }
    container = {
        "name": TRAINER_CONTAINER,
        "image": image,
        "imagePullPolicy": pull,
        "command": command,
        "env": [*models.env, *(var.render() for var in spec.runtime.env or [])],
        "envFrom": [source.dump() for source in spec.runtime.env_from or []],
        "resources": resources,
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            *models.mounts,
            *(
                {
                    "name": LEARNING_VOLUME,
                    "mountPath": f"{LEARNING_PATH}/{sub}",
                    "subPath": sub,
                    "readOnly": sub == SAMPLES_DIR,
                }
                for sub in (SAMPLES_DIR, DRAFTS_DIR, SCRATCH_DIR)
            ),
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": ENGINE_SECURITY,
    }
    overlay = (spec.pod_template.spec if spec.pod_template else None) or PodSpecOverlay()
    placed = placement(spec, defaults)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "initContainers": [prune],
        "containers": [{k: v for k, v in container.items() if v != []}],
        "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shared_memory}},
            *models.volumes,
            {"name": LEARNING_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(name)}},
        ],
        "securityContext": {**(overlay.security_context.dump() if overlay.security_context else {}), **POD_SECURITY},
        "automountServiceAccountToken": False,
        "runtimeClassName": overlay.runtime_class_name,
        "nodeSelector": placed.node_selector,
        "tolerations": [t.dump() for t in placed.tolerations or []],
        "affinity": placed.affinity.dump() if placed.affinity else None,
        "schedulerName": placed.scheduler_name,
        "priorityClassName": placed.priority_class_name,
        "imagePullSecrets": pull_secrets(spec, defaults.image_pull_secrets),
    }
    metadata = owned_metadata(cr, job_name(name, generation), {**pod_labels(name), MANAGED_BY_LABEL: MANAGER})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": training.deadline_seconds,
            "ttlSecondsAfterFinished": KEEP_FINISHED_SECONDS,
            "template": {
                "metadata": {"labels": {**propagated(cr.metadata.labels), **pod_labels(name)}},
                "spec": {k: v for k, v in pod.items() if v or v is False},
            },
        },
    }
