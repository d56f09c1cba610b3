"""The Helm values a GitOps repository gives the specinfer charts, checked the way `helm install` checks them.

An Argo CD Application (`helm.valuesObject`, or the YAML text `helm.values`, of `spec.source` or of each of
`spec.sources`) or a Flux HelmRelease (`spec.values`) that installs specinfer-crds or specinfer-operator hands
the chart values that its values.schema.json may refuse: in the cluster, after merge, as a failed sync. So they
are checked here, merged onto the chart's defaults as Helm merges them. The charts' defaults and schemas ship
with this package (CHART_FILES, written from charts/ by `make crd` and `make chart`; a unit test fails when one
is stale), so neither helm nor the chart is needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from specinfer_operator.cli.yaml_documents import ManifestError, documents
from specinfer_runtime.validation import Problem

CHARTS = ("specinfer-crds", "specinfer-operator")
CHART_FILES = {name: f"{name}.chart.json" for name in CHARTS}  # {chart, version, values, schema}
APPLICATION = ("argoproj.io", "Application")
HELM_RELEASE = ("helm.toolkit.fluxcd.io", "HelmRelease")
OCI_REPOSITORY = ("source.toolkit.fluxcd.io", "OCIRepository")
RULE = "values.schema.json"


def _kind(data: Any) -> tuple[str, Any] | None:
    if not isinstance(data, dict):
        return None
    return str(data.get("apiVersion", "")).partition("/")[0], data.get("kind")


def deploys(data: Any) -> bool:
    """Whether `data` is an object that may give a specinfer chart its values, or name the chart's registry."""
    return _kind(data) in (APPLICATION, HELM_RELEASE, OCI_REPOSITORY)


def chart_named(reference: Any) -> str | None:
    """The specinfer chart a reference ends in: `specinfer-operator`, `./charts/specinfer-operator`,
    `oci://ghcr.io/specinfer/charts/specinfer-operator`; None for any other chart."""
    name = str(reference).rstrip("/").rpartition("/")[2] if isinstance(reference, str) else ""
    return name if name in CHARTS else None


def oci_charts(data: Any) -> dict[str, str | None]:
    """{name: the specinfer chart its URL ends in, or None} for a Flux OCIRepository; {} for anything else."""
    if _kind(data) != OCI_REPOSITORY:
        return {}
    spec, meta = data.get("spec"), data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return {name: chart_named(spec.get("url")) if isinstance(spec, dict) else None} if isinstance(name, str) else {}


@dataclass(frozen=True)
class Given:
    """Values an object gives a chart, at a path of the object (`spec.values`, `spec.source.helm.valuesObject`)."""

    at: str
    values: Any


@dataclass(frozen=True)
class Install:
    """One install of a specinfer chart an object declares, with its values in the order Helm merges them."""

    chart: str
    given: tuple[Given, ...]


def _application(spec: dict[str, Any]) -> Iterator[Install]:
    if "source" in spec:
        sources = [("spec.source", spec["source"])]
    else:
        listed = spec.get("sources")
        sources = [(f"spec.sources[{i}]", s) for i, s in enumerate(listed if isinstance(listed, list) else [])]
    for at, source in sources:
        if not isinstance(source, dict):
            continue
        path = source.get("path")
        # Helm repository (chart), Git (path) and Argo CD's native OCI source (repoURL oci://.../CHART, path .)
        chart = chart_named(source.get("chart") or (path if path not in (None, "", ".") else source.get("repoURL")))
        helm = source.get("helm")
        if chart is None or not isinstance(helm, dict):
            continue
        given = []
        if isinstance(helm.get("values"), str):  # Argo CD merges valuesObject over it
            try:
                parsed = [d.data for d in documents(helm["values"]) if d.data is not None]
            except ManifestError as error:
                raise ManifestError(f"{at}.helm.values: {error}") from error
            given.append(Given(f"{at}.helm.values", parsed[0] if len(parsed) == 1 else parsed))
        if "valuesObject" in helm:
            given.append(Given(f"{at}.helm.valuesObject", helm["valuesObject"]))
        yield Install(chart, tuple(given))


def installs(data: Any, oci: dict[str, str | None]) -> list[Install] | str:
    """The specinfer charts `data` installs and the values it gives them; a reason when its chart is not known
    (a chartRef to an OCIRepository not among `oci`, the OCIRepositories found). ManifestError, naming the field,
    for helm.values that is not YAML within the limits of yaml_documents.py."""
    kind = _kind(data)
    spec = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict) or kind not in (APPLICATION, HELM_RELEASE):
        return []
    if kind == APPLICATION:
        return list(_application(spec))
    ref, template = spec.get("chartRef"), spec.get("chart")
    if isinstance(ref, dict) and ref.get("kind") == "OCIRepository":
        if str(ref.get("name")) not in oci:
            return (
                f"its chartRef names the OCIRepository {ref.get('name')}, not among the paths given: give its path too"
            )
        chart = oci[str(ref.get("name"))]
    elif isinstance(template, dict) and isinstance(template.get("spec"), dict):
        chart = chart_named(template["spec"].get("chart"))
    else:
        chart = None
    return [Install(chart, (Given("spec.values", spec.get("values") or {}),))] if chart else []


@cache
def chart_file(chart: str) -> dict[str, Any]:
    """The chart's version, default values and values schema, as this package ships them."""
    text = resources.files(__package__).joinpath(CHART_FILES[chart]).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def merged(base: Any, over: Any) -> Any:
    """`over` merged onto `base` as Helm coalesces values: maps key by key, a null deleting the key, anything else
    replacing what was there."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(base.get(key), value)
    return out


def _dotted(path: Any) -> str:
    out = ""
    for token in path:
        out += f"[{token}]" if isinstance(token, int) else f".{token}" if out else str(token)
    return out


def _fix(error: jsonschema.ValidationError) -> str:
    """What to write instead, from the schema: the keys allowed, the values allowed, or what the value is."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(schema.get("properties"), dict):
        return "allowed: " + ", ".join(sorted(schema["properties"]))
    if error.validator == "enum" and isinstance(error.validator_value, list):
        return "allowed: " + ", ".join(json.dumps(v) for v in error.validator_value)
    description = schema.get("description")
    return str(description) if description else ""


def _errors(schema: dict[str, Any], values: Any) -> Iterator[jsonschema.ValidationError]:
    """The schema's errors, each at its deepest (an allOf or anyOf that failed stands for what failed in it)."""
    for error in jsonschema.Draft7Validator(schema).iter_errors(values):
        yield from _errors_within(error)


def _errors_within(error: jsonschema.ValidationError) -> Iterator[jsonschema.ValidationError]:
    if error.validator == "allOf" and error.context:
        for inner in error.context:
            yield from _errors_within(inner)
    else:
        yield error


def _holds(values: Any, path: list[str | int]) -> bool:
    for token in path:
        held = isinstance(values, dict) and token in values
        held = held or (isinstance(values, list) and isinstance(token, int) and 0 <= token < len(values))
        if not held:
            return False
        values = values[token]
    return True


def _given_at(install: Install, path: list[str | int]) -> str:
    """The object's field that holds the value at `path`: in the last values that set it, else the last given
    (a value missing, or a default the given values make invalid)."""
    for given in reversed(install.given):
        if _holds(given.values, path):
            return _join(given.at, path)
    return install.given[-1].at if install.given else "spec"


def _join(at: str, path: list[str | int]) -> str:
    rest = _dotted(path)
    return f"{at}[{rest[1:]}" if rest.startswith("[") else f"{at}.{rest}" if rest else at


def check(install: Install) -> list[Problem]:
    """The problems of the values `install` gives its chart, merged onto the chart's defaults, by the object's
    field that holds each: the chart's schema's message, the values path, and the fix."""
    chart = chart_file(install.chart)
    values = chart["values"]
    for given in install.given:
        values = merged(values, given.values)
    problems = []
    for error in sorted(_errors(chart["schema"], values), key=lambda e: list(map(str, e.absolute_path))):
        path = list(error.absolute_path)
        fix = _fix(error)
        where = f"{install.chart} {chart['version']} value {_dotted(path) or '(the root)'}"
        message = f"{error.message} ({where}{'; ' + fix if fix else ''})"
        problems.append(Problem(_given_at(install, path), message, RULE))
    return problems
