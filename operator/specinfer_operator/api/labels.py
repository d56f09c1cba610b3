"""The labels and annotations the operator writes and reads, in one place: on the engine pods and their
workloads, and on the SpeculativeInference itself (the canary's manual action, Auto tuning's K)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from specinfer_operator import __version__

MANAGER = "specinfer-operator"  # app.kubernetes.io/managed-by, the field manager and the events' component
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the resource an engine pod is labelled with
PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF = "specinfer"
VERSION_LABEL = "app.kubernetes.io/version"  # the operator's release, on every child object (not on pods)
# Tells a canary's pods from the stable ones (the Service selects both).
TRACK_LABEL = "specinfer.io/track"
# The configuration a pod template runs: rollback finds the last good template in a workload's history by it.
CONFIG_HASH_ANNOTATION = "specinfer.io/config-hash"
# The Deployment controller's, on each ReplicaSet it makes and on that ReplicaSet's pods: which template they run.
TEMPLATE_HASH_LABEL = "pod-template-hash"
# On the resource: `promote` or `abort`, set by hand; removed once acted on.
CANARY_ACTION_ANNOTATION = "specinfer.io/canary"
CANARY_ACTIONS = ("promote", "abort")
# On the resource: the K that Auto tuning applied, written by the telemetry loop (tuning/applied.py).
TUNED_K_ANNOTATION = "tuning.specinfer.io/effective"
# On the resource: the draft generation spec.learning put in force, written by the learning loop.
LEARNED_DRAFT_ANNOTATION = "learning.specinfer.io/draft"

# The labels the Job controller puts on a Job's pods: an engine pod carrying them could pass for a Job's pod.
JOB_POD_LABELS = ("batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid", "job-name", "controller-uid")
# Keys of the resource's own labels and annotations that its children do not get: those in Kubernetes' domains
# (kubectl's last-applied configuration, the app.kubernetes.io labels the operator sets itself, LeaderWorkerSet's,
# the annotations a load balancer or the autoscaler acts on), the operator's own, and the controllers' own.
RESERVED_DOMAINS = ("kubernetes.io", "k8s.io", "specinfer.io")
RESERVED_NAMES = (TEMPLATE_HASH_LABEL, "controller-revision-hash", *JOB_POD_LABELS)

# What the operator watches: its own children, and only those.
CHILD_LABELS = {MANAGED_BY_LABEL: MANAGER}


def selector_labels(name: str) -> dict[str, str]:
    """The labels that select resource `name`'s engine pods (its Service, its workloads, the status)."""
    return {"app.kubernetes.io/name": "specinfer-engine", INSTANCE_LABEL: name}


def labels(name: str) -> dict[str, str]:
    """Every label the operator puts on resource `name`'s pods; its child objects add VERSION_LABEL."""
    return {
        **selector_labels(name),
        "app.kubernetes.io/component": "engine",
        PART_OF_LABEL: PART_OF,
        MANAGED_BY_LABEL: MANAGER,
    }


def version_label(version: str = __version__) -> str:
    """The operator's version as a label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends): a
    local version such as 0.2.0+g1a2b3c becomes 0.2.0-g1a2b3c."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", version)[:63].strip("._-") or "unknown"


def reserved(key: str) -> bool:
    """Whether a label or annotation key of the resource stays on it (RESERVED_DOMAINS, RESERVED_NAMES)."""
    prefix, _, name = key.rpartition("/")
    if not prefix:
        return name in RESERVED_NAMES
    return any(prefix == domain or prefix.endswith(f".{domain}") for domain in RESERVED_DOMAINS)


def propagated(keys: Mapping[str, str] | None) -> dict[str, str]:
    """The resource's labels or annotations that its children carry: all but the reserved ones."""
    return {key: value for key, value in (keys or {}).items() if not reserved(key)}
