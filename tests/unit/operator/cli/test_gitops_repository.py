"""gitops/, the repository layout the docs describe: every kustomization in it builds and passes `specinfer
validate`, the Argo CD and Flux objects point at directories that exist, and the answer to the autoscaler owning
the count names the field the CRD's scale subresource writes (the API server checks the rest: tests/e2e)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import specinfer

ROOT = Path(__file__).resolve().parents[4]
GITOPS = ROOT / "gitops"
WAVE = "argocd.argoproj.io/sync-wave"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.usefixtures("build_tools")
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


# The chart repository of the releases: the release pushes charts/NAME at its Chart.yaml version to
# oci://ghcr.io/specinfer/charts/NAME (gitops/ names this placeholder; a copy of gitops/ names its own registry).
CHART_REPOSITORY = "ghcr.io/specinfer/charts"
CHARTS = ("specinfer-crds", "specinfer-operator")  # in the order they install


@dataclass(frozen=True)
class Install:
    """One chart install gitops/ declares (an Argo CD Application or a Flux HelmRelease), mapped onto the chart in
    this checkout: the OCI chart `NAME` at VERSION is charts/NAME, whose Chart.yaml version must be VERSION."""

    tool: str
    name: str
    obj: dict[str, Any]
    chart: Path
    version: str | None  # None for a chart read from a Git repository (the checkout's own)
    release: str
    namespace: str
    values: dict[str, Any]

    def __str__(self) -> str:
        return f"{self.obj['kind']}/{self.name}"


def tool_objects() -> list[dict[str, Any]]:
    return [d for tool in ("argocd", "flux") for p in sorted((GITOPS / tool).rglob("*.yaml")) for d in documents(p)]


def _oci_chart(url: str, version: str | None) -> tuple[Path, str | None]:
    """charts/NAME for the chart `oci://CHART_REPOSITORY/NAME` (or `CHART_REPOSITORY/NAME`)."""
    repository, _, name = url.removeprefix("oci://").rpartition("/")
    assert repository == CHART_REPOSITORY, url
    return ROOT / "charts" / name, version


def _application(app: dict[str, Any]) -> Iterator[Install]:
    spec = app["spec"]
    for source in [spec["source"]] if "source" in spec else spec.get("sources", []):
        if "chart" in source:
            chart, version = _oci_chart(f"{source['repoURL']}/{source['chart']}", source["targetRevision"])
        elif (ROOT / source.get("path", "") / "Chart.yaml").is_file():  # a chart in a Git repository
            chart, version = ROOT / source["path"], None
        else:
            continue
        helm = source.get("helm", {})
        values = helm.get("valuesObject", yaml.safe_load(helm.get("values", "")) or {})
        name = app["metadata"]["name"]
        release = helm.get("releaseName", name)
        yield Install("argocd", name, app, chart, version, release, spec["destination"]["namespace"], values)


def _helm_release(release: dict[str, Any], objects: list[dict[str, Any]]) -> Install:
    spec = release["spec"]
    assert "valuesFrom" not in spec, "values from ConfigMaps or Secrets cannot be checked here"
    if "chartRef" in spec:
        ref = spec["chartRef"]
        assert ref["kind"] == "OCIRepository", ref
        (source,) = [o for o in objects if o["kind"] == "OCIRepository" and o["metadata"]["name"] == ref["name"]]
        chart, version = _oci_chart(source["spec"]["url"], source["spec"]["ref"].get("tag"))
    else:
        template = spec["chart"]["spec"]
        chart, version = ROOT / template["chart"], None
    name = release["metadata"]["name"]
    namespace = spec.get("targetNamespace", release["metadata"]["namespace"])
    return Install(
        "flux", name, release, chart, version, spec.get("releaseName", name), namespace, spec.get("values", {})
    )


def installs() -> list[Install]:
    objects = tool_objects()
    found = [i for o in objects if o["kind"] == "Application" for i in _application(o)]
    return found + [_helm_release(o, objects) for o in objects if o["kind"] == "HelmRelease"]


@pytest.mark.parametrize("install", installs(), ids=str)
def test_every_chart_install_renders_with_its_values(
    install: Install, binaries: dict[str, Path], tmp_path: Path
) -> None:
    """What Argo CD's repo server and Flux's helm-controller run: helm template with the object's values, against
    the chart's values.schema.json, at the version the chart has in this checkout."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(install.values))
    command = [str(binaries["helm"]), "template", install.release, str(install.chart)]
    result = subprocess.run(
        [*command, "--namespace", install.namespace, "--values", str(values)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"{install}: {result.stderr}"
    assert [o for o in yaml.safe_load_all(result.stdout) if o], f"{install} renders nothing"
    chart = yaml.safe_load((install.chart / "Chart.yaml").read_text())
    assert install.version in (None, chart["version"]), f"{install}: {install.version} is not {chart['version']}"


def test_both_charts_install_from_the_registry_the_crds_first() -> None:
    found = installs()
    for tool in ("argocd", "flux"):
        charts = {i.chart.name: i for i in found if i.tool == tool}
        assert sorted(charts) == sorted(CHARTS), f"{tool} installs {sorted(charts)}"
        assert all(i.version for i in charts.values()), f"{tool}: every chart from {CHART_REPOSITORY}"
    waves = {
        i.chart.name: int(i.obj["metadata"].get("annotations", {}).get(WAVE, "0")) for i in found if i.tool == "argocd"
    }
    environments = [
        int(a["metadata"].get("annotations", {}).get(WAVE, "0"))
        for a in tool_objects()
        if a["kind"] == "Application" and a["metadata"]["name"].startswith("llm-")
    ]
    assert waves["specinfer-crds"] < waves["specinfer-operator"] < min(environments)
    flux = {i.chart.name: i.obj for i in found if i.tool == "flux"}
    depends = [d["name"] for d in flux["specinfer-operator"]["spec"].get("dependsOn", [])]
    assert flux["specinfer-crds"]["metadata"]["name"] in depends
