"""The engine releases a runtime image holds, and the rules that refuse a spec whose features need later ones
before any pod exists.

A spec's features have first releases (runtime/specinfer_runtime/compat.py, the table the pod checks itself
against). What runs them is known in two ways: a resource with its own `spec.runtime.image` declares that
image's `spec.runtime.engineVersions`, checked by the CRD's own rules; the operator's default image is
described by the tenant policy (`defaultEngineVersions`, which the chart fills from its runtime image's pin),
checked by the tenant admission policy. The operator and `specinfer validate` evaluate the same expressions.
A resource with its own image and no declaration can only be judged by the pod: admission warns.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule, cel_string
from specinfer_runtime.compat import FEATURES, Feature
from specinfer_runtime.validation import Problem, rule_violations
from specinfer_runtime.versions import RELEASE, RELEASE_LENGTH, at_least

ENGINE_RULE = "engine"  # the id of these rules: ConfigValid's reason is EngineTooOld when they alone refuse


class EngineVersions(Section):
    """The vLLM and vllm-ascend releases in a runtime image, as its labels record them
    (io.specinfer.engine.vllm-ascend, io.specinfer.engine.vllm)."""

    vllm_ascend: str | None = Field(
        default=None,
        max_length=RELEASE_LENGTH,
        pattern=RELEASE,
        description="The vllm-ascend release as the package indexes write it, e.g. 0.25.1rc1 or 0.23.0.post1; when "
        "set, features are checked against it.",
    )
    vllm: str | None = Field(
        default=None,
        max_length=RELEASE_LENGTH,
        pattern=RELEASE,
        description="The vLLM release, e.g. 0.32.0; features are checked against it when vllmAscend is unset "
        "(an image of plain vLLM).",
    )

    cel_rules = (
        Rule(
            id=ENGINE_RULE,
            rule="has(self.vllmAscend) || has(self.vllm)",
            message="name the image's vllmAscend release, its vllm release, or both",
        ),
    )


# The engine releases of the chart's default runtime image: images/runtime/Dockerfile's VLLM_ASCEND_VERSION and
# VLLM_VERSION, which the chart's runtimeEngineVersions state to admission as the tenant policy's
# defaultEngineVersions. Plain `specinfer validate` checks against them as a default install does (policy.py's
# DEFAULT_INSTALL_POLICY); tests keep the Dockerfile and the chart equal to this.
DEFAULT_ENGINE_VERSIONS = EngineVersions(vllm_ascend="0.23.0", vllm="0.23.0")


def _floors(feature: Feature) -> str:
    """The first releases, as messages say them: "vllm-ascend >= 0.25.0rc1 (vLLM >= 0.25.0 without it)"."""
    if feature.ascend and feature.vllm:
        return f"vllm-ascend >= {feature.ascend} (vLLM >= {feature.vllm} without it)"
    return f"vllm-ascend >= {feature.ascend}" if feature.ascend else f"vLLM >= {feature.vllm}"


def _runs(versions: str) -> str:
    """CEL: the releases at `versions`, as a message names them."""
    return f"(has({versions}.vllmAscend) ? 'vllm-ascend ' + {versions}.vllmAscend : 'vLLM ' + {versions}.vllm)"


def _new_enough(versions: str, feature: Feature) -> str:
    """CEL: the releases at `versions` run `feature`: vllm-ascend's when named, else vLLM's."""
    ascend = f"{versions}.vllmAscend.matches({cel_string(at_least(feature.ascend))})" if feature.ascend else "true"
    vllm = f"{versions}.vllm.matches({cel_string(at_least(feature.vllm))})" if feature.vllm else "true"
    return f"(has({versions}.vllmAscend) ? {ascend} : (!has({versions}.vllm) || {vllm}))"


CHECKED = tuple(f for f in FEATURES if f.ascend is not None or f.vllm is not None)
DECLARED = "self.runtime.engineVersions"
DEFAULT = "params.spec.defaultEngineVersions"


def _floor_rule(feature: Feature, versions: str, unless: str, said: str, fix: str, field_path: str) -> Rule:
    """Refuse `feature` when the releases at `versions` predate it (not when `unless` holds); the message names
    the feature, its first releases, the image's (`said` introduces them) and the `fix`. `unless` may be ""."""
    return Rule(
        id=ENGINE_RULE,
        rule=" || ".join(
            p for p in (f"!({feature.used})", unless, f"!has({versions})", _new_enough(versions, feature)) if p
        ),
        message=f"{feature.name} needs {_floors(feature)}, but {said} %s: {fix}",
        args=(_runs(versions),),
        field_path=field_path,
        reason="FieldValueForbidden",
    )


# On the spec (`self`): a resource's own image, as it declares it.
DECLARED_RULES: tuple[Rule, ...] = (
    Rule(
        id=ENGINE_RULE,
        rule="!has(self.runtime.engineVersions) || has(self.runtime.image)",
        message="engineVersions describes spec.runtime.image, which is unset: set the image, or remove "
        "engineVersions (the default image's versions are the platform team's to state)",
        field_path=".runtime.engineVersions",
    ),
    *(
        _floor_rule(
            f,
            DECLARED,
            "",
            "spec.runtime.engineVersions says the image runs",
            "use a runtime image with a newer engine, or leave this feature out",
            ".runtime.engineVersions",
        )
        for f in CHECKED
    ),
)

# On the resource (`object`) with the tenant policy (`params`): the operator's default image.
DEFAULT_RULES: tuple[Rule, ...] = tuple(
    _floor_rule(
        replace(f, used=f.used.replace("self.", "object.spec.")),
        DEFAULT,
        "has(object.spec.runtime.image)",
        "the default runtime image runs",
        "set spec.runtime.image to an image with a newer engine and declare its spec.runtime.engineVersions, or "
        "ask the platform team for a newer default runtime image",
        f".spec.{f.field}",
    )
    for f in CHECKED
)

# Warnings at admission: what only the pod can judge.
WARNING_RULES: tuple[Rule, ...] = (
    Rule(
        id=ENGINE_RULE,
        rule="!has(object.spec.runtime.image) || has(object.spec.runtime.engineVersions)",
        message="spec.runtime.image has no spec.runtime.engineVersions, so only its pods can tell whether it runs "
        "this spec's features (they refuse to start if not): declare the image's vllm-ascend (or vLLM) release",
        field_path=".spec.runtime.engineVersions",
    ),
)


def default_problems(resource: dict[str, Any], versions: EngineVersions) -> list[Problem]:
    """What the default image (running `versions`) cannot run in a valid resource, without a tenant policy
    (`specinfer validate --engine-version`); with one, its rules include these."""
    params = {"spec": {"defaultEngineVersions": versions.dump()}}
    return rule_violations(DEFAULT_RULES, resource, variable="object", params=params)


def undeclared(resource: dict[str, Any]) -> list[Problem]:
    """The warnings admission gives a valid resource (as stored: camelCase, defaults applied)."""
    return rule_violations(WARNING_RULES, resource, variable="object")
