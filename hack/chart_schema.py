"""Write the generated parts of the operator chart's values.schema.json: tenantPolicy.spec, from the policy model,
and prometheusRule.disabled, from the alerts of rules/specinfer-alerts.yaml.

The chart passes tenantPolicy.spec on as the spec of a SpeculativeInferencePolicy; with the model's own schema
(every field, its type and bounds, unknown fields refused) `helm install` refuses a misspelt field by its path
before the API server would prune it. prometheusRule.disabled takes exactly the alerts' names, so that a misspelt
one is refused rather than leaving its alert on. `make crd` and `make chart` run this;
tests/unit/test_chart_schema.py fails when the committed file is not what it writes.

Usage: python -m hack.chart_schema [SCHEMA_FILE]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from specinfer_operator.api.crd import values_schema
from specinfer_operator.api.policy import TenantPolicySpec

CHART = Path(__file__).resolve().parents[1] / "charts" / "specinfer-operator"
SCHEMA = CHART / "values.schema.json"
RULES = CHART / "rules" / "specinfer-alerts.yaml"


def alerts() -> list[str]:
    """The alerts' names, in the rule file's order."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def generated(schema: dict[str, Any]) -> dict[str, Any]:
    """The chart's schema with tenantPolicy.spec made from TenantPolicySpec and prometheusRule.disabled from the
    rule file; the rest as written."""
    out: dict[str, Any] = json.loads(json.dumps(schema))
    spec = values_schema(TenantPolicySpec)
    spec["description"] = (
        "The spec of the SpeculativeInferencePolicy the chart installs (generated from the policy model by "
        "hack/chart_schema.py: run `make crd`). " + spec["description"]
    )
    out["properties"]["tenantPolicy"]["properties"]["spec"] = spec
    disabled = out["properties"]["prometheusRule"]["properties"]["disabled"]
    disabled["properties"] = {name: {"type": "boolean"} for name in alerts()}
    return out


def text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else SCHEMA
    path.write_text(text(generated(json.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
