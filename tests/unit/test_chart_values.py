"""The operator chart's conventions, rendered by the real `helm template`: name overrides, commonLabels on every
object, the operator container's extra arguments, environment and volumes, the monitors' namespace and relabelings,
additional rules, and the engine pods' defaults, which reach the operator's settings and so the pods it renders."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer_operator.manager.settings import parse
from specinfer_operator.render.children import render
from tests.support.builders import cr, example

CHART = Path(__file__).resolve().parents[2] / "charts" / "specinfer-operator"
OPTIONS = CHART / "ci" / "options-values.yaml"
ASCEND = {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def helm(binaries: dict[str, Path]) -> Path:  # binaries: tests/unit/conftest.py
    return binaries["helm"]


def template(helm: Path, *values: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(helm), "template", "rel", str(CHART), "--namespace", "ops", *values],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container


def operator_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in operator_container(objects)["env"] if "value" in e}


@pytest.fixture(scope="module")
def options(helm: Path) -> list[dict[str, Any]]:
    return template(helm, "--values", str(OPTIONS))


def test_name_overrides_name_every_object_and_keep_the_selector_matching(options: list[dict[str, Any]]) -> None:
    values = yaml.safe_load(OPTIONS.read_text())
    for obj in options:
        assert obj["metadata"]["name"].startswith(values["fullnameOverride"]), obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == values["nameOverride"], obj["kind"]
    deployment = one(options, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert operator_env(options)["SPECINFER_LEADER_ELECTION_ID"] == values["fullnameOverride"]


def test_name_override_alone_makes_release_dash_name(helm: Path) -> None:
    deployment = one(template(helm, "--set", "nameOverride=si"), "Deployment")
    assert deployment["metadata"]["name"] == "rel-si"
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "si"


def test_common_labels_are_on_every_object_and_the_operator_pods(options: list[dict[str, Any]]) -> None:
    (key, value), *_ = yaml.safe_load(OPTIONS.read_text())["commonLabels"].items()
    assert len({o["kind"] for o in options}) > 10
    for obj in options:
        assert obj["metadata"]["labels"][key] == value, (obj["kind"], obj["metadata"]["name"])
    assert one(options, "Deployment")["spec"]["template"]["metadata"]["labels"][key] == value


def test_extra_args_env_and_volumes_reach_the_operator_container(options: list[dict[str, Any]]) -> None:
    container = operator_container(options)
    assert container["args"] == ["--log-level=info"]
    assert operator_env(options)["SSL_CERT_FILE"] == "/etc/specinfer/ca/ca.crt"
    assert {"name": "ca", "mountPath": "/etc/specinfer/ca", "readOnly": True} in container["volumeMounts"]
    volumes = one(options, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "ca", "configMap": {"name": "platform-ca"}} in volumes


def test_defaults_add_no_arguments_volumes_or_labels(helm: Path) -> None:
    objects = template(helm)
    container = operator_container(objects)
    assert "args" not in container
    assert [m["name"] for m in container["volumeMounts"]] == ["tmp"]
    assert one(objects, "Deployment")["metadata"]["name"] == "rel-specinfer-operator"


def test_monitors_and_rules_go_to_their_namespace_with_relabelings_and_rules(options: list[dict[str, Any]]) -> None:
    monitor = one(options, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["ops"]  # still the operator's Service
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == [{"targetLabel": "cluster", "replacement": "prod-1"}]
    assert endpoint["metricRelabelings"][0]["action"] == "drop"
    pods = one(options, "PodMonitor")
    assert pods["metadata"]["namespace"] == "monitoring"
    (endpoint,) = pods["spec"]["podMetricsEndpoints"]
    assert endpoint["relabelings"][0]["action"] == "keep"  # the chart's come first
    assert endpoint["relabelings"][-1] == {"targetLabel": "cluster", "replacement": "prod-1"}
    assert endpoint["metricRelabelings"][0]["regex"] == "vllm:request_params_.*"
    rule = one(options, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "monitoring"
    added = rule["spec"]["groups"][-1]
    assert added["name"] == "specinfer-additional"
    assert [r.get("alert") or r.get("record") for r in added["rules"]] == [
        "SpecinferEngineDown",
        "specinfer:engine_up:sum",
    ]


def test_additional_rules_render_with_every_alert_left_out(helm: Path, tmp_path: Path) -> None:
    groups = yaml.safe_load((CHART / "rules" / "specinfer-alerts.yaml").read_text())["groups"]
    every = {r["alert"]: True for g in groups for r in g["rules"] if "alert" in r}
    rule = {"record": "x:up:sum", "expr": "sum(up)"}
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"prometheusRule": {"enabled": True, "disabled": every, "additionalRules": [rule]}})
    )
    (group,) = one(template(helm, "--values", str(values)), "PrometheusRule")["spec"]["groups"]
    assert group == {"name": "specinfer-additional", "rules": [rule]}


def test_the_schema_refuses_a_wrong_pull_policy_namespace_argument_and_label(helm: Path) -> None:
    for value in (
        "runtimeImage.pullPolicy=Sometimes",
        "prometheusRule.namespace=Monitoring",
        "extraArgs[0]=1",
        "commonLabels.app\\.kubernetes\\.io/name=mine",  # the chart's own label: a selector reads it
    ):
        result = subprocess.run(
            [str(helm), "template", "rel", str(CHART), "--set", value], capture_output=True, text=True, check=False
        )
        assert result.returncode != 0, value
        assert "values don't meet the specifications of the schema" in result.stderr, value


def test_the_engine_defaults_reach_the_operator_and_the_pods_it_renders(
    helm: Path, options: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for objects, tolerations, node_selector, pull in (
        (template(helm), [ASCEND], None, "IfNotPresent"),
        (
            options,
            [
                ASCEND,
                {"key": "example.com/npu-pool", "operator": "Equal", "value": "inference", "effect": "NoSchedule"},
            ],
            {"accelerator": "huawei-Ascend910"},
            "Always",
        ),
    ):
        for name, value in operator_env(objects).items():
            monkeypatch.setenv(name, value)
        defaults = parse([]).render
        spec = {k: v for k, v in example("ngram")["spec"].items() if k != "placement"}
        deployment = {o["kind"]: o for o in render(cr(spec, uid="u1", namespace="ml"), defaults)}["Deployment"]
        pod = deployment["spec"]["template"]["spec"]
        assert pod["tolerations"] == tolerations
        assert pod.get("nodeSelector") == node_selector
        assert pod["containers"][0]["imagePullPolicy"] == pull
    assert defaults.trainer_pull_policy == "Never"
