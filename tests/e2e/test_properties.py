"""Generated resources through `specinfer validate` and through `kubectl create --dry-run=server` on the real
API server (schema, CEL, the admission policies, metadata checks): the two verdicts are the same. The
namespace has the chart's default tenant policy bound, the default image's engine releases included, which is
what `specinfer validate` checks without --policy."""

from __future__ import annotations

import io
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from kubernetes import client

from hack.kubeclient import Cluster, wait_until
from specinfer_operator.cli.commands import main
from tests.e2e.test_tenancy import chart_policy, dry_run
from tests.support.builders import resource as manifest
from tests.support.policyspecs import spec_of
from tests.support.strategies import resources

# With HYPOTHESIS_PROFILE=explore and a larger SPECINFER_PROPERTY_SAMPLE this searches wider than CI does.
SAMPLE = int(os.environ.get("SPECINFER_PROPERTY_SAMPLE", "150"))
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module")
def shared_namespace(cluster: Cluster) -> Iterator[str]:
    """One namespace for every example (hypothesis runs them inside one test call)."""
    name = f"e2e-properties-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_until("the namespace", lambda: cluster.kubectl("get", "namespace", name, check=False).returncode == 0)
    policy = chart_policy(cluster, name, name, {})
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(policy))
    probe = manifest(spec_of({"podTemplate": {"spec": {"volumes": [{"name": "x", "hostPath": {"path": "/x"}}]}}}))
    wait_until("the tenant policy bound", lambda: dry_run(cluster, name, probe))
    yield name
    cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(policy), check=False)
    cluster.core.delete_namespace(name)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("properties")


def verdicts(cluster: Cluster, namespace: str, path: Path) -> tuple[int, str, int, str]:
    out, err = io.StringIO(), io.StringIO()
    ours = main(["validate", "-q", str(path)], out, err)
    theirs = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", str(path), check=False)
    return ours, out.getvalue() + err.getvalue(), theirs.returncode, theirs.stderr


@given(resource=resources())
@settings(max_examples=SAMPLE, deadline=None)
def test_specinfer_validate_and_the_api_server_agree(
    resource: dict[str, Any], cluster: Cluster, shared_namespace: str, scratch: Path
) -> None:
    path = scratch / "resource.yaml"
    path.write_text(yaml.safe_dump(resource, allow_unicode=True))
    ours, said, theirs, server_said = verdicts(cluster, shared_namespace, path)
    assert ours in (0, 1), said  # 2 would mean the YAML we wrote could not be read back
    SEEN["valid" if ours == 0 else "invalid"] += 1
    assert (ours == 0) == (theirs == 0), (
        f"specinfer validate {'accepts' if ours == 0 else 'refuses'} ({said.strip()}), "
        f"the API server {'accepts' if theirs == 0 else 'refuses'} ({server_said.strip()})\n{path.read_text()}"
    )


def test_the_sample_had_both_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nproperties: {sum(SEEN.values())} generated resources, the same verdict from both: {dict(SEEN)}")
    assert SEEN["valid"]
    assert SEEN["invalid"]
