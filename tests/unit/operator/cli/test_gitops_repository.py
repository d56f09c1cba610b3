"""gitops/, the repository layout the docs describe: every kustomization in it builds and passes `specinfer
validate`, the Argo CD and Flux objects point at directories that exist, and the answer to the autoscaler owning
the count names the field the CRD's scale subresource writes (the API server checks the rest: tests/e2e)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import specinfer

ROOT = Path(__file__).resolve().parents[4]
GITOPS = ROOT / "gitops"
pytestmark = pytest.mark.usefixtures("build_tools")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_every_kustomization_builds_and_every_resource_is_valid() -> None:
    result = specinfer("validate", "gitops/", cwd=ROOT)
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    summary = result.stderr.splitlines()[-1]
    # the base and both overlays; the Argo CD and Flux objects are other kinds
    assert summary.startswith("3 SpeculativeInference checked: 3 valid, 0 invalid;"), result.stderr
    assert f"$ specinfer validate gitops/\n{summary}\n" in (ROOT / "docs" / "gitops.md").read_text()


def test_each_environment_is_the_same_overlay_for_argo_cd_and_flux() -> None:
    argo = {
        a["metadata"]["name"]: a["spec"]["source"]["path"] for a in documents(GITOPS / "argocd/llm-production.yaml")
    }
    argo |= {a["metadata"]["name"]: a["spec"]["source"]["path"] for a in documents(GITOPS / "argocd/llm-staging.yaml")}
    flux = {
        k["metadata"]["name"]: k["spec"]["path"].removeprefix("./")
        for k in documents(GITOPS / "flux/kustomizations.yaml")
    }
    assert argo == {name: path for name, path in flux.items() if name.startswith("llm-")}
    assert argo == {f"llm-{env}": f"gitops/resources/overlays/{env}" for env in ("staging", "production")}
    assert (ROOT / flux["specinfer-operator"] / "kustomization.yaml").is_file()
    (operator,) = documents(GITOPS / "argocd/operator.yaml")
    (release,) = documents(GITOPS / "flux/operator/helmrelease.yaml")
    assert operator["spec"]["source"]["path"] == release["spec"]["chart"]["spec"]["chart"].removeprefix("./")
    assert (ROOT / operator["spec"]["source"]["path"] / "Chart.yaml").is_file()


def test_the_autoscaler_answer_names_the_field_the_scale_subresource_writes() -> None:
    (crd,) = [
        c
        for c in documents(ROOT / "crds" / "speculativeinference.yaml")
        if c.get("kind") == "CustomResourceDefinition" and c["spec"]["names"]["kind"] == "SpeculativeInference"
    ]
    (version,) = crd["spec"]["versions"]
    pointer = version["subresources"]["scale"]["specReplicasPath"].replace(".", "/")  # .spec.replicas
    (production,) = documents(GITOPS / "argocd/llm-production.yaml")
    (ignored,) = production["spec"]["ignoreDifferences"]
    assert ignored == {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "jsonPointers": [pointer]}
    assert "RespectIgnoreDifferences=true" in production["spec"]["syncPolicy"]["syncOptions"]
    assert yaml.safe_load(
        (GITOPS / "resources/overlays/production/replicas-owned-by-the-autoscaler.yaml").read_text()
    ) == [{"op": "remove", "path": pointer}]
    (patch,) = documents(GITOPS / "resources/overlays/production/speculativeinference.yaml")
    assert patch["spec"]["autoscaling"]["minReplicas"] <= patch["spec"]["autoscaling"]["maxReplicas"]
