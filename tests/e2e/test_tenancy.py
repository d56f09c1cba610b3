"""Many tenants, one operator, on the real API server: the tenant policy at `kubectl apply` and in the
operator, Kubernetes' own Pod Security admission, and names that belong to another team."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client

from hack.kubeclient import Cluster, pods, wait_until
from specinfer_operator.api.policy import TenantPolicySpec, policy_problems
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, render
from specinfer_operator.render.training import training_job
from tests.e2e.test_chart import CHART, helm
from tests.e2e.test_operator import apply, condition, resource, serving, wait_ready, wait_reason, wait_resource
from tests.support.builders import cr
from tests.support.builders import resource as manifest
from tests.support.policycases import CASES
from tests.support.policyspecs import DRIVER, DRIVER_MOUNT, NON_ROOT, learning, paths, spec_of

ASCEND_DRIVER = {"runtime": {"volumeMounts": [DRIVER_MOUNT]}, "podTemplate": {"spec": {"volumes": [DRIVER]}}}


def one_pod(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**spec_of(extra or {}), "replicas": 1}


def make_namespace(cluster: Cluster, made: list[str], labels: dict[str, str] | None = None) -> str:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    made.append(name)
    wait_until(
        f"the default ServiceAccount in {name}",
        lambda: cluster.core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
    )
    return name


def chart_policy(
    cluster: Cluster, release: str, namespace: str, spec: dict[str, Any], *values: str
) -> list[dict[str, Any]]:
    """The chart's tenant policy and its binding, as `helm install` would create them for a release that
    watches `namespace` (`values`: more helm arguments)."""
    out = helm(
        cluster,
        "template",
        release,
        str(CHART),
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--set-json",
        f"tenantPolicy.spec={json.dumps(spec)}",
        "--show-only",
        "templates/tenant-policy.yaml",
        *values,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def dry_run(cluster: Cluster, namespace: str, body: dict[str, Any]) -> str:
    """kubectl apply --dry-run=server: the API server's verdict, admission policies included; "" when accepted."""
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(body), check=False
    )
    return "" if result.returncode == 0 else result.stderr


def test_the_charts_policy_refuses_at_kubectl_apply_what_the_operator_and_validate_refuse(
    cluster: Cluster, namespaces: list[str]
) -> None:
    policies = {json.dumps(p, sort_keys=True) for _, _, p, _ in CASES}
    installed: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    for i, text in enumerate(sorted(policies)):
        namespace = make_namespace(cluster, namespaces)
        objects = chart_policy(cluster, f"tenancy-{namespace}-{i}", namespace, json.loads(text))
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        installed += objects
        where[text] = namespace
    try:
        # Bindings reach the API server's admission within seconds: wait until each refuses a host path.
        probe = manifest(one_pod({"podTemplate": {"spec": {"volumes": [{"name": "x", "hostPath": {"path": "/x"}}]}}}))
        for namespace in where.values():
            wait_until(f"the tenant policy bound in {namespace}", lambda ns=namespace: dry_run(cluster, ns, probe))
        disagreements = []
        for i, (name, extra, policy, path) in enumerate(CASES):
            body = manifest(one_pod(extra), name=f"case-{i}")
            report = check(body)
            assert report.value is not None, (name, report.errors)
            expected = policy_problems(report.value.dump(), TenantPolicySpec.model_validate(policy))
            said = dry_run(cluster, where[json.dumps(policy, sort_keys=True)], body)
            refused_by_api = "speculativeinferences.specinfer.io-tenant" in said
            # The API server names the first validation that fails; the unit test checks every one.
            if bool(expected) != refused_by_api or any(p not in said for p in paths(path)[:1]):
                disagreements.append((name, [str(p) for p in expected], said))
            elif expected:  # the same words at kubectl apply as from the operator and specinfer validate
                assert expected[0].message.split(":")[0] in said, (name, said)
        assert not disagreements, disagreements
        explained = " ".join(cluster.kubectl("explain", "specinferpolicy.spec.allowedHostPaths").stdout.split())
        assert "Host paths a pod may mount" in explained
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(installed), check=False)


def test_a_policy_that_leaves_fields_out_has_their_defaults_at_kubectl_apply_too(
    cluster: Cluster, namespaces: list[str]
) -> None:
    """The operator reads a policy with pydantic's defaults; the API server fills the CRD's, on create and on read,
    so that the admission policy's `params.spec` has every field the rules read."""
    namespace = make_namespace(cluster, namespaces)
    installed = chart_policy(cluster, f"partial-{namespace}", namespace, {})
    partial = {"allowedSecrets": ["team-a-*"]}
    installed[0]["spec"] = partial
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installed))
    try:
        stored = cluster.get("specinferpolicy", installed[0]["metadata"]["name"])["spec"]
        assert stored == TenantPolicySpec.model_validate(partial).dump()
        node_port = manifest(one_pod({"service": {"type": "NodePort"}}))
        said = wait_until("the tenant policy bound", lambda: dry_run(cluster, namespace, node_port))
        report = check(node_port)
        assert report.value is not None
        (expected,) = policy_problems(report.value.dump(), TenantPolicySpec.model_validate(partial))
        assert expected.message.split(":")[0] in said, said
        theirs = manifest(one_pod({"runtime": {"envFrom": [{"secretRef": {"name": "team-a-db"}}]}}))
        assert dry_run(cluster, namespace, theirs) == ""
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(installed), check=False)


@pytest.mark.usefixtures("operator")
def test_the_operator_enforces_the_policy_and_keeps_the_last_valid_configuration(
    cluster: Cluster, namespace: str
) -> None:
    """No binding here: the API server admits the spec, the operator (with the policy's defaults) does not."""
    apply(cluster, namespace, "web", one_pod())
    wait_ready(cluster, namespace, "web")
    before = serving(cluster, namespace, "web")
    host_root = {"podTemplate": {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}}
    apply(cluster, namespace, "web", one_pod(host_root))
    obj = wait_reason(cluster, namespace, "web", "ConfigValid", "ForbiddenByPolicy")
    assert 'host paths ["/"] are not allowed by the tenant policy' in condition(obj, "ConfigValid")["message"]
    assert serving(cluster, namespace, "web") == before  # the last valid configuration keeps serving
    apply(cluster, namespace, "fresh", one_pod(host_root))
    wait_resource(
        cluster, namespace, "fresh", "the refusal", lambda o: condition(o, "ConfigValid").get("status") == "False"
    )
    assert cluster.kubectl("get", "deployment", "-n", namespace, "fresh", check=False).returncode != 0


@pytest.mark.usefixtures("operator")
def test_pod_security_levels_what_runs_and_what_is_refused_in_the_api_servers_words(
    cluster: Cluster, namespaces: list[str]
) -> None:
    baseline = make_namespace(cluster, namespaces, {"pod-security.kubernetes.io/enforce": "baseline"})
    restricted = make_namespace(cluster, namespaces, {"pod-security.kubernetes.io/enforce": "restricted"})
    non_root = {"podTemplate": {"spec": {"securityContext": {**NON_ROOT, "runAsGroup": 1000}}}}
    # Without an overlay an engine pod passes baseline; restricted once it runs as a user other than root.
    apply(cluster, baseline, "plain", one_pod())
    apply(cluster, restricted, "non-root", one_pod(non_root))
    for namespace, name in ((baseline, "plain"), (restricted, "non-root")):
        wait_ready(cluster, namespace, name)
        (pod,) = pods(cluster, namespace, name)
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # Refused pods: the resource says why, as the API server said it.
    refusals = {
        (baseline, "driver"): (ASCEND_DRIVER, 'violates PodSecurity "baseline:latest": hostPath volumes'),
        (restricted, "as-root"): ({}, 'violates PodSecurity "restricted:latest": runAsNonRoot != true'),
    }
    for (namespace, name), (extra, _) in refusals.items():
        apply(cluster, namespace, name, one_pod(extra))
    for (namespace, name), (_, words) in refusals.items():
        obj = wait_reason(cluster, namespace, name, "Degraded", "FailedCreate")
        message = condition(obj, "Degraded")["message"]
        assert message.startswith("the ReplicaSet cannot create pods: pods "), message
        assert words in message, message
    # A change into what the namespace refuses is rolled back: the last good configuration serves again.
    apply(cluster, baseline, "plain", one_pod(ASCEND_DRIVER))
    obj = wait_reason(cluster, baseline, "plain", "Progressing", "RolledBack", timeout=120)
    rolled_back = obj["status"]["rollout"]["rolledBack"]
    assert rolled_back["reason"] == "FailedCreate"
    assert "hostPath volumes" in rolled_back["message"]
    assert obj["status"]["ready"] == "1/1"


def test_a_training_pod_passes_the_namespaces_pod_security_as_the_engines_do(
    cluster: Cluster, namespaces: list[str]
) -> None:
    """spec.learning's training pod, as the Job controller makes it from the operator's Job, in a restricted
    namespace: admitted once the resource runs as a user other than root, as its engines are; refused as root,
    in the API server's words."""
    restricted = make_namespace(cluster, namespaces, {"pod-security.kubernetes.io/enforce": "restricted"})
    non_root = {"podTemplate": {"spec": {"securityContext": {**NON_ROOT, "runAsGroup": 1000}}}}

    def training_pod(extra: dict[str, Any]) -> dict[str, Any]:
        found = cr(one_pod({**learning(), **extra}), uid="u1", namespace=restricted)
        template = training_job(found, 1, 0, 0.0, RenderDefaults())["spec"]["template"]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"}, "spec": template["spec"]}

    assert dry_run(cluster, restricted, training_pod(non_root)) == ""
    refused = dry_run(cluster, restricted, training_pod({}))
    assert 'violates PodSecurity "restricted:latest": runAsNonRoot != true' in refused, refused


def test_the_engines_record_only_into_their_own_directory_and_unscannable_patterns_are_refused(
    cluster: Cluster, namespace: str
) -> None:
    """spec.learning's engine pod mounts only samples/<its name>/ of the claim, which the API server accepts; a
    redaction pattern RE2 cannot read (lookaround) is refused at kubectl apply, in the operator's words."""
    masked = learning()
    masked["learning"]["sampling"] = {"redact": ["sk-[A-Za-z0-9]{8,}"]}
    found = cr(one_pod(masked), uid="u1", namespace=namespace)
    deployment = next(o for o in render(found) if o["kind"] == "Deployment")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "engine"},
        "spec": deployment["spec"]["template"]["spec"],
    }
    mounts = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "learning"]
    assert [m.get("subPathExpr") for m in mounts] == ["samples/$(SPECINFER_POD_NAME)"]
    assert dry_run(cluster, namespace, pod) == ""
    assert dry_run(cluster, namespace, manifest(one_pod(masked))) == ""
    masked["learning"]["sampling"]["redact"] = ["(?=secret)\\w+"]
    refused = dry_run(cluster, namespace, manifest(one_pod(masked)))
    assert "spec.learning.sampling.redact[0]" in refused, refused
    assert "RE2 does not support" in refused, refused


@pytest.mark.usefixtures("operator")
def test_a_resource_named_after_another_teams_service_leaves_it_untouched(cluster: Cluster, namespace: str) -> None:
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "api", "labels": {"team": "b"}},
        "spec": {"selector": {"app": "their-api"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(theirs))
    before = cluster.get("service", "-n", namespace, "api")
    apply(cluster, namespace, "api", one_pod())
    obj = wait_reason(cluster, namespace, "api", "ConfigValid", "NameConflict")
    message = condition(obj, "ConfigValid")["message"]
    assert f"Service {namespace}/api exists and is not this SpeculativeInference's" in message
    assert "(its controller: no controller): it was left untouched" in message
    after = cluster.get("service", "-n", namespace, "api")
    assert after["spec"]["selector"] == {"app": "their-api"}
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "ownerReferences" not in after["metadata"]
    assert (
        cluster.kubectl(
            "get", "deployment,configmap", "-n", namespace, "-l", "app.kubernetes.io/instance=api", "-o", "name"
        ).stdout
        == ""
    )  # nothing applied
    events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=api")
    assert "NameConflict" in events.stdout
    # Their Service goes: the name is free, and the resource rolls out on its own (retried every 30 s).
    cluster.kubectl("delete", "service", "-n", namespace, "api")
    obj = wait_ready(cluster, namespace, "api", timeout=90)
    owner = cluster.get("service", "-n", namespace, "api")["metadata"]["ownerReferences"][0]
    assert owner["uid"] == obj["metadata"]["uid"]


@pytest.mark.usefixtures("operator")
def test_a_budget_of_the_same_name_that_is_not_its_own_is_never_deleted(cluster: Cluster, namespace: str) -> None:
    budget: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "api"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "their-api"}}},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(budget))
    apply(cluster, namespace, "api", one_pod())
    wait_ready(cluster, namespace, "api")
    changed = copy.deepcopy(one_pod())
    changed["speculative"]["numSpeculativeTokens"] = 5  # a new generation, still no budget
    apply(cluster, namespace, "api", changed)
    wait_ready(cluster, namespace, "api")
    assert cluster.get("pdb", "-n", namespace, "api")["spec"]["selector"] == budget["spec"]["selector"]
    assert resource(cluster, namespace, "api")["status"]["speculation"]["numSpeculativeTokens"] == 5
