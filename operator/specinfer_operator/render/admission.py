"""What the operator admits: one document checked as `kubectl apply` and the operator would check it (its
identity, the schema and the resource's own CEL rules, warnings), and against a tenant policy when one is
given. The same check serves reconcile, refresh, Auto's K and `specinfer validate` (pure)."""

from __future__ import annotations

from typing import Any

from specinfer_operator.api.engine import EngineVersions, default_problems, undeclared
from specinfer_operator.api.metadata import STORED
from specinfer_operator.api.policy import POLICY_KIND, TenantPolicySpec, policy_problems
from specinfer_operator.api.resource import API_VERSION, GROUP, KIND, SpeculativeInference
from specinfer_operator.api.traps import traps
from specinfer_operator.render.children import annotation_warnings
from specinfer_operator.render.pod import overridden
from specinfer_operator.render.sizing import qos_warnings
from specinfer_operator.render.storage import download_warnings
from specinfer_runtime.advisories import advise
from specinfer_runtime.validation import Problem, Report, validate


def not_ours(data: Any) -> str | None:
    """Why a document is not a SpeculativeInference, or None when it claims to be one. A mapping with a
    spec but neither apiVersion nor kind counts as one, so that what is missing gets reported."""
    if isinstance(data, list):
        return "a list, not an object (a kustomize patch?)"
    if not isinstance(data, dict):
        return f"a {type(data).__name__}, not an object"
    api_version, kind = str(data.get("apiVersion", "")), data.get("kind")
    if kind == POLICY_KIND:
        return "a SpeculativeInferencePolicy (give it with --policy to check the resources against it)"
    if kind == KIND or api_version.split("/")[0] == GROUP:
        return None
    if kind is None and not api_version and isinstance(data.get("spec"), dict) and "speculative" in data["spec"]:
        return None
    return f"kind {kind or '(none)'} of {api_version or '(no apiVersion)'}"


def identity_problems(data: Any) -> list[Problem]:
    """Checks before the schema: is this a SpeculativeInference of a version we serve?"""
    if not isinstance(data, dict):
        return [Problem("", "not a Kubernetes object: expected a mapping with apiVersion, kind, metadata and spec")]
    problems = []
    for key, want in (("apiVersion", API_VERSION), ("kind", KIND)):
        if key not in data:
            problems.append(Problem(key, f'Required value: set {key}: "{want}"'))
        elif data[key] != want:
            problems.append(Problem(key, f'Unsupported value: "{data[key]}": supported values: "{want}"'))
    return problems


def check(
    data: Any, policy: TenantPolicySpec | None = None, engine: EngineVersions | None = None, stored: bool = False
) -> Report[SpeculativeInference]:
    """Everything `kubectl apply` and the operator would say about one SpeculativeInference; with a tenant
    policy, what it refuses too (the schema and the resource's own rules first, as admission runs them); with
    `engine`, what a default runtime image of those releases cannot run (as the policy's defaultEngineVersions).
    `stored`: the resource comes from the API server, which has checked its metadata (see metadata.py)."""
    problems = identity_problems(data)
    if problems:
        return Report(errors=problems)
    report = validate(SpeculativeInference, data, advise=_warnings, context={STORED: True} if stored else None)
    if report.stored is None or (policy is None and engine is None):
        return report
    resource = report.stored
    if policy is not None:
        refused = policy_problems(
            resource, policy.model_copy(update={"default_engine_versions": engine}) if engine else policy
        )
    else:
        refused = default_problems(resource, engine) if engine is not None else []
    return Report(errors=refused, warnings=report.warnings) if refused else report


def _warnings(cr: SpeculativeInference, resource: dict[str, Any]) -> list[Problem]:
    """Accepted, but probably not what was meant, or not checkable here (admission warns the same)."""
    pod = overridden(cr.spec.pod_template) + download_warnings(cr.spec) + qos_warnings(cr.spec)
    return advise(cr.spec) + pod + annotation_warnings(cr) + undeclared(resource) + traps(resource)
