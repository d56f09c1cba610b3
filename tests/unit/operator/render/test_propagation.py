"""The resource's labels and annotations on its children: every child object carries them but the reserved
keys, its pods carry its labels only, and no selector ever reads them."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator import __version__
from specinfer_operator.api.labels import propagated, reserved, version_label
from specinfer_operator.api.metadata import ANNOTATIONS_MAX_BYTES
from specinfer_operator.render import workload
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, config_hash, render
from specinfer_operator.render.training import training_job
from tests.support.builders import cr, example, resource

BASE: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
}
# Every optional child: the PodDisruptionBudget (two replicas), the autoscaler, the InferencePool.
FULL: dict[str, Any] = {
    **BASE,
    "replicas": 2,
    "autoscaling": {"minReplicas": 2, "maxReplicas": 4, "queueDepth": 3},
    "inferencePool": {},
    "service": {"annotations": {"lb.example.com/internal": "true"}},
}
TEAM = {"team": "search", "cost.example.com/center": "cc-42"}
NOTES = {"example.com/owner": "search-oncall", "argocd.argoproj.io/sync-options": "Prune=false"}
# Keys a child never gets from the resource: Kubernetes', the operator's own, and the controllers' hashes.
RESERVED_LABELS = {
    "app.kubernetes.io/instance": "someone-else",
    "app.kubernetes.io/name": "mine",
    "app.kubernetes.io/part-of": "my-platform",
    "app.kubernetes.io/version": "9.9",
    "specinfer.io/track": "canary",
    "leaderworkerset.sigs.k8s.io/worker-index": "0",
    "pod-template-hash": "abc",
}
RESERVED_ANNOTATIONS = {
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
    "specinfer.io/canary": "promote",
    "tuning.specinfer.io/effective": "5",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


def children(
    spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str], defaults: RenderDefaults | None = None
) -> list[dict[str, Any]]:
    return render(cr(spec, uid="u1", namespace="ml", labels=labels, annotations=annotations), defaults)


def templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for o in objects if workload.is_workload(o) for t in workload.pod_templates(o)]


def selectors(objects: list[dict[str, Any]]) -> list[Any]:
    """Every selector of the children and of their pods' spread."""
    found: list[Any] = [o["spec"]["selector"] for o in objects if "selector" in o.get("spec", {})]
    found += [t["spec"].get("topologySpreadConstraints") for t in templates(objects)]
    return found


@pytest.mark.parametrize("keda", ["", "http://prometheus.monitoring:9090"])
def test_every_child_object_carries_the_resources_labels_and_annotations_but_the_reserved(keda: str) -> None:
    objects = children(
        FULL, {**TEAM, **RESERVED_LABELS}, {**NOTES, **RESERVED_ANNOTATIONS}, RenderDefaults(keda_prometheus=keda)
    )
    kinds = {o["kind"] for o in objects}
    autoscaler = "ScaledObject" if keda else "HorizontalPodAutoscaler"
    assert kinds == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", autoscaler, "InferencePool"}
    for child in objects:
        labels, annotations = child["metadata"]["labels"], child["metadata"]["annotations"]
        assert TEAM.items() <= labels.items(), child["kind"]
        assert labels["app.kubernetes.io/instance"] == "demo"
        assert labels["app.kubernetes.io/name"] == "specinfer-engine"
        assert labels["app.kubernetes.io/part-of"] == "specinfer"
        assert labels["app.kubernetes.io/version"] == __version__
        assert not {"specinfer.io/track", "pod-template-hash", "leaderworkerset.sigs.k8s.io/worker-index"} & set(labels)
        own = {"lb.example.com/internal": "true"} if child["kind"] == "Service" else {}
        assert annotations == {**NOTES, **own}, child["kind"]


def test_the_pods_carry_the_resources_labels_not_its_annotations_nor_the_version() -> None:
    overlay = {"metadata": {"labels": {"team": "from-the-overlay"}, "annotations": {"example.com/pod": "yes"}}}
    objects = children({**BASE, "podTemplate": overlay}, {**TEAM, **RESERVED_LABELS}, NOTES)
    (template,) = templates(objects)
    labels = template["metadata"]["labels"]
    assert labels["team"] == "from-the-overlay"  # the overlay is about the pods: it wins over the resource
    assert labels["cost.example.com/center"] == "cc-42"
    assert labels["app.kubernetes.io/instance"] == "demo"
    assert labels["app.kubernetes.io/part-of"] == "specinfer"
    assert "app.kubernetes.io/version" not in labels  # an operator upgrade restarts no engine for a label
    assert set(template["metadata"]["annotations"]) == {"example.com/pod", "specinfer.io/config-hash"}


def test_no_selector_reads_the_resources_labels() -> None:
    plain = children(FULL, {}, {})
    labelled = children(FULL, {**TEAM, **RESERVED_LABELS}, NOTES)
    assert selectors(labelled) == selectors(plain)
    # The Deployment's, the Service's, the budget's, the InferencePool's and the spread's.
    assert len(selectors(plain)) == 5
    groups = {**example("multinode/deepseek-v3.2-mtp")["spec"], "replicas": 2}
    assert selectors(children(groups, {**TEAM, **RESERVED_LABELS}, NOTES)) == selectors(children(groups, {}, {}))


def test_both_templates_of_groups_carry_the_resources_labels() -> None:
    groups = example("multinode/deepseek-v3.2-mtp")["spec"]
    objects = children(groups, TEAM, NOTES)
    (lws,) = (o for o in objects if o["kind"] == "LeaderWorkerSet")
    assert TEAM.items() <= lws["metadata"]["labels"].items()
    assert [TEAM.items() <= t["metadata"]["labels"].items() for t in templates(objects)] == [True, True]


def test_an_annotation_edit_restarts_no_pod_and_a_label_edit_is_no_new_configuration() -> None:
    before = cr(BASE, labels=TEAM, annotations=NOTES)
    annotated = cr(BASE, labels=TEAM, annotations={**NOTES, "example.com/owner": "someone-else"})
    relabelled = cr(BASE, labels={**TEAM, "team": "ads"}, annotations=NOTES)
    assert templates(render(annotated)) == templates(render(before))
    assert templates(render(relabelled)) != templates(render(before))  # a pod label: the pods roll to get it
    defaults = RenderDefaults()
    assert config_hash(relabelled, defaults) == config_hash(annotated, defaults) == config_hash(before, defaults)


def test_annotations_that_would_pass_the_limit_on_the_service_stay_off_it_with_a_warning() -> None:
    own = {f"lb.example.com/setting-{i}": "x" * 4000 for i in range(32)}
    big = {"example.com/notes": "y" * (ANNOTATIONS_MAX_BYTES - 100_000)}
    data = resource({**BASE, "service": {"annotations": own}}, labels=TEAM, annotations=big)
    report = check(data)
    assert report.value is not None
    found = {o["kind"]: o for o in render(report.value)}
    assert found["Service"]["metadata"]["annotations"] == own
    assert found["Deployment"]["metadata"]["annotations"] == big
    (warning,) = [p for p in report.warnings if p.path == "metadata.annotations"]
    assert "the Service gets only its own annotations" in warning.message
    fits = check(resource({**BASE, "service": {"annotations": own}}, annotations=NOTES))
    assert not [p for p in fits.warnings if p.path == "metadata.annotations"]


def test_the_training_job_and_its_pods_carry_the_resources_labels() -> None:
    spec = {
        "model": {"name": "org/target", "source": {"pvc": {"claimName": "models", "subPath": "target"}}},
        "speculative": {"method": "eagle3", "numSpeculativeTokens": 3, "draftModel": {"name": "org/draft"}},
        "rollout": {"strategy": "Canary"},
        "learning": {"training": {"npus": 1}},
    }
    resource_ = cr(spec, uid="u1", namespace="ml", labels={**TEAM, **RESERVED_LABELS}, annotations=NOTES)
    job = training_job(resource_, 2, 1, 1_700_000_000.0, RenderDefaults())
    assert TEAM.items() <= job["metadata"]["labels"].items()
    assert job["metadata"]["labels"]["app.kubernetes.io/name"] == "specinfer-trainer"
    assert job["metadata"]["annotations"] == NOTES
    pod = job["spec"]["template"]["metadata"]["labels"]
    assert TEAM.items() <= pod.items()
    assert pod["app.kubernetes.io/instance"] == "demo"
    assert "app.kubernetes.io/managed-by" not in pod  # the operator's watches of engine pods select on it


@pytest.mark.parametrize(
    ("key", "kept"),
    [
        ("team", False),
        ("example.com/a", False),
        ("kubernetes.io/hostname", True),
        ("app.kubernetes.io/name", True),
        ("kubectl.kubernetes.io/last-applied-configuration", True),
        ("leaderworkerset.sigs.k8s.io/name", True),
        ("specinfer.io/canary", True),
        ("learning.specinfer.io/draft", True),
        ("pod-template-hash", True),
        ("job-name", True),
        ("notkubernetes.io/a", False),  # the domain itself or its subdomains, not a name that ends alike
    ],
)
def test_reserved_keys(key: str, kept: bool) -> None:
    assert reserved(key) is kept
    assert (key in propagated({key: "v"})) is not kept


@pytest.mark.parametrize(
    ("version", "label"),
    [("0.2.0", "0.2.0"), ("0.2.0+g1a2b3c.d20260101", "0.2.0-g1a2b3c.d20260101"), ("1.0.0rc1", "1.0.0rc1")],
)
def test_the_version_label_is_a_label_value(version: str, label: str) -> None:
    assert version_label(version) == label
