"""spec.autoscaling: the HorizontalPodAutoscaler scales the resource on Object metrics that the adapter rules
compute from the engines' series, and a spec without a target or with its range upside down is refused."""

from __future__ import annotations

from typing import Any

import pytest

from specinfer_operator.render.admission import check
from specinfer_operator.render.autoscaler import adapter_rules, targets
from specinfer_operator.render.children import RenderDefaults, config_hash, family_hash, render
from tests.support.builders import cr, resource

NGRAM = {"model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}
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
