"""The CRD is generated from the models, structural, bounded, and committed up to date."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import cel
import pytest
import yaml

from specinfer_operator.api.crd import (
    admission_policy,
    admission_warnings,
    crd,
    crd_yaml,
    policy_crd,
    tenant_admission_policy,
)
from specinfer_operator.api.overlay import VOLUME_SOURCES
from specinfer_operator.api.policy import POLICY_RULES, VolumeType
from specinfer_runtime.celrules import KUBERNETES_FUNCTIONS

ROOT = Path(__file__).resolve().parents[4]
SCHEMA = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]

# CEL standard library operators, functions and macros the rules may use, as cel reports them.
CEL_STANDARD = {
    "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "_-_", "_*_", "_/_", "_%_",
    "_&&_", "_||_", "!_", "_?_:_", "_[_]", "@in", "size", "string", "int", "double", "matches",
    "startsWith", "endsWith", "contains", "has", "all", "exists", "exists_one", "map", "filter",
    "type",  # what an int-or-string field's rules read first
    "@not_strictly_false",  # what the all() macro compiles to
}  # fmt: skip


def nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from nodes(node["additionalProperties"], f"{path}{{}}")


def rules() -> Iterator[dict[str, str]]:
    for _, node in nodes(SCHEMA):
        yield from node.get("x-kubernetes-validations", [])


@pytest.mark.parametrize("directory", ["crds", "charts/specinfer-crds/files"])
def test_committed_crd_is_current(directory: str) -> None:
    committed = (ROOT / directory / "speculativeinference.yaml").read_text()
    assert committed == crd_yaml(), f"{directory}/ is stale: run `make crd`"


INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]  # the one union a structural schema takes, as is


def test_schema_is_structural() -> None:
    for path, node in nodes(SPEC, "spec"):
        union = node.get("x-kubernetes-int-or-string") and node.get("anyOf") == INT_OR_STRING
        assert not {"$ref", "allOf", "oneOf", "title", "const"} & node.keys(), path
        assert "anyOf" not in node or union, path
        assert "type" in node or union or node.get("x-kubernetes-preserve-unknown-fields"), path
        if node.get("type") == "object" and "properties" in node:
            assert "additionalProperties" not in node, path


def test_every_field_is_described() -> None:
    for path, node in nodes(SPEC, "spec"):
        for name, sub in node.get("properties", {}).items():
            assert sub.get("description"), f"{path}.{name} has no description"


def test_every_speculative_field_names_its_vllm_equivalent() -> None:
    spec_fields = SPEC["properties"]["speculative"]["properties"]
    for name in (
        "numSpeculativeTokens",
        "method",
        "draftModel",
        "draftTensorParallelSize",
        "disablePaddedDrafterBatch",
    ):
        assert "vLLM" in spec_fields[name]["description"], name
    ngram = spec_fields["ngram"]["properties"]
    assert "prompt_lookup_max" in ngram["promptLookupMax"]["description"]
    suffix = spec_fields["suffix"]["properties"]
    assert "suffix_decoding_max_tree_depth" in suffix["maxTreeDepth"]["description"]


def test_strings_and_lists_are_bounded() -> None:
    """Unbounded strings and lists make the API server's CEL cost estimate explode."""
    for path, node in nodes(SPEC, "spec"):
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path


def test_bounds_and_defaults() -> None:
    k = SPEC["properties"]["speculative"]["properties"]["numSpeculativeTokens"]
    assert (k["minimum"], k["maximum"]) == (1, 14)
    threshold = SPEC["properties"]["speculative"]["properties"]["rejectionSampler"]["properties"]["posteriorThreshold"]
    assert (threshold["minimum"], threshold["exclusiveMinimum"], threshold["maximum"]) == (0, True, 1)
    assert SPEC["properties"]["rollout"]["properties"]["maxSurge"]["default"] == 0
    assert SPEC["properties"]["rollout"]["default"] == {
        "maxSurge": 0,
        "maxUnavailable": 1,
        "progressDeadlineSeconds": 1800,
        "onFailure": "Rollback",
        "strategy": "RollingUpdate",
        "canary": {"maxSpeedDropPercent": 2, "minComparisons": 3, "minDraftTokens": 2000},
    }
    sizes = SPEC["properties"]["graph"]["properties"]["captureSizes"]
    assert sizes["x-kubernetes-list-type"] == "set"


def test_rules_compile_and_use_only_supported_functions() -> None:
    supported = CEL_STANDARD | set(KUBERNETES_FUNCTIONS)
    found = list(rules())
    assert len(found) >= 20
    for rule in found:
        for expression in (rule["rule"], rule.get("messageExpression")):
            if expression:
                used = set(cel.compile(expression).functions())
                assert used <= supported, f"{expression}: {used - supported}"


def test_names_columns_and_subresources() -> None:
    spec = crd()["spec"]
    assert spec["names"]["shortNames"] == ["specinference", "specinf"]
    version = spec["versions"][0]
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns if c.get("priority", 0) == 0] == [
        "Method", "K", "Ready", "Status", "Accept-Len", "Tuning", "Autoscale", "Objective", "Draft", "Age",
    ]  # fmt: skip
    wide = ["Accept", "Measured", "Adaptivity", "Decode-Tok/s", "vLLM-Ascend"]
    assert [c["name"] for c in columns if c.get("priority", 0) == 1] == wide
    schema = version["schema"]["openAPIV3Schema"]
    for column in columns:  # a column whose path the schema lacks stays empty forever
        if "[" in column["jsonPath"] or column["jsonPath"].startswith(".metadata"):
            continue
        node = schema
        for key in column["jsonPath"].strip(".").split("."):
            node = node["properties"][key]
        assert node["type"] == column["type"], column
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"


def test_the_columns_say_what_serves() -> None:
    """What serves is the status's: after a rollback the spec still says what failed."""
    columns = crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if c["jsonPath"].startswith(".spec")] == []


def test_crd_yaml_round_trips() -> None:
    documents = [crd(), policy_crd(), *admission_policy(), *admission_warnings(), tenant_admission_policy()]
    assert list(yaml.safe_load_all(crd_yaml())) == documents


def test_the_policy_kind_is_cluster_scoped_and_its_admission_policy_takes_it_as_parameter() -> None:
    definition = policy_crd()
    assert definition["spec"]["scope"] == "Cluster"
    assert definition["spec"]["names"]["kind"] == "SpeculativeInferencePolicy"
    tenant = tenant_admission_policy()["spec"]
    assert tenant["paramKind"] == {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInferencePolicy"}
    assert len(tenant["validations"]) == len(POLICY_RULES)
    assert all("params" in v["expression"] for v in tenant["validations"])


def test_the_volume_types_a_policy_names_are_the_overlays() -> None:
    assert get_args(VolumeType) == VOLUME_SOURCES


def test_messages_avoid_string_concatenation() -> None:
    """The API server cannot bound `string(int)` and refuses any message concatenating one (kubernetes#124234)."""
    for rule in rules():
        assert not re.search(r"\bstring\(", rule.get("messageExpression", "")), rule
