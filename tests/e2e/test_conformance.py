"""The case table through the real API server: the CRD's schema and CEL rules agree with Python."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from hack.kubeclient import Cluster
from specinfer_operator.api.resource import GROUP, PLURAL, VERSION
from specinfer_operator.platform.kube import Kube
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import render
from tests.support.builders import EXAMPLES
from tests.support.casetable import Case, load_cases

CASES = load_cases()


def server_verdict(cluster: Cluster, namespace: str, case: Case) -> tuple[bool, str]:
    """(accepted, message) for a server-side dry-run create with strict field validation."""
    body = copy.deepcopy(case.resource)
    body["metadata"]["namespace"] = namespace
    try:
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
        )
    except ApiException as error:
        if error.status not in (400, 422):
            raise
        return False, str(json.loads(error.body or "{}").get("message", error.body))
    return True, ""


def test_api_server_agrees_with_the_python_validator(
    cluster: Cluster, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mismatches, refused = [], Counter[str]()
    skipped = [c for c in CASES if c.api_server is not True]
    for case in (c for c in CASES if c.api_server is True):
        python_ok = check(case.resource).ok
        server_ok, message = server_verdict(cluster, namespace, case)
        if server_ok != python_ok:
            mismatches.append(
                f"{case.name}: API server {'accepted' if server_ok else 'refused'} ({message}), "
                f"Python {'accepted' if python_ok else 'refused'}"
            )
        elif not server_ok:
            refused[case.rule] += 1
            if case.fragment and case.fragment not in message:
                mismatches.append(f"{case.name}: API server message lacks {case.fragment!r}: {message}")
    operator_only = sorted({c.rule for c in CASES if c.valid and c.fragment})
    with capsys.disabled():
        enforced = sum(refused.values())
        print(
            f"\nconformance: {len(CASES) - len(skipped)} cases sent to the API server, "
            f"{enforced} refused there as in Python, by rule: {dict(sorted(refused.items()))}"
        )
        print(f"conformance: warnings only the operator reports (the API server accepts): {', '.join(operator_only)}")
        print("conformance: checked in the pod by the runtime preflight: R8 (arctic-inference), R16 (draft vocabulary)")
        for case in skipped:
            print(f"conformance: not sent: {case.name} ({case.api_server})")
    assert not mismatches, "\n".join(mismatches)


def test_what_the_operator_renders_is_accepted(
    cluster: Cluster, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every valid case and example renders into children (ConfigMap, Deployment, Service, PodDisruptionBudget)
    that the API server takes (a dry-run server-side apply, as the operator itself applies them): a resource
    `kubectl apply` accepted never fails at the operator's apply."""
    kube = Kube(cluster.api)
    resources = [(c.name, c.resource) for c in CASES if c.valid] + [
        (path.name, yaml.safe_load(path.read_text())) for path in sorted(EXAMPLES.glob("*.yaml"))
    ]
    refused, applied = [], 0
    for name, resource in resources:
        body = copy.deepcopy(resource)
        body["metadata"].update(namespace=namespace, uid="00000000-0000-0000-0000-000000000000")
        report = check(body)
        assert report.value is not None, name
        for child in render(report.value):
            applied += 1
            try:
                kube.apply(child, dry_run=True)
            except ApiException as error:
                refused.append(f"{name}: {child['kind']}: {error.body}")
    with capsys.disabled():
        print(f"\nconformance: {len(resources)} valid resources rendered, {applied} children applied (dry run)")
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize(
    "name", ["quantity-memory-gb", "quantity-negative-cpu", "r6-batched-tokens-below-k", "r1-method-typo"]
)
def test_the_edges_users_hit_are_refused_at_their_field_in_the_words_of_validate(
    cluster: Cluster, namespace: str, name: str
) -> None:
    """`kubectl apply` names the field the case names, and says all that `specinfer validate` says of it."""
    (case,) = [c for c in CASES if c.name == name]
    accepted, message = server_verdict(cluster, namespace, case)
    (problem,) = check(case.resource).errors
    assert not accepted
    assert problem.path == case.path
    assert f"{case.path}: Invalid value: " in message, message
    assert problem.message in " ".join(message.split()), message


def test_integer_quantities_are_taken_as_in_a_pod(cluster: Cluster, namespace: str) -> None:
    (case,) = [c for c in CASES if c.name == "quantity-integers"]
    assert server_verdict(cluster, namespace, case) == (True, "")
