"""`specinfer validate` on the Helm values Argo CD Applications and Flux HelmReleases give the specinfer charts:
merged onto the chart's defaults and checked against its values.schema.json (the copies the package ships), each
problem naming the file, the object, the field of the object and the fix. Files given alone, so no build tool is
needed; tests/unit/operator/cli/test_gitops_repository.py runs it on gitops/ as kustomize builds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from specinfer_operator.cli.helm_values import chart_file
from tests.support.cli import refused, specinfer
from tests.unit.operator.cli.test_commands import run

OLD_IMAGE = {"repository": "ghcr.io/specinfer/specinfer-operator", "tag": "0.1.0"}  # the form chart 0.1.0 took


def application(values: Any, chart: str = "specinfer-operator", key: str = "valuesObject") -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": chart, "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {
                "repoURL": "ghcr.io/specinfer/charts",
                "chart": chart,
                "targetRevision": "0.2.0",
                "helm": {key: values},
            },
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "specinfer-system"},
        },
    }


def helm_release(values: Any, source: str = "operator-chart") -> dict[str, Any]:
    return {
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "specinfer-operator", "namespace": "flux-system"},
        "spec": {"interval": "30m", "chartRef": {"kind": "OCIRepository", "name": source}, "values": values},
    }


OCI_REPOSITORY = {
    "apiVersion": "source.toolkit.fluxcd.io/v1",
    "kind": "OCIRepository",
    "metadata": {"name": "operator-chart", "namespace": "flux-system"},
    "spec": {"interval": "1h", "url": "oci://registry.example:5000/charts/specinfer-operator", "ref": {"tag": "0.2.0"}},
}


def write(path: Path, *objects: Any) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_the_image_as_chart_0_1_0_took_it_is_refused_with_the_field_and_the_fix(tmp_path: Path) -> None:
    file = write(tmp_path / "operator.yaml", application({"image": OLD_IMAGE}))
    code, out, err = run("validate", file)
    assert code == 1, err
    (line,) = out.splitlines()
    assert line.startswith(f"{file}: spec.source.helm.valuesObject.image.repository: 'ghcr.io/specinfer/"), line
    version = chart_file("specinfer-operator")["version"]
    assert f"(specinfer-operator {version} value image.repository; Repository path in the registry" in line
    assert "set it as registry" in line
    assert err.splitlines()[-1] == "no SpeculativeInference found; 1 chart values checked: 0 valid, 1 invalid"


def test_registry_and_repository_apart_pass_and_partial_values_are_merged_onto_the_defaults(tmp_path: Path) -> None:
    """Only the registry given: the repository, which the schema requires, comes from the chart's defaults, as
    Helm merges them. A null deletes the default, as in Helm, and then it is missing."""
    mirror = write(tmp_path / "mirror.yaml", application({"image": {"registry": "mirror.example:5000"}}))
    assert run("validate", mirror)[0] == 0
    dropped = write(tmp_path / "dropped.yaml", application({"image": {"repository": None}}))
    code, out, _ = run("validate", dropped)
    assert code == 1
    assert out.startswith(f"{dropped}: spec.source.helm.valuesObject.image: 'repository' is a required property")


def test_a_misspelt_key_names_the_keys_allowed(tmp_path: Path) -> None:
    file = write(tmp_path / "crds.yaml", application({"crds": {"kep": False}}, chart="specinfer-crds"))
    code, out, _ = run("validate", file)
    assert code == 1
    assert out.startswith(f"{file}: spec.source.helm.valuesObject.crds: Additional properties are not allowed")
    assert out.rstrip().endswith("; allowed: keep)")


def test_values_as_yaml_text_and_values_object_are_merged_as_argo_cd_merges_them(tmp_path: Path) -> None:
    app = application({"replicaCount": 1})
    app["spec"]["source"]["helm"]["values"] = "logLevel: loud\nreplicaCount: many\n"
    code, out, _ = run("validate", write(tmp_path / "app.yaml", app))
    assert code == 1
    (line,) = out.splitlines()  # replicaCount: many is replaced by valuesObject's 1
    assert ": spec.source.helm.values.logLevel: 'loud' is not one of" in line
    assert "allowed: " in line


def test_a_helm_release_is_checked_through_the_oci_repository_it_names(tmp_path: Path) -> None:
    release = write(tmp_path / "release.yaml", helm_release({"image": OLD_IMAGE}))
    alone = run("validate", "-v", release)
    assert alone[0] == 0
    assert (
        "values not checked: its chartRef names the OCIRepository operator-chart, not among the paths given"
        in (alone[2])
    )
    write(tmp_path / "source.yaml", OCI_REPOSITORY)
    code, out, _ = run("validate", str(tmp_path))
    assert code == 1
    assert out.startswith(f"{release}: spec.values.image.repository: ")
    write(tmp_path / "source.yaml", {**OCI_REPOSITORY, "spec": {"url": "oci://example/charts/redis"}})
    code, out, err = run("validate", "-v", str(tmp_path))
    assert (code, out) == (0, ""), err
    assert f"{release}: skipped: kind HelmRelease of helm.toolkit.fluxcd.io/v2, installing no specinfer chart" in err


def test_json_output_lists_each_install_checked(tmp_path: Path) -> None:
    file = write(tmp_path / "operator.yaml", application({"image": OLD_IMAGE}))
    code, out, _ = run("validate", "-o", "json", file)
    assert code == 1
    (entry,) = json.loads(out)
    assert {k: entry[k] for k in ("file", "kind", "name", "chart", "valid")} == {
        "file": file,
        "kind": "Application",
        "name": "specinfer-operator",
        "chart": "specinfer-operator",
        "valid": False,
    }
    assert entry["errors"][0]["path"] == "spec.source.helm.valuesObject.image.repository"


def test_hostile_values_text_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(6)
    )
    file = write(tmp_path / "bomb.yaml", application(bomb, key="values"))
    refused(specinfer("validate", file), "spec.source.helm.values: ")
