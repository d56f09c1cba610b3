"""Generate the CustomResourceDefinition from the pydantic models (never edit crds/ by hand)."""

from __future__ import annotations

from typing import Any

import yaml

from specinfer_operator.api.engine import WARNING_RULES
from specinfer_operator.api.policy import POLICY_KIND, POLICY_PLURAL, POLICY_RULES, SpeculativeInferencePolicy
from specinfer_operator.api.resource import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    VERSION,
    SpeculativeInference,
)
from specinfer_operator.api.traps import ADMISSION_TRAPS
from specinfer_runtime import passthrough
from specinfer_runtime.base import EDITOR_ENUM, Section
from specinfer_runtime.celrules import Rule

# Every column that describes the serving configuration reads the status: after a rollback the spec still says
# what failed, while the status says what serves.
PRINTER_COLUMNS = [
    {"name": "Method", "type": "string", "jsonPath": ".status.speculation.method"},
    {"name": "K", "type": "integer", "jsonPath": ".status.speculation.numSpeculativeTokens"},
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
    {"name": "Status", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
    # Mean acceptance length (tokens per verification step) is what predicts the speed-up; the acceptance
    # rate alone does not, since it ignores K. Both cover the last window, from the pods that answered.
    {"name": "Accept-Len", "type": "number", "jsonPath": ".status.speculation.observed.meanAcceptanceLength"},
    # With spec.speculative.tuning: the advice (`K=2 +18%`, `measure K=2`, `keep K=4`); the K column is what serves.
    {"name": "Tuning", "type": "string", "jsonPath": ".status.tuning.recommendation.summary"},
    # With spec.autoscaling: the replicas the autoscaler may set, and whether requests get the speed objective.
    {"name": "Autoscale", "type": "string", "jsonPath": ".status.autoscaling.range"},
    {"name": "Objective", "type": "string", "jsonPath": ".status.autoscaling.objective"},
    # With spec.learning: the draft generation in force (spec, or gen-N).
    {"name": "Draft", "type": "string", "jsonPath": ".status.learning.draft"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Accept", "type": "number", "jsonPath": ".status.speculation.observed.acceptanceRate", "priority": 1},
    {"name": "Measured", "type": "integer", "jsonPath": ".status.speculation.observed.podsMeasured", "priority": 1},
    {"name": "Adaptivity", "type": "string", "jsonPath": ".status.speculation.adaptivity", "priority": 1},
    {
        "name": "Decode-Tok/s",
        "type": "number",
        "jsonPath": ".status.speculation.observed.decodeTokensPerSecond",
        "priority": 1,
    },
    # The engine that serves, when its release is known (declared, or stated by the tenant policy).
    {
        "name": "vLLM-Ascend",
        "type": "string",
        "jsonPath": ".status.speculation.engineVersions.vllmAscend",
        "priority": 1,
    },
]

_DROP = {"title", "$defs", EDITOR_ENUM}


def _without_null(node: dict[str, Any]) -> dict[str, Any] | None:
    """An optional field's schema without pydantic's `anyOf: [X, {type: null}]` wrapper: X merged into
    the node; None when the node is a union of several types."""
    choices = [c for c in node.get("anyOf", []) if c != {"type": "null"}]
    if len(choices) != 1:
        return None
    return {**choices[0], **{k: v for k, v in node.items() if k != "anyOf"}}


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a Kubernetes structural-schema node."""
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref:
        node = {**defs[ref.rsplit("/", 1)[-1]], **node}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):  # int-or-string is the one union allowed
        single = _without_null(node)
        if single is None:
            raise ValueError(f"cannot express a union in a structural schema: {node['anyOf']}")
        return _structural(single, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum":
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "properties":
            out["properties"] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties":
            # `false` (unknown fields) is expressed by pruning; `true` by preserve-unknown-fields.
            if isinstance(value, dict) and value:
                out["additionalProperties"] = _structural(value, defs)
        elif key == "maxLength" and node.get("type") == "object":
            out["maxProperties"] = value
        elif key == "propertyNames":
            raise ValueError(f"a CRD schema cannot constrain map keys ({value}): check them in an admission rule")
        else:
            out[key] = value
    if out.get("type") == "object" and "maxItems" in out:
        out["maxProperties"] = out.pop("maxItems")
    return out


def openapi_schema(model: type[Section] = SpeculativeInference) -> dict[str, Any]:
    """The openAPIV3Schema of a kind's CRD."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema = _structural(raw, defs)
    kind = model.model_fields["kind"].description
    schema["properties"]["apiVersion"] = {"type": "string", "description": "APIVersion: " + API_VERSION}
    schema["properties"]["kind"] = {"type": "string", "description": f"Kind: {kind}"}
    schema["properties"]["metadata"] = {"type": "object"}
    schema["required"] = ["spec"]
    return schema


LABELS = {"app.kubernetes.io/name": "specinfer", "app.kubernetes.io/component": "crd"}


def _definition(
    model: type[Section], plural: str, scope: str, short_names: list[str], version: dict[str, Any]
) -> dict[str, Any]:
    kind = str(model.model_fields["kind"].description)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": LABELS},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["specinfer"],
            },
            "versions": [
                {"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": openapi_schema(model)}}
                | version
            ],
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of SpeculativeInference."""
    return _definition(
        SpeculativeInference,
        PLURAL,
        "Namespaced",
        list(SHORT_NAMES),
        {
            "subresources": {
                "status": {},
                "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector",
                },
            },
            "additionalPrinterColumns": PRINTER_COLUMNS,
        },
    )


def policy_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of SpeculativeInferencePolicy (cluster-scoped): the tenant policy."""
    return _definition(SpeculativeInferencePolicy, POLICY_PLURAL, "Cluster", ["specinferpolicy"], {})


def admission_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and its binding) holding the rules CEL in the CRD cannot afford.

    The CRD's CEL is costed before it runs, against worst-case sizes; map keys and the passthrough maps'
    free-form values have no size bound in a schema, so checking them there is refused as too expensive. A
    policy is costed as it runs. It only
    looks at creates and at updates that change the spec, so that metadata updates of an object
    admitted before the policy existed still go through."""
    name = f"{PLURAL}.{GROUP}"
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    rules = (*SpeculativeInference.admission_rules, *passthrough.shape_rules("object.spec"))
    return [_validating_policy(name, rules), binding]


WARNINGS = f"{PLURAL}.{GROUP}-warnings"


def admission_warnings() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and its binding) whose rules only warn: what `kubectl apply` accepts but
    cannot check (engine.py's WARNING_RULES) and the known traps (traps.py), said as `Warning:` lines, as
    `specinfer validate` says them."""
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": WARNINGS, "labels": LABELS},
        "spec": {"policyName": WARNINGS, "validationActions": ["Warn"]},
    }
    return [_validating_policy(WARNINGS, (*WARNING_RULES, *ADMISSION_TRAPS)), binding]


TENANT_POLICY = f"{PLURAL}.{GROUP}-tenant"


def tenant_admission_policy() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy of the tenant policy (policy.py), its SpeculativeInferencePolicy a
    parameter. It does nothing until bound: the chart binds it to the policy object it installs."""
    paramed = _validating_policy(TENANT_POLICY, POLICY_RULES)
    paramed["spec"]["paramKind"] = {"apiVersion": API_VERSION, "kind": POLICY_KIND}
    return paramed


def _validating_policy(name: str, rules: tuple[Rule, ...]) -> dict[str, Any]:
    """A policy checking creates of SpeculativeInferences and the updates that change their spec."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [PLURAL],
                    }
                ]
            },
            "matchConditions": [
                {"name": "spec-changed", "expression": "oldObject == null || object.spec != oldObject.spec"}
            ],
            "validations": [rule.to_policy() for rule in rules],
        },
    }


HEADER = "# Generated by `specinfer crd` from the API models; do not edit.\n"


def crd_yaml() -> str:
    """The CRDs, then the admission policies that complete their validation: `kubectl apply -f crds/` takes
    them all."""
    documents = [crd(), policy_crd(), *admission_policy(), *admission_warnings(), tenant_admission_policy()]
    return HEADER + yaml.safe_dump_all(documents, sort_keys=True, width=120, allow_unicode=True)


def editor_schema() -> dict[str, Any]:
    """A JSON Schema (draft-07) of a SpeculativeInference manifest for editors (yaml-language-server).

    Made from the same models as the CRD, so an editor flags unknown fields, wrong types, enums and ranges
    while typing; cross-field rules are CEL, which editors do not run: `specinfer validate` does."""
    raw = SpeculativeInference.model_json_schema(by_alias=True, mode="validation", ref_template="#/definitions/{model}")
    definitions = raw.pop("$defs", {})
    definitions["ObjectMeta"] = {
        "type": "object",
        "description": "Standard object metadata.",
        "properties": {
            "name": {"type": "string", "description": "Also names the Deployment and the Service."},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["name"],
    }
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        **_for_editors(raw),
        "title": f"{KIND} ({API_VERSION})",
        "definitions": _for_editors(definitions),
    }


def values_schema(model: type[Section]) -> dict[str, Any]:
    """A model's JSON Schema with every definition in place and no Kubernetes extensions, for a validator that
    knows neither `$defs` nor CEL: the node a Helm chart's values.schema.json holds for a value the chart passes
    on as this model (unknown fields refused, as the CRD prunes or refuses them)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            node = {**definitions[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
        return {k: inline(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}

    schema: dict[str, Any] = _for_editors(inline(raw))
    return schema


def _for_editors(node: Any) -> Any:
    """Drop pydantic's generated titles ("Apiversion") and its `null` alternatives of optional fields:
    editors then show the descriptions, and "15 is greater than the maximum of 14" instead of "not valid
    under any of the given schemas"."""
    if isinstance(node, list):
        return [_for_editors(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = (_without_null(node) if "anyOf" in node else None) or dict(node)
    if node.get("default", 0) is None:
        del node["default"]
    if EDITOR_ENUM in node:
        node["enum"] = node.pop(EDITOR_ENUM)
    return {k: _for_editors(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
