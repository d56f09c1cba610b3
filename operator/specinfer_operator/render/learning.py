"""What spec.learning adds to the engine pods (pure): the claim's samples directory and the recorder's settings.

The claim `<name>-learning` holds `samples/<pod>/*.jsonl` (what the engines record), `drafts/gen-N/` (what
the training Jobs write) and `scratch/gen-N/` (a run's hidden states). An engine mounts only its own
`samples/<pod>/` (a subPathExpr of its name), so it neither reads nor removes another pod's prompts; a trained
draft reaches it as its draftModel, a read-only subPath of the same claim (learning/draft.py resolves which
generation serves).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api.learning import LearningSettings
from specinfer_operator.api.resource import SpeculativeInferenceSpec
from specinfer_runtime import samples
from specinfer_runtime.samples import SAMPLES_PATH

LEARNING_VOLUME = "learning"
LEARNING_PATH = "/var/lib/specinfer/learning"  # the whole claim, in the training Job
SAMPLES_DIR = "samples"
DRAFTS_DIR = "drafts"
SCRATCH_DIR = "scratch"


def claim_name(name: str) -> str:
    return f"{name}-learning"


def draft_dir(generation: int) -> str:
    """A generation's directory on the claim."""
    return f"{DRAFTS_DIR}/gen-{generation}"


def own_samples_dir() -> str:
    """An engine's directory of the claim, as a subPathExpr the kubelet expands with the pod's name (the
    recorder's environment holds it, from the downward API)."""
    return f"{SAMPLES_DIR}/$({samples.POD_ENV})"


@dataclass
class Recorder:
    """What the recorder adds to the engine container and its pod (nothing without spec.learning)."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)


def recorder_env(settings: LearningSettings) -> list[dict[str, Any]]:
    sampling = settings.sampling
    values = {
        samples.DIR_ENV: SAMPLES_PATH,
        samples.PERCENT_ENV: str(sampling.percent),
        samples.MAX_BYTES_ENV: sampling.max_bytes,
        samples.RETENTION_ENV: str(sampling.retention_hours * 3600),
        samples.ROLES_ENV: ",".join(sampling.roles),
        samples.REDACT_ENV: json.dumps(sampling.redact or []),
    }
    pod = {"name": samples.POD_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    return [*({"name": k, "value": v} for k, v in values.items()), pod]


def recorder(spec: SpeculativeInferenceSpec, name: str) -> Recorder:
    if spec.learning is None:
        return Recorder()
    return Recorder(
        volumes=[{"name": LEARNING_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(name)}}],
        mounts=[{"name": LEARNING_VOLUME, "mountPath": SAMPLES_PATH, "subPathExpr": own_samples_dir()}],
        env=recorder_env(spec.learning),
    )
