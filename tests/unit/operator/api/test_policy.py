"""The tenant policy (pure): what it refuses, that the chart's values are its defaults, and validate --policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer_operator.api.policy import DEFAULT_INSTALL_POLICY, TenantPolicySpec, policy_problems
from specinfer_operator.render.admission import check
from tests.support.builders import EXAMPLES, resource
from tests.support.cli import refused, specinfer
from tests.support.policycases import CASES
from tests.support.policyspecs import Refused, paths, spec_of
from tests.unit.test_docs import YAML_BLOCK

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(("name", "extra", "policy", "path"), CASES, ids=[c[0] for c in CASES])
def test_what_the_policy_refuses(name: str, extra: dict[str, Any], policy: dict[str, Any], path: Refused) -> None:
    report = check(resource(spec_of(extra)))
    assert report.value is not None, report.errors  # valid without a policy: the policy alone decides
    found = policy_problems(report.value.dump(), TenantPolicySpec.model_validate(policy))
    assert [p.path for p in found] == paths(path)
    for problem in found:  # what the platform team forbids, or what its default image cannot run
        assert (problem.rule, "tenant policy" in problem.message) in {("policy", True), ("engine", False)}
        assert problem.rule == "policy" or "the default runtime image runs" in problem.message


def test_a_refusal_names_the_value_what_is_allowed_and_the_fix() -> None:
    extra = {"podTemplate": {"spec": {"volumes": [{"name": "etc", "hostPath": {"path": "/etc"}}]}}}
    report = check(resource(spec_of(extra)), TenantPolicySpec())
    (problem,) = report.errors
    assert problem.path == "spec.podTemplate.spec.volumes"
    assert '["/etc"]' in problem.message
    assert "/usr/local/Ascend/driver (read-only)" in problem.message
    assert "use a PersistentVolumeClaim" in problem.message


def test_a_refused_pull_secret_names_the_secret_and_the_policy_field_that_allows_it() -> None:
    extra = {"runtime": {"imagePullSecrets": [{"name": "team-b-registry"}]}}
    policy = TenantPolicySpec.model_validate({"allowedImagePullSecrets": ["team-a-*"], "allowedSecrets": ["*"]})
    (problem,) = check(resource(spec_of(extra)), policy).errors
    assert problem.path == "spec.runtime.imagePullSecrets"
    assert problem.message.startswith('pull Secrets ["team-b-registry"] are not allowed by the tenant policy')
    assert 'whose allowedImagePullSecrets is ["team-a-*"]' in problem.message
    assert problem.message.endswith("ask the platform team to add them to allowedImagePullSecrets")


def test_the_charts_values_are_the_policys_defaults() -> None:
    values = yaml.safe_load((ROOT / "charts" / "specinfer-operator" / "values.yaml").read_text())
    assert values["tenantPolicy"]["spec"] == TenantPolicySpec().dump()


def test_validate_applies_the_defaults_or_a_policy_file(tmp_path: Path) -> None:
    manifest = tmp_path / "nfs.yaml"
    nfs = {
        "podTemplate": {"spec": {"volumes": [{"name": "share", "nfs": {"server": "nfs.example.com", "path": "/x"}}]}}
    }
    manifest.write_text(yaml.safe_dump(resource(spec_of(nfs))))
    by_default = specinfer("validate", str(manifest))
    assert by_default.returncode == 1
    assert "NFS servers" not in by_default.stdout  # NFS is not an allowed volume type by default
    assert 'volumes ["share"] are of types the tenant policy' in by_default.stdout
    policy = tmp_path / "policy.yaml"
    allowing = {"allowedVolumeTypes": ["nfs"], "allowedNfsServers": ["nfs.example.com"]}
    document = {
        "apiVersion": "specinfer.io/v1alpha1",
        "kind": "SpeculativeInferencePolicy",
        "metadata": {"name": "p"},
        "spec": allowing,
    }
    policy.write_text(yaml.safe_dump(document))
    assert specinfer("validate", "--policy", str(policy), str(manifest)).returncode == 0
    policy.write_text(yaml.safe_dump({**document, "spec": {"allowedVolumeTypes": ["nfs", "gitRepo"]}}))
    refused(specinfer("validate", "--policy", str(policy), str(manifest)), "spec.allowedVolumeTypes[1]")
    not_a_policy = specinfer("validate", "--policy", str(manifest), str(manifest))
    assert not_a_policy.returncode == 2
    assert not_a_policy.stderr.splitlines() == [
        f"specinfer validate: --policy {manifest}: not one policy manifest (kind SpeculativeInferencePolicy)"
    ]


def test_a_policy_among_manifests_is_skipped_not_checked_as_a_resource(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        yaml.safe_dump(
            {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInferencePolicy", "metadata": {"name": "p"}}
        )
    )
    result = specinfer("validate", "-v", str(tmp_path))
    assert result.returncode == 0
    assert "skipped: a SpeculativeInferencePolicy" in result.stderr


def documented() -> list[tuple[str, Any]]:
    """Every SpeculativeInference of examples/ and of the docs' YAML blocks, by where it is."""
    found = [(str(p.relative_to(ROOT)), yaml.safe_load(p.read_text())) for p in sorted(EXAMPLES.rglob("*.yaml"))]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for i, block in enumerate(YAML_BLOCK.findall(page.read_text())):
            for document in yaml.safe_load_all(block):
                if isinstance(document, dict) and document.get("kind") == "SpeculativeInference":
                    found.append((f"{page.relative_to(ROOT)} block {i}", document))
    return found


def test_every_documented_resource_passes_the_default_policy() -> None:
    """The defaults keep what the docs show working: each valid example is valid under the policy of a default install
    too (as plain `specinfer validate` checks it), the default runtime image's engine releases included."""
    valid = [(where, data) for where, data in documented() if check(data).ok]
    assert len(valid) >= 30
    refused = {where: [str(p) for p in check(data, DEFAULT_INSTALL_POLICY).errors] for where, data in valid}
    learns = {where for where, data in valid if "learning" in data["spec"]}
    assert learns  # docs/learning.md's: a platform opts into learning, then it passes as the rest does
    assert {where: [e.split(":")[0] for e in refused[where]] for where in learns} == {
        w: ["spec.learning"] for w in learns
    }
    opted_in = DEFAULT_INSTALL_POLICY.model_copy(update={"learning_allowed": True})
    refused |= {where: [str(p) for p in check(data, opted_in).errors] for where, data in valid if where in learns}
    assert {where: errors for where, errors in refused.items() if errors} == {}


def test_a_node_pinning_annotation_is_refused_by_name_and_value_with_the_field_that_allows_it() -> None:
    pins = {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    extra = {"podTemplate": {"metadata": {"annotations": {**pins, "prometheus.io/scrape": "true"}}}}
    report = check(resource(spec_of(extra)), TenantPolicySpec())
    (problem,) = report.errors
    assert problem.path == "spec.podTemplate.metadata.annotations"
    assert "karpenter.sh/do-not-disrupt=true" in problem.message
    assert "cluster-autoscaler.kubernetes.io/safe-to-evict=false" in problem.message
    assert "prometheus.io" not in problem.message
    assert "drainBlockingBudgetsAllowed" in problem.message
    assert problem.message.endswith("remove them")
    assert check(resource(spec_of(extra)), TenantPolicySpec(drain_blocking_budgets_allowed=True)).value is not None
