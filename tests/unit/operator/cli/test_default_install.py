"""Plain `specinfer validate` checks what a default chart install checks: the tenant policy `helm install` creates
from the chart's values (rendered here by the real `helm template`), the default runtime image's engine releases
included. --policy replaces that policy, --engine-version the releases it states."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer_operator.api.engine import DEFAULT_ENGINE_VERSIONS
from specinfer_operator.api.policy import DEFAULT_INSTALL_POLICY, POLICY_KIND
from specinfer_operator.cli.manifests import load_policy
from tests.support.builders import example
from tests.support.cli import refused, specinfer

ROOT = Path(__file__).resolve().parents[4]
CHART = ROOT / "charts" / "specinfer-operator"
DSPARK_ON_THE_DEFAULT_IMAGE = (
    "spec.speculative.method: method dspark needs vllm-ascend >= 0.25.0rc1 (vLLM >= 0.25.0 without it), but the "
    "default runtime image runs vllm-ascend 0.23.0"
)


@pytest.fixture(scope="module")
def installed_policy(binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SpeculativeInferencePolicy a default install of the chart creates, as a file."""
    rendered = subprocess.run(
        [
            str(binaries["helm"]),
            "template",
            "specinfer-operator",
            str(CHART),
            "--show-only",
            "templates/tenant-policy.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (policy,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == POLICY_KIND]
    path = tmp_path_factory.mktemp("chart") / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def dspark(runtime: dict[str, Any] | None, tmp_path: Path) -> Path:
    """examples/dspark.yaml on the default image (None), or with `runtime` of its own, as a file."""
    body = copy.deepcopy(example("dspark"))
    body["spec"].pop("runtime")
    if runtime is not None:
        body["spec"]["runtime"] = runtime
    path = tmp_path / "dspark.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_the_built_in_policy_is_the_one_a_default_install_creates(installed_policy: Path) -> None:
    assert load_policy(str(installed_policy)) == DEFAULT_INSTALL_POLICY
    assert DEFAULT_INSTALL_POLICY.default_engine_versions == DEFAULT_ENGINE_VERSIONS


def test_plain_validate_refuses_what_a_default_install_refuses(installed_policy: Path, tmp_path: Path) -> None:
    manifest = str(dspark(None, tmp_path))
    plain, against_the_chart = (
        specinfer("validate", manifest),
        specinfer("validate", "--policy", str(installed_policy), manifest),
    )
    assert (plain.returncode, against_the_chart.returncode) == (1, 1), plain.stderr
    assert plain.stdout == against_the_chart.stdout
    assert f"{manifest}: {DSPARK_ON_THE_DEFAULT_IMAGE}" in plain.stdout
    own = example("dspark")["spec"]["runtime"]  # an image of its own, on vllm-ascend 0.25.1rc1, declared
    assert specinfer("validate", str(dspark(own, tmp_path))).returncode == 0


def test_engine_version_replaces_the_default_images_releases(tmp_path: Path) -> None:
    manifest = str(dspark(None, tmp_path))
    assert specinfer("validate", "--engine-version", "vllm-ascend=0.25.1rc1", manifest).returncode == 0
    older = specinfer("validate", "--engine-version", "vllm-ascend=0.24.0.post1", manifest)
    assert older.returncode == 1
    assert "the default runtime image runs vllm-ascend 0.24.0.post1" in older.stdout
    assert specinfer("validate", "--engine-version", "vllm-ascend=0.25.0.post1", manifest).returncode == 0
    refused(
        specinfer("validate", "--engine-version", "vllm-ascend=0.25.0-1", manifest),
        "like 0.23.0, 0.25.1rc1 or 0.23.0.post1",
    )


def test_a_policy_file_replaces_the_default_install(tmp_path: Path) -> None:
    """A cluster whose policy states no releases (the chart installed with runtimeEngineVersions=null)."""
    policy = tmp_path / "policy.yaml"
    document = {"apiVersion": "specinfer.io/v1alpha1", "kind": POLICY_KIND, "metadata": {"name": "p"}, "spec": {}}
    policy.write_text(yaml.safe_dump(document))
    assert specinfer("validate", "--policy", str(policy), str(dspark(None, tmp_path))).returncode == 0
    document["spec"] = {"defaultEngineVersions": {"vllmAscend": "0.25.0.post1"}}
    policy.write_text(yaml.safe_dump(document))
    assert specinfer("validate", "--policy", str(policy), str(dspark(None, tmp_path))).returncode == 0
