"""The Helm charts as artefacts on the real control plane: lint, values and their schema, rendering,
server-side schema validation, the CRD chart, the package a release publishes and the READMEs helm-docs writes.
What the rendered chart grants and installs is in test_chart_install.py."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, wait_until
from specinfer_operator.api.crd import crd_yaml
from specinfer_operator.render import children
from tests.e2e.conftest import ROOT

CHART = ROOT / "charts" / "specinfer-operator"
CRDS_CHART = ROOT / "charts" / "specinfer-crds"
RELEASE = "specinfer-operator"
FULLNAME = RELEASE  # a release named like the chart keeps that name for its objects
MANIFEST = {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference"}

# Values sets the chart is rendered with; each must lint and pass the API server's validation.
VARIANTS: dict[str, list[str]] = {
    "defaults": [],
    "namespaced-with-monitors": [
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=prometheus",
        "--set",
        "engineMetrics.podMonitor.enabled=true",
        "--set",
        "engineMetrics.podMonitor.targetLimit=500",
        "--set",
        "prometheusRule.enabled=true",
    ],
    "single-replica-minimal": [
        "--set",
        "replicaCount=1",
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "metrics.enabled=false",
        "--set",
        "logFormat=text",
    ],
    "networkpolicy-and-dashboard": [
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.engineIngress.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "grafanaDashboard.annotations.grafana_folder=specinfer",
        "--set",
        "telemetry.scrapeInterval=15s",
    ],
    # Every option at once: images by digest under a global registry, durations, alerts left out, a stricter
    # tenant policy, the pods' scheduling.
    "options": ["--values", str(CHART / "ci" / "options-values.yaml")],
}


def helm(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    path = shutil.which("helm", path=str(Path(cluster.kubectl_path).parent)) or shutil.which("helm")
    if path is None:
        raise RuntimeError("helm not found next to kubectl or on PATH (hack/build-binaries.sh helm builds it)")
    result = subprocess.run(
        [path, "--kubeconfig", cluster.kubeconfig, *args], capture_output=True, text=True, timeout=300, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr}")
    return result


def render(cluster: Cluster, namespace: str, values: list[str]) -> list[dict[str, Any]]:
    out = helm(cluster, "template", RELEASE, str(CHART), "--namespace", namespace, *values).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_chart_lints(cluster: Cluster, variant: str) -> None:
    result = helm(cluster, "lint", "--strict", str(CHART), *VARIANTS[variant])
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", [[], ["--set", "crds.keep=false"]])
def test_crds_chart_lints(cluster: Cluster, values: list[str]) -> None:
    assert "0 chart(s) failed" in helm(cluster, "lint", "--strict", str(CRDS_CHART), *values).stdout


def test_values_are_checked_by_the_schema(cluster: Cluster) -> None:
    typo = helm(cluster, "template", RELEASE, str(CHART), "--set", "metrics.prot=9090", check=False)
    assert typo.returncode != 0
    assert "additional properties 'prot' not allowed" in typo.stderr
    bad_level = helm(cluster, "template", RELEASE, str(CHART), "--set", "logLevel=verbose", check=False)
    assert bad_level.returncode != 0
    assert "logLevel" in bad_level.stderr
    unsafe = helm(
        cluster, "template", RELEASE, str(CHART), "--set", "replicaCount=2,leaderElection.enabled=false", check=False
    )
    assert unsafe.returncode != 0
    assert "replicaCount above 1 needs leaderElection.enabled=true" in unsafe.stderr
    for value, words in (
        # tenantPolicy.spec has the policy model's schema: a misspelt field fails here, not pruned later.
        ("tenantPolicy.spec.allowedHostPath[0].pathPrefix=/data", "additional properties 'allowedHostPath'"),
        ("tenantPolicy.spec.allowedVolumeTypes={gitRepo}", "'/tenantPolicy/spec/allowedVolumeTypes/0'"),
        ("runtimeImage=registry.example.com/specinfer-runtime:0.1.0", "'/runtimeImage': got string, want object"),
        ("image.repository=registry.example.com/specinfer-operator", "'/image/repository'"),
        ("runtimeImage.digest=latest", "'/runtimeImage/digest'"),
        ("telemetry.scrapeTimeout=2", "'/telemetry/scrapeTimeout': got number, want string"),
        ("telemetry.scrapeTimeout=0s", 'telemetry.scrapeTimeout is "0s": the operator needs a duration above 0'),
        ("prometheusRule.disabled.SpecinferLowAcceptence=true", "additional properties 'SpecinferLowAcceptence'"),
    ):
        refused = helm(cluster, "template", RELEASE, str(CHART), "--set", value, check=False)
        assert refused.returncode != 0, value
        assert words in refused.stderr, (value, refused.stderr)


def test_the_chart_can_be_a_dependency(cluster: Cluster, tmp_path: Path) -> None:
    """A parent chart passes `global` to every subchart: the schema takes it (global.imageRegistry is read)."""
    parent = tmp_path / "platform"
    parent.mkdir()
    dependency = {"name": "specinfer-operator", "version": ">=0.0.0-0", "repository": f"file://{CHART}"}
    chart = {"apiVersion": "v2", "name": "platform", "version": "1.0.0", "dependencies": [dependency]}
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    (parent / "values.yaml").write_text(yaml.safe_dump({"global": {"imageRegistry": "mirror.example.com"}}))
    helm(cluster, "dependency", "build", str(parent))
    out = helm(cluster, "template", "platform", str(parent), "--set", "global.storageClass=fast").stdout
    (deployment,) = [o for o in yaml.safe_load_all(out) if o and o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "mirror.example.com/specinfer/specinfer-operator:0.2.0"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SPECINFER_RUNTIME_IMAGE"] == "mirror.example.com/specinfer/specinfer-runtime:0.2.0"


def operator_env(cluster: Cluster, namespace: str, values: list[str]) -> tuple[str, dict[str, str]]:
    """The operator container's image and environment, as the chart renders them with `values`."""
    (deployment,) = [o for o in render(cluster, namespace, values) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["image"], {e["name"]: e.get("value") for e in container["env"]}


def test_images_are_references_built_from_their_parts(cluster: Cluster, namespace: str) -> None:
    image, env = operator_env(cluster, namespace, [])
    assert image == "ghcr.io/specinfer/specinfer-operator:0.2.0"
    assert env["SPECINFER_RUNTIME_IMAGE"] == children.DEFAULT_RUNTIME_IMAGE, "the operator's own default"
    digest = "sha256:" + "0" * 64
    image, env = operator_env(
        cluster,
        namespace,
        ["--set", f"image.digest={digest},runtimeImage.registry=,runtimeImage.repository=me/rt,runtimeImage.tag=v2"],
    )
    assert image == f"ghcr.io/specinfer/specinfer-operator@{digest}", "a digest pins the image, the tag is ignored"
    assert env["SPECINFER_RUNTIME_IMAGE"] == "me/rt:v2", "no registry: the repository as it is"


def test_durations_reach_the_operator_in_seconds(cluster: Cluster, namespace: str) -> None:
    _, env = operator_env(cluster, namespace, [])
    assert (env["SPECINFER_SCRAPE_INTERVAL"], env["SPECINFER_SCRAPE_TIMEOUT"], env["SPECINFER_STATUS_REFRESH"]) == (
        "30",
        "2",
        "300",
    )
    durations = "telemetry.scrapeInterval=0s,telemetry.scrapeTimeout=1500ms,telemetry.statusRefresh=1h2m3s"
    _, env = operator_env(cluster, namespace, ["--set", durations])
    assert (env["SPECINFER_SCRAPE_INTERVAL"], env["SPECINFER_SCRAPE_TIMEOUT"], env["SPECINFER_STATUS_REFRESH"]) == (
        "0",
        "1.5",
        "3723",
    )


def test_the_alerts_have_runbooks_and_switches(cluster: Cluster, namespace: str) -> None:
    rules = yaml.safe_load((CHART / "rules" / "specinfer-alerts.yaml").read_text())

    def alerts(*values: str) -> dict[str, dict[str, Any]]:
        objects = render(cluster, namespace, ["--set", "prometheusRule.enabled=true", *values])
        found = [o for o in objects if o["kind"] == "PrometheusRule"]
        return {r["alert"]: r for o in found for g in o["spec"]["groups"] for r in g["rules"]}

    assert alerts() == {r["alert"]: r for g in rules["groups"] for r in g["rules"]}, "the rule file, as it is"
    off = alerts("--set", "prometheusRule.disabled.SpecinferLowAcceptance=true")
    assert "SpecinferLowAcceptance" not in off
    assert len(off) == len(alerts()) - 1
    moved = alerts("--set", "prometheusRule.runbookUrl=https://wiki.example.com/runbooks")
    assert (
        moved["SpecinferDegraded"]["annotations"]["runbook_url"]
        == "https://wiki.example.com/runbooks#specinferdegraded"
    )
    everything = ",".join(f"prometheusRule.disabled.{name}=true" for name in alerts())
    assert alerts("--set", everything) == {}, "no rule left: no PrometheusRule"


def crds_chart(cluster: Cluster, *values: str) -> list[dict[str, Any]]:
    out = helm(cluster, "template", "specinfer-crds", str(CRDS_CHART), *values).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_the_crds_chart_is_the_generated_file_with_the_releases_metadata(cluster: Cluster) -> None:
    """Every object of crds/ (the CRDs and the admission policies), as generated, plus the release's labels and,
    with crds.keep, the annotation that keeps it through `helm uninstall`; and nothing else."""

    def by_name(documents: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(d["kind"], d["metadata"]["name"]): d for d in documents}

    generated = by_name([doc for doc in yaml.safe_load_all(crd_yaml()) if doc])
    for values, kept in (([], {"helm.sh/resource-policy": "keep"}), (["--set", "crds.keep=false"], None)):
        rendered = by_name(crds_chart(cluster, *values))  # helm orders them by kind
        assert rendered.keys() == generated.keys()
        for key, got in rendered.items():
            want = generated[key]
            metadata = got["metadata"]
            assert metadata.get("annotations") == kept, metadata["name"]
            assert metadata["labels"]["app.kubernetes.io/instance"] == "specinfer-crds"
            assert metadata["labels"].items() >= want["metadata"]["labels"].items()
            bare = {**got, "metadata": {**metadata, "labels": want["metadata"]["labels"]}}
            bare["metadata"].pop("annotations", None)
            assert bare == want, metadata["name"]


def test_rendered_manifests_pass_the_api_servers_validation(
    cluster: Cluster, namespace: str, gitops_tools: dict[str, Path]
) -> None:
    """`kubectl apply --dry-run=server --validate=strict`: the API server's own schemas, unknown fields refused."""
    cluster.kubectl("apply", "--server-side", "-f", str(gitops_tools["monitoring-crds"]))
    for kind in ("servicemonitors", "podmonitors", "prometheusrules"):
        # kubectl wait fails at once on a CRD whose status has no conditions yet: ask until it holds one.
        crd = f"crd/{kind}.monitoring.coreos.com"
        wait_until(
            f"{crd} Established",
            lambda crd=crd: cluster.kubectl("wait", "--for=condition=Established", crd, check=False).returncode == 0,
        )
    for other in ("team-a", "team-b", "monitoring"):  # options-values.yaml's watched and monitoring namespaces
        cluster.kubectl("create", "namespace", other, check=False)
    rendered = {variant: render(cluster, namespace, values) for variant, values in VARIANTS.items()}
    rendered["specinfer-crds"] = crds_chart(cluster)
    for variant, objects in rendered.items():
        kinds = sorted({o["kind"] for o in objects})
        if variant in ("namespaced-with-monitors", "options"):
            assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Role"} <= set(kinds)
        if variant in ("networkpolicy-and-dashboard", "options"):
            assert {"NetworkPolicy", "ConfigMap"} <= set(kinds)
        if variant == "specinfer-crds":
            assert {"CustomResourceDefinition", "ValidatingAdmissionPolicy"} <= set(kinds)
        result = cluster.kubectl(
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "--server-side",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(objects),
            check=False,
        )
        assert result.returncode == 0, f"{variant}: {result.stderr}"


def test_helm_package_makes_the_artefacts_a_release_publishes(cluster: Cluster, tmp_path: Path) -> None:
    for chart, name in ((CHART, "specinfer-operator"), (CRDS_CHART, "specinfer-crds")):
        version = yaml.safe_load((chart / "Chart.yaml").read_text())["version"]
        helm(cluster, "package", str(chart), "--destination", str(tmp_path))
        artefact = tmp_path / f"{name}-{version}.tgz"
        with tarfile.open(artefact) as tar:
            files = {member.name.removeprefix(f"{name}/") for member in tar.getmembers() if member.isfile()}
            packaged_values = tar.extractfile(f"{name}/values.yaml")
            assert packaged_values is not None
            assert packaged_values.read() == (chart / "values.yaml").read_bytes()
        assert {"Chart.yaml", "values.yaml", "values.schema.json", "README.md", ".helmignore"} <= files
        assert not {f for f in files if f.startswith("ci/") or f.endswith(".gotmpl")}, "build and test files stay out"
        assert "0 chart(s) failed" in helm(cluster, "lint", "--strict", str(artefact)).stdout
        if name == "specinfer-crds":
            assert {"templates/crds.yaml", "files/speculativeinference.yaml"} <= files
            assert not {f for f in files if f.startswith("crds/")}, "as templates, upgraded with the release"
        else:
            assert {"templates/deployment.yaml", "templates/tenant-policy.yaml", "rules/specinfer-alerts.yaml"} <= files
            assert {"scrape/engines.yaml", "dashboards/specinfer-acceptance.json"} <= files
            assert not {f for f in files if f.startswith("crds/")}, "the CRDs are specinfer-crds'"


def test_the_chart_readmes_are_what_helm_docs_writes(tmp_path: Path) -> None:
    """helm-docs (hack/versions.env's, built from its Go module) writes each README from values.yaml and
    README.md.gotmpl: on a copy of charts/, its output must be the committed file, every value described."""
    copy = tmp_path / "charts"
    shutil.copytree(ROOT / "charts", copy, ignore=shutil.ignore_patterns("README.md"))
    subprocess.run([str(ROOT / "hack" / "chart-readme"), str(copy)], check=True, timeout=600)
    for chart in (CHART, CRDS_CHART):
        written = (copy / chart.name / "README.md").read_text()
        assert (chart / "README.md").read_text() == written, f"{chart.name}/README.md is stale: run `make chart`"
        rows = [line for line in written.splitlines() if line.startswith("| ") and line.count(" | ") >= 3]
        keys = {row.split(" | ")[0].removeprefix("| ") for row in rows[1:]}
        assert keys, written
        undescribed = [row for row in rows if row.rstrip().endswith("|  |")]
        assert undescribed == [], "values without a `# --` comment in values.yaml"
