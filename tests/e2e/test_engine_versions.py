"""Version-aware admission on the real API server: a spec whose features the runtime image's engine predates
is refused at `kubectl apply`, in the words of `specinfer validate`, and accepted once it declares an image
that runs them. The chart states its default image's releases (runtimeEngineVersions) in the tenant policy."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from hack.kubeclient import Cluster, wait_until
from specinfer_operator.api.engine import DEFAULT_ENGINE_VERSIONS
from specinfer_operator.api.policy import DEFAULT_INSTALL_POLICY
from specinfer_operator.render.admission import check
from tests.e2e.test_tenancy import chart_policy, dry_run, make_namespace
from tests.support.builders import example

DEFAULT = DEFAULT_ENGINE_VERSIONS.vllm_ascend  # the chart's runtimeEngineVersions: older than DSpark (0.25.0rc1)


def dspark(runtime: dict[str, Any] | None) -> dict[str, Any]:
    """examples/dspark.yaml, on the default image (None) or with `runtime` of its own."""
    body = copy.deepcopy(example("dspark"))
    body["spec"].pop("runtime")
    if runtime is not None:
        body["spec"]["runtime"] = runtime
    return body


def apply(cluster: Cluster, namespace: str, body: dict[str, Any]) -> tuple[int, str]:
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(body), check=False)
    return result.returncode, result.stderr


def test_a_feature_the_image_predates_is_refused_before_a_pod_exists(cluster: Cluster, namespaces: list[str]) -> None:
    namespace = make_namespace(cluster, namespaces)
    installed = chart_policy(cluster, f"engine-{namespace}", namespace, {})
    assert installed[0]["spec"]["defaultEngineVersions"]["vllmAscend"] == DEFAULT
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installed))
    try:
        on_default = dspark(None)
        said = wait_until("the tenant policy bound", lambda: dry_run(cluster, namespace, on_default))
        (expected,) = check(on_default, DEFAULT_INSTALL_POLICY).errors  # what plain `specinfer validate` says
        assert expected.message in " ".join(said.split()), said
        assert expected.message.startswith("method dspark needs vllm-ascend >= 0.25.0rc1")
        assert f"the default runtime image runs vllm-ascend {DEFAULT}" in expected.message

        code, said = apply(cluster, namespace, on_default)
        assert code != 0
        assert "speculativeinferences.specinfer.io-tenant" in said
        assert cluster.kubectl("get", "specinference", "-n", namespace, "-o", "name").stdout == ""  # nothing to run

        newer = example("dspark")["spec"]["runtime"]  # the example declares an image on vllm-ascend 0.25.1rc1
        code, said = apply(cluster, namespace, dspark(newer))
        assert (code, "Warning" in said) == (0, False), said
        assert cluster.kubectl("get", "specinference", "-n", namespace, "-o", "name").stdout.strip()

        older = {**newer, "engineVersions": {"vllmAscend": "0.24.0rc1"}}  # the CRD's own rule, policy or not
        said = dry_run(cluster, namespace, dspark(older))
        assert "spec.runtime.engineVersions says the image runs vllm-ascend 0.24.0rc1" in said, said

        own = yaml.safe_dump(dspark({"image": newer["image"]}))
        warned = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=own).stderr
        assert "Warning:" in warned, warned
        assert "only its pods can tell" in warned
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(installed), check=False)
