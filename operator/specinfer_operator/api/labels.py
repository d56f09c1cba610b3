"""The labels and annotations the operator writes and reads, in one place: on the engine pods and their
workloads, and on the SpeculativeInference itself (the canary's manual action, Auto tuning's K)."""

from __future__ import annotations

MANAGER = "specinfer-operator"  # app.kubernetes.io/managed-by, the field manager and the events' component
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the resource an engine pod is labelled with
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

# What the operator watches: its own children, and only those.
CHILD_LABELS = {MANAGED_BY_LABEL: MANAGER}


def selector_labels(name: str) -> dict[str, str]:
    """The labels that select resource `name`'s engine pods (its Service, its workloads, the status)."""
    return {"app.kubernetes.io/name": "specinfer-engine", INSTANCE_LABEL: name}


def labels(name: str) -> dict[str, str]:
    """Every label the operator puts on resource `name`'s children."""
    return {**selector_labels(name), "app.kubernetes.io/component": "engine", MANAGED_BY_LABEL: MANAGER}
