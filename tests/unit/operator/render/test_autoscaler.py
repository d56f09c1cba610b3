"""spec.autoscaling: the HorizontalPodAutoscaler scales the resource on Object metrics that the adapter rules
compute from the engines' series, and a spec without a target or with its range upside down is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer_operator.render.admission import check
from specinfer_operator.render.autoscaler import ENGINE_JOB, SCALED_OBJECT, adapter_rules, targets
from specinfer_operator.render.children import RenderDefaults, config_hash, family_hash, render
from specinfer_runtime.quantity import parse
from tests.support.builders import cr, example, resource

NGRAM = {"model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}
CHART = Path(__file__).resolve().parents[4] / "charts" / "specinfer-operator"
SCALED = {**NGRAM, "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "queueDepth": 3, "decodeTokensPerSecond": 20}}


def hpa(spec: dict[str, Any]) -> dict[str, Any] | None:
    found = [o for o in render(cr(spec, namespace="team", uid="u-1")) if o["kind"] == "HorizontalPodAutoscaler"]
    return found[0] if found else None


def test_the_autoscaler_scales_the_resource_on_its_own_object_metrics() -> None:
    rendered = hpa(SCALED)
    assert rendered is not None
    spec = rendered["spec"]
    own = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "name": "demo"}
    assert spec["scaleTargetRef"] == own
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 4)
    assert rendered["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert [m["object"]["describedObject"] for m in spec["metrics"]] == [own, own]
    assert {m["object"]["metric"]["name"]: m["object"]["target"] for m in spec["metrics"]} == {
        # Requests waiting, summed over the engines and divided by their number.
        "specinfer_queue_depth": {"type": "AverageValue", "averageValue": "3"},
        # 20 tokens per second a request is 50 ms of decode per token, a figure that rises with the load; the
        # target is 10 % faster, so that the autoscaler (which waits for 10 % past its target) adds an engine as
        # requests fall to the objective.
        "specinfer_decode_milliseconds_per_token": {"type": "Value", "value": "45455m"},
    }
    assert spec["behavior"]["scaleDown"] == {"stabilizationWindowSeconds": 300}


def test_the_speed_target_keeps_its_thousandths_of_a_millisecond() -> None:
    rendered = hpa({**SCALED, "autoscaling": {"maxReplicas": 2, "decodeTokensPerSecond": 40}})
    assert rendered is not None
    (metric,) = rendered["spec"]["metrics"]
    assert metric["object"]["target"] == {"type": "Value", "value": "22727m"}  # 1000 / 44 ms per token
    rendered = hpa({**SCALED, "autoscaling": {"maxReplicas": 2, "decodeTokensPerSecond": 1}})
    assert rendered is not None
    (metric,) = rendered["spec"]["metrics"]
    assert metric["object"]["target"] == {"type": "Value", "value": "909091m"}


def test_without_autoscaling_there_is_no_autoscaler() -> None:
    assert hpa(NGRAM) is None


def test_a_scale_event_is_not_a_new_configuration() -> None:
    """The autoscaler writes spec.replicas: neither the configuration nor its family may move with it, or each
    scale event would be a canary and a new tuning family."""
    few, many = cr({**SCALED, "replicas": 1}), cr({**SCALED, "replicas": 4})
    defaults = RenderDefaults()
    assert config_hash(few, defaults) == config_hash(many, defaults)
    assert family_hash(few, defaults) == family_hash(many, defaults)


@pytest.mark.parametrize(
    ("autoscaling", "words"),
    [
        ({"minReplicas": 5, "maxReplicas": 2, "queueDepth": 1}, "minReplicas 5 is above maxReplicas 2"),
        ({"maxReplicas": 2}, "an autoscaler needs a target"),
        ({"maxReplicas": 2, "kvCacheUsagePercent": 120}, "kvCacheUsagePercent"),
        ({"queueDepth": 2}, "maxReplicas"),
    ],
)
def test_an_autoscaler_that_cannot_work_is_refused_with_its_field(autoscaling: dict[str, Any], words: str) -> None:
    errors = [str(p) for p in check(resource({**NGRAM, "autoscaling": autoscaling})).errors]
    (error,) = errors
    assert error.startswith("spec.autoscaling")
    assert words in error


def test_every_target_has_an_adapter_rule_naming_its_metric_for_speculativeinferences() -> None:
    rules = adapter_rules()["rules"]
    assert [r["name"]["as"] for r in rules] == [t.metric for t in targets()]
    for rule in rules:
        assert rule["resources"]["overrides"]["name"] == {"group": "specinfer.io", "resource": "speculativeinferences"}
        assert "<<.LabelMatchers>>" in rule["metricsQuery"]
        assert "<<.GroupBy>>" in rule["metricsQuery"]


def test_every_series_an_autoscaler_reads_is_the_engine_jobs() -> None:
    """A `vllm:*` series of another scrape (a pushgateway, a job with honor_labels) labelled with this resource's
    namespace and name moves no figure: every selector of every query, and each rule's series query, names the
    chart's engine job (tests/e2e/test_prometheus.py forges such a series on a real Prometheus)."""
    (scaled,) = [o for o in render(cr(SCALED, namespace="team"), KEDA) if o["kind"] == "ScaledObject"]
    queries = [t.query for t in targets()] + [t["metadata"]["query"] for t in scaled["spec"]["triggers"]]
    queries += [r["seriesQuery"] for r in adapter_rules()["rules"]]
    for query in queries:
        selectors = re.findall(r"(?:vllm:\w+)?\{[^}]*\}", query)
        assert selectors, query
        for selector in selectors:
            assert 'job="specinfer-engines"' in selector, (selector, query)
    job = yaml.safe_load((CHART / "scrape" / "engines.yaml").read_text())
    assert {"target_label": "job", "replacement": ENGINE_JOB} in job["relabel_configs"]


KEDA = RenderDefaults(keda_prometheus="http://prometheus.monitoring:9090")


def test_with_keda_the_resource_gets_a_scaled_object_with_the_same_targets_range_and_windows() -> None:
    children = render(cr(SCALED, namespace="team", uid="u-1"), KEDA)
    assert "HorizontalPodAutoscaler" not in [o["kind"] for o in children]
    (scaled,) = [o for o in children if o["kind"] == "ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInference",
        "name": "demo",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 4)
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa(SCALED)["spec"]["behavior"]  # type: ignore[index]
    queue, speed = spec["triggers"]
    assert queue == {
        "type": "prometheus",
        "name": "queue-depth",
        "metricType": "AverageValue",  # KEDA divides by the engines, as the HPA does
        "metadata": {
            "serverAddress": "http://prometheus.monitoring:9090",
            "query": "sum by (namespace, name) "
            '(vllm:num_requests_waiting{job="specinfer-engines",namespace="team",name="demo"})',
            "threshold": "3",
        },
    }
    # The adapter's query for this resource alone; the threshold is the HPA's target as a decimal (KEDA's own HPA
    # has the same tolerance, so the same headroom).
    assert speed["metricType"] == "Value"
    assert speed["metadata"]["threshold"] == "45.455"
    assert "<<" not in speed["metadata"]["query"]
    assert (
        'rate(vllm:generation_tokens_total{job="specinfer-engines",namespace="team",name="demo"}[2m])'
        in speed["metadata"]["query"]
    )


def test_keda_thresholds_are_what_the_autoscaler_targets() -> None:
    """Each trigger's threshold is its HPA target read as a quantity: the two renderings cannot disagree."""
    spec = {
        **NGRAM,
        "autoscaling": {"maxReplicas": 3, "queueDepth": 7, "kvCacheUsagePercent": 85, "decodeTokensPerSecond": 3},
    }
    rendered = hpa(spec)
    assert rendered is not None
    targets_of = [m["object"]["target"] for m in rendered["spec"]["metrics"]]
    hpa_values = [float(parse(str(t.get("averageValue") or t.get("value")))) for t in targets_of]  # type: ignore[arg-type]
    (scaled,) = [o for o in render(cr(spec, namespace="team"), KEDA) if o["kind"] == "ScaledObject"]
    assert [float(t["metadata"]["threshold"]) for t in scaled["spec"]["triggers"]] == hpa_values
    assert [t["metricType"] for t in scaled["spec"]["triggers"]] == [t["type"] for t in targets_of]


def test_a_manifest_without_a_namespace_selects_its_series_by_name() -> None:
    (scaled,) = [o for o in render(cr(SCALED), KEDA) if o["kind"] == "ScaledObject"]
    assert '{job="specinfer-engines",name="demo"}' in scaled["spec"]["triggers"][0]["metadata"]["query"]


def test_the_autoscalers_the_docs_show_are_what_the_operator_renders() -> None:
    """docs/autoscaling.md shows the example's HorizontalPodAutoscaler and, in team-a with KEDA, its ScaledObject:
    they cannot drift from the rendering (labels and owner left out of the page)."""
    page = (Path(__file__).resolve().parents[4] / "docs" / "autoscaling.md").read_text()
    shown = {
        doc["kind"]: doc
        for block in re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
        if isinstance(doc := yaml.safe_load(block), dict)
        and doc.get("kind") in ("HorizontalPodAutoscaler", SCALED_OBJECT)
    }
    manifest = example("autoscaling/ngram")
    name = manifest["metadata"]["name"]
    keda = RenderDefaults(keda_prometheus="http://prometheus-operated.monitoring.svc:9090")
    rendered = {
        "HorizontalPodAutoscaler": render(cr(manifest["spec"], name=name)),
        SCALED_OBJECT: render(cr(manifest["spec"], name=name, namespace="team-a"), keda),
    }
    for kind, children in rendered.items():
        (child,) = [o for o in children if o["kind"] == kind]
        child["metadata"] = {k: v for k, v in child["metadata"].items() if k in ("name", "namespace")}
        assert shown[kind] == child, kind
