"""The limits on Prometheus' scrape of the engines: scrape/engines.yaml holds the chart's defaults (values.yaml),
and a real vLLM /metrics stays well within them, so they cut a flood and never an engine.

That the PodMonitor renders the values is checked with helm (tests/e2e/test_chart_install.py); that Prometheus cuts a
pod over them, on a real Prometheus (tests/e2e/test_prometheus.py).
"""

from __future__ import annotations

import re

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_dashboard import ROOT, VLLM_CAPTURE

CHART = ROOT / "charts" / "specinfer-operator"
# The PodMonitor's limits, and the fields of a plain scrape job they are.
LIMITS = {
    "sampleLimit": "sample_limit",
    "labelLimit": "label_limit",
    "labelNameLengthLimit": "label_name_length_limit",
    "labelValueLengthLimit": "label_value_length_limit",
    "bodySizeLimit": "body_size_limit",
}
# Labels every sample gets from its target: the PodMonitor's (job, instance, namespace, pod, container,
# endpoint) and the chart's (name, track, group); label_limit counts them, and __name__.
TARGET_LABELS = 9
# How far under each limit vLLM's own figures stay.
MARGIN = {
    "sampleLimit": 20,
    "bodySizeLimit": 20,
    "labelLimit": 2,
    "labelNameLengthLimit": 2,
    "labelValueLengthLimit": 2,
}
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def defaults() -> dict[str, object]:
    found: dict[str, object] = yaml.safe_load((CHART / "values.yaml").read_text())["engineMetrics"]["podMonitor"]
    return found


def size(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)(B|KiB|MiB|GiB)", text)
    assert match, text
    return int(match.group(1)) * _UNITS[match.group(2)]


def test_the_plain_scrape_job_has_the_charts_limits() -> None:
    job = yaml.safe_load((CHART / "scrape" / "engines.yaml").read_text())
    values = defaults()
    assert {snake: job.get(snake) for snake in LIMITS.values()} == {
        snake: values[camel] for camel, snake in LIMITS.items()
    }
    assert values["targetLimit"] == 0
    assert "target_limit" not in job


def test_a_real_vllm_metrics_is_well_within_the_limits() -> None:
    body = VLLM_CAPTURE.read_text()
    samples = [s for family in text_string_to_metric_families(body) for s in family.samples]
    labels = [label for s in samples for label in s.labels.items()]
    used = {
        "sampleLimit": len(samples),
        "bodySizeLimit": len(body.encode()),
        "labelLimit": 1 + TARGET_LABELS + max(len(s.labels) for s in samples),
        "labelNameLengthLimit": max(len(name) for name, _ in labels),
        "labelValueLengthLimit": max(len(value) for value in [s.name for s in samples] + [v for _, v in labels]),
    }
    values = defaults()
    limits = {k: size(str(v)) if k == "bodySizeLimit" else int(str(v)) for k, v in values.items() if k in LIMITS}
    print(f"\n{'limit':<24} {'vLLM':>8} {'limit':>10}")
    for name, figure in used.items():
        print(f"{name:<24} {figure:>8} {limits[name]:>10}")
    assert all(used[name] * MARGIN[name] <= limits[name] for name in LIMITS), (used, limits)
