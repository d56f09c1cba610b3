"""The operator chart's values.schema.json and alerts, without helm: the generated tenantPolicy.spec is current and
refuses what the policy model refuses, and every alert has a runbook and a switch.

Rendering, linting and the API server's verdict on the result are tests/e2e/test_chart.py's.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from hack.chart_schema import (
    ADAPTER_RULES,
    CHART,
    PACKAGED,
    RULES,
    SCHEMA,
    adapter_text,
    alerts,
    generated,
    packaged,
    text,
)
from specinfer_operator.api.policy import TenantPolicySpec
from tests.support import ROOT

RUNBOOKS = ROOT / "docs" / "runbooks.md"


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def errors(vals: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(vals)]


def test_the_committed_schema_is_what_the_generator_writes() -> None:
    assert SCHEMA.read_text() == text(generated(schema())), "values.schema.json is stale: run `make crd`"


def test_the_committed_adapter_rules_are_what_the_generator_writes() -> None:
    assert ADAPTER_RULES.read_text() == adapter_text(), f"{ADAPTER_RULES.name} is stale: run `make crd`"


@pytest.mark.parametrize("chart", sorted(PACKAGED), ids=lambda chart: chart.name)
def test_the_copy_specinfer_validate_checks_values_with_is_the_charts(chart: Path) -> None:
    """Each chart's version, values.yaml and values.schema.json, as the package ships them (cli/helm_values.py)."""
    assert PACKAGED[chart].read_text() == packaged(chart), f"{PACKAGED[chart].name} is stale: run `make chart`"


def test_the_defaults_pass_the_schema() -> None:
    assert errors(values()) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"allowedHostPath": []}, "'allowedHostPath' was unexpected"),
        ({"allowedVolumeTypes": ["gitRepo"]}, "'gitRepo' is not one of"),
        ({"allowedHostPaths": [{"pathPrefix": "/data", "readonly": True}]}, "'readonly' was unexpected"),
        ({"maxTerminationGracePeriodSeconds": -1}, "-1 is less than the minimum of 0"),
        ({"defaultEngineVersions": {"vllm": "latest"}}, "'latest' does not match"),
    ],
)
def test_tenant_policy_spec_refuses_what_the_model_refuses(change: dict[str, Any], words: str) -> None:
    vals = copy.deepcopy(values())
    vals["tenantPolicy"]["spec"].update(change)
    found = errors(vals)
    assert any(words in e for e in found), found
    with pytest.raises(ValidationError):  # the model refuses the same spec
        TenantPolicySpec.model_validate(vals["tenantPolicy"]["spec"])


def test_the_root_takes_a_parent_charts_globals_and_nothing_else_unknown() -> None:
    assert errors({**values(), "global": {"imageRegistry": "registry.example.com", "storageClass": "x"}}) == []
    assert any("'runtimeimage' was unexpected" in e for e in errors({**values(), "runtimeimage": {}}))


def test_every_alert_can_be_switched_off_by_name_and_has_a_runbook() -> None:
    names = alerts()
    rule = schema()["properties"]["prometheusRule"]["properties"]
    assert sorted(rule["disabled"]["properties"]) == sorted(names)
    typo = {**values(), "prometheusRule": {"disabled": {"SpecinferLowAcceptence": True}}}
    assert any("'SpecinferLowAcceptence' was unexpected" in e for e in errors(typo)), "a misspelt name is refused"
    base = values()["prometheusRule"]["runbookUrl"]
    sections = re.findall(r"^## (\w+)$", RUNBOOKS.read_text(), flags=re.M)
    assert sections == names, "docs/runbooks.md: one section per alert, in the rule file's order"
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for found in group["rules"]:
            assert found["annotations"]["runbook_url"] == f"{base}#{found['alert'].lower()}"


@pytest.mark.parametrize("value", ["30s", "500ms", "5m", "1h30m", "0"])
def test_durations_are_written_as_prometheus_writes_them(value: str) -> None:
    assert errors({**values(), "telemetry": {"scrapeTimeout": value}}) == []


@pytest.mark.parametrize("value", [30, "30", "30 s", "1.5s", "", "30sec"])
def test_a_duration_in_another_form_is_refused(value: object) -> None:
    assert errors({**values(), "telemetry": {"scrapeTimeout": value}}), value
