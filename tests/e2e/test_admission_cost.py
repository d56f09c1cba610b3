"""The costliest specs the CRD admits (hack/worst_spec.py) on the real API server: its CEL stays within the
API server's cost limits for them, so the valid ones are stored and the invalid ones refused for what is
wrong with them, never for the cost of finding out; the operator's own check says the same. And the bound on
passthrough values, which no schema can state, holds at `kubectl apply` as in the operator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hack.kubeclient import Cluster
from hack.worst_spec import Shape, size, worst
from specinfer_operator.render.admission import check
from specinfer_runtime.passthrough import MAX_VALUE_ENTRIES, SHAPE_MESSAGE
from tests.support.builders import resource

COST_ERRORS = ("cost budget", "exceeds budget", "cost limit", "too expensive")
NGRAM = {"model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}


def apply(cluster: Cluster, namespace: str, body: dict[str, Any], name: str) -> tuple[int, str]:
    """`kubectl apply --server-side` of `body` as `name`: the exit code, and what kubectl said."""
    body = {**body, "metadata": {**body["metadata"], "name": name, "namespace": namespace}}
    done = cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(body), check=False)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("shape", ["dense", "long"])
def test_the_api_server_stores_the_worst_spec_the_crd_admits(cluster: Cluster, namespace: str, shape: Shape) -> None:
    body = worst(valid=True, shape=shape)
    code, said = apply(cluster, namespace, body, f"worst-{shape}")
    assert code == 0, said
    assert not any(error in said for error in COST_ERRORS), said
    stored = cluster.get("speculativeinference", f"worst-{shape}", "-n", namespace)
    assert size({"spec": stored["spec"]}) >= size({"spec": body["spec"]})  # all of it, defaults added
    assert check(body).ok


@pytest.mark.parametrize("shape", ["dense", "long"])
def test_the_worst_invalid_spec_is_refused_for_its_fields_not_for_its_cost(
    cluster: Cluster, namespace: str, shape: Shape
) -> None:
    body = worst(valid=False, shape=shape)
    code, said = apply(cluster, namespace, body, f"invalid-{shape}")
    assert code != 0
    assert not any(error in said for error in COST_ERRORS), said[:2000]
    assert "spec.disruptionBudget.maxUnavailable: Invalid value" in said, said[:2000]
    assert "set exactly one of secretKeyRef, configMapKeyRef, fieldRef" in said, said[:2000]
    assert not check(body).ok


@pytest.mark.parametrize(
    "value",
    [list(range(MAX_VALUE_ENTRIES + 1)), [[0] * 200, [0] * 200], [[[0]]]],
    ids=["too-many", "too-many-in-all", "three-deep"],
)
def test_a_passthrough_value_over_its_bounds_is_refused_at_apply_as_in_the_operator(
    cluster: Cluster, namespace: str, value: Any
) -> None:
    body = resource({**NGRAM, "additionalConfig": {"eplb_config": value}})
    code, said = apply(cluster, namespace, body, "passthrough")
    assert code != 0
    assert f'spec.additionalConfig: ["eplb_config"]: {SHAPE_MESSAGE}' in " ".join(said.split()), said
    assert [str(p) for p in check(body).errors] == [f'spec.additionalConfig: ["eplb_config"]: {SHAPE_MESSAGE}']


def test_nulls_in_passthrough_values_are_stored_as_the_operator_reads_them(cluster: Cluster, namespace: str) -> None:
    body = resource({**NGRAM, "additionalConfig": {"refresh": None, "eplb_config": {"path": None, "sizes": [1, None]}}})
    code, said = apply(cluster, namespace, body, "nulls")
    assert code == 0, said
    stored = cluster.get("speculativeinference", "nulls", "-n", namespace)["spec"]["additionalConfig"]
    report = check(body)
    assert report.stored is not None
    assert report.stored["spec"]["additionalConfig"] == stored == {"eplb_config": {"path": None, "sizes": [1, None]}}
