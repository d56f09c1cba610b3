"""The Helm charts on the real control plane: lint, render, server-side schema validation, package, install
(specinfer-crds taking over the CRDs, then specinfer-operator), and the operator running under the chart's
ServiceAccount (a TokenRequest token) to prove the RBAC is enough and no more; and the READMEs helm-docs writes."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, pods, wait_until
from specinfer_operator.api.crd import crd_yaml
from specinfer_operator.render import children
from tests.e2e.conftest import ROOT, Operator
from tests.e2e.test_canary import deployments
from tests.e2e.test_groups import group
from tests.e2e.test_inference_pool import install, pool_of, pooled, with_pool
from tests.e2e.test_operator import apply, condition, resource, spec, wait_ready, wait_resource
from tests.support.builders import cr
from tests.unit.test_scrape_limits import LIMITS

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
    assert container["image"] == "mirror.example.com/specinfer/specinfer-operator:0.1.0"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SPECINFER_RUNTIME_IMAGE"] == "mirror.example.com/specinfer/specinfer-runtime:0.1.0"


def operator_env(cluster: Cluster, namespace: str, values: list[str]) -> tuple[str, dict[str, str]]:
    """The operator container's image and environment, as the chart renders them with `values`."""
    (deployment,) = [o for o in render(cluster, namespace, values) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["image"], {e["name"]: e.get("value") for e in container["env"]}


def test_images_are_references_built_from_their_parts(cluster: Cluster, namespace: str) -> None:
    image, env = operator_env(cluster, namespace, [])
    assert image == "ghcr.io/specinfer/specinfer-operator:0.1.0"
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
    for other in ("team-a", "team-b"):
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


def test_the_operator_pod_is_locked_down(cluster: Cluster, namespace: str) -> None:
    (deployment,) = [o for o in render(cluster, namespace, []) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"livenessProbe", "readinessProbe", "resources"} <= container.keys()
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["SPECINFER_LEADER_ELECTION"], deployment["spec"]["replicas"]) == ("true", 2)


def test_network_policies_match_the_pods_they_are_for(cluster: Cluster, namespace: str) -> None:
    """The policies name the engine pods by labels and port the operator gives them; a rename there must show here."""
    objects = render(cluster, namespace, VARIANTS["networkpolicy-and-dashboard"])
    (operator,) = [o for o in objects if o["kind"] == "Deployment"]
    operator_labels = operator["spec"]["template"]["metadata"]["labels"]
    engine = children.engines(cr(spec(replicas=1)), children.RenderDefaults())["spec"]["template"]
    engine_labels = engine["metadata"]["labels"]
    (engine_port,) = [p["containerPort"] for p in engine["spec"]["containers"][0]["ports"] if p["name"] == "http"]
    policies = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"] for o in objects if o["kind"] == "NetworkPolicy"
    }

    egress = policies[(namespace, FULLNAME)]
    assert egress["podSelector"]["matchLabels"].items() <= operator_labels.items()
    (to_engines,) = [rule for rule in egress["egress"] if rule.get("to") and "podSelector" in rule["to"][0]]
    assert to_engines["to"][0]["podSelector"]["matchLabels"].items() <= engine_labels.items()
    assert to_engines["ports"] == [{"protocol": "TCP", "port": engine_port}]

    for watched in ("team-a", "team-b"):
        ingress = policies[(watched, f"{FULLNAME}-engine-metrics")]
        assert ingress["podSelector"]["matchLabels"].items() <= engine_labels.items()
        (rule,) = ingress["ingress"]
        (peer,) = rule["from"]
        assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
        assert peer["podSelector"]["matchLabels"].items() <= operator_labels.items()
        assert rule["ports"] == [{"protocol": "TCP", "port": engine_port}]


def test_no_rule_grants_secrets_or_wildcards(cluster: Cluster, namespace: str) -> None:
    for values in VARIANTS.values():
        for obj in render(cluster, namespace, values):
            for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
                assert "secrets" not in rule["resources"], obj["metadata"]["name"]
                assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"], rule


def test_leaderworkerset_rbac_only_when_enabled(cluster: Cluster, namespace: str) -> None:
    """Exactly the verbs engines over several nodes need, and none without leaderWorkerSet.enabled."""

    def grants(values: list[str]) -> set[tuple[str, str, tuple[str, ...]]]:
        return {
            (obj["kind"], resource, tuple(rule["verbs"]))
            for obj in render(cluster, namespace, values)
            if obj["kind"] in ("Role", "ClusterRole")
            for rule in obj.get("rules", [])
            for resource in rule["resources"]
            if resource in ("leaderworkersets", "controllerrevisions", "statefulsets")
        }

    def flag(values: list[str]) -> str:
        (operator,) = [o for o in render(cluster, namespace, values) if o["kind"] == "Deployment"]
        env = {e["name"]: e.get("value") for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
        return str(env["SPECINFER_LEADER_WORKER_SET"])

    assert grants([]) == set()
    assert flag([]) == "false"
    enabled = ["--set", "leaderWorkerSet.enabled=true"]
    assert grants(enabled) == {
        ("ClusterRole", "leaderworkersets", ("get", "create", "patch", "delete")),
        ("ClusterRole", "controllerrevisions", ("list",)),
        ("ClusterRole", "statefulsets", ("get",)),
    }
    assert flag(enabled) == "true"


def test_inferencepool_rbac_wherever_the_operator_reconciles(cluster: Cluster, namespace: str) -> None:
    """spec.inferencePool's verbs, cluster-wide or in each watched namespace; nothing on its other kinds."""

    def grants(values: list[str]) -> set[tuple[str, str, str, tuple[str, ...]]]:
        return {
            (obj["kind"], obj["metadata"].get("namespace", ""), resource, tuple(rule["verbs"]))
            for obj in render(cluster, namespace, values)
            if obj["kind"] in ("Role", "ClusterRole")
            for rule in obj.get("rules", [])
            if "inference.networking.k8s.io" in rule["apiGroups"]
            for resource in rule["resources"]
        }

    verbs = ("get", "create", "patch", "delete")
    assert grants([]) == {("ClusterRole", "", "inferencepools", verbs)}
    watched = grants(["--set", "watchNamespaces={team-a,team-b}"])
    assert watched == {("Role", team, "inferencepools", verbs) for team in ("team-a", "team-b")}


def token_kubeconfig(cluster: Cluster, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount, with a token from the TokenRequest API."""
    token = cluster.kubectl("create", "token", service_account, "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == current["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": server["cluster"]}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "cluster", "user": service_account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def forbidden(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode != 0 and "forbidden" in result.stderr.lower()


@pytest.mark.usefixtures("no_shared_operator")
def test_helm_install_and_the_operator_with_the_charts_identity(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    system = f"specinfer-{uuid.uuid4().hex[:6]}"
    install(cluster)
    take_over_the_crds(cluster, system)
    helm(
        cluster,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        system,
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--set",
        "image.registry=registry.example.com,image.repository=specinfer-operator",
        "--set",
        "leaderWorkerSet.enabled=true",
        "--wait",
        "--timeout=2m",
    )
    try:
        deployment = cluster.get("deployment", "-n", system, FULLNAME)
        assert deployment["status"].get("readyReplicas") == 2  # kwok runs the pods on the simulated nodes
        assert "helm upgrade" in helm(cluster, "status", RELEASE, "-n", system).stdout  # NOTES rendered

        kubeconfig = token_kubeconfig(cluster, system, FULLNAME, tmp_path / "operator.kubeconfig")
        identity = dataclasses.replace(cluster, kubeconfig=str(kubeconfig))  # kubectl as the chart's ServiceAccount
        assert identity.kubectl("auth", "whoami", "-o", "json", check=False).returncode == 0
        flags = ["--namespace", namespace, "--leader-election", "--leader-election-namespace", system]
        process = Operator(str(kubeconfig), tmp_path, *flags, "--leader-election-id", FULLNAME)
        process.start()
        try:
            # Everything the operator does for a resource, under the chart's RBAC: create, roll out, prune.
            apply(cluster, namespace, "rbac", with_pool(spec(k=3, replicas=1)))
            obj = wait_ready(cluster, namespace, "rbac")
            assert obj["status"]["ready"] == "1/1"
            wait_resource(cluster, namespace, "rbac", "InferencePool=True", pooled)
            first_config = f"rbac-engine-{obj['status']['configHash']}"
            assert cluster.kubectl("get", "configmap", "-n", namespace, first_config).returncode == 0
            for k in range(4, 9):  # past the Deployment's revisionHistoryLimit of 3
                apply(cluster, namespace, "rbac", spec(k=k, replicas=1))
                obj = wait_ready(cluster, namespace, "rbac")
            assert obj["status"]["speculation"]["numSpeculativeTokens"] == 8
            assert pool_of(cluster, namespace, "rbac") is None, "the pool the spec dropped is deleted"
            wait_until(
                "the first engine ConfigMap to be pruned",
                lambda: cluster.kubectl("get", "configmap", "-n", namespace, first_config, check=False).returncode,
            )
            events = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=rbac")
            assert "RolloutComplete" in events.stdout
            assert pods(cluster, namespace, "rbac")
            # A canary: its Deployment created beside the stable one, promoted by hand, then deleted.
            canary = {**spec(k=3, replicas=1), "rollout": {"strategy": "Canary", "maxSurge": 1}}
            apply(cluster, namespace, "rbac", canary)
            wait_until("the canary Deployment", lambda: "rbac-canary" in deployments(cluster, namespace))
            cluster.kubectl("annotate", "specinference", "-n", namespace, "rbac", "specinfer.io/canary=promote")
            wait_until("the canary Deployment to go", lambda: list(deployments(cluster, namespace)) == ["rbac"])
            assert wait_ready(cluster, namespace, "rbac")["status"]["speculation"]["numSpeculativeTokens"] == 3
            # An engine over two nodes, under the same identity: a group, a new configuration rolling it.
            cluster.kubectl("delete", "specinference", "-n", namespace, "rbac", "--wait=false")
            for k in (3, 4):
                apply(cluster, namespace, "big", group(k=k))
                assert wait_ready(cluster, namespace, "big")["status"]["ready"] == "1/1"
        finally:
            process.stop()
        log = "".join(p.read_text(errors="replace") for p in tmp_path.glob("operator-*.log"))
        assert "forbidden" not in log.lower(), log[-4000:]

        # What it must not do.
        refused = {
            "read Secrets in its namespace": ("get", "secrets", "-n", namespace),
            "read Secrets anywhere": ("get", "secrets", "-A"),
            "touch Deployments elsewhere": ("get", "deployments", "-n", "default"),
            "touch SpeculativeInferences elsewhere": ("get", "specinference", "-n", "default"),
            "read Pods elsewhere": ("get", "pods", "-n", "kube-system"),
        }
        for what, args in refused.items():
            assert forbidden(identity.kubectl(*args, check=False)), f"could {what}"
        for verb, target, where in (
            ("delete", "pods", namespace),
            ("create", "secrets", namespace),
            ("delete", "deployments", "default"),  # in its own namespaces it deletes its canaries
        ):
            answer = identity.kubectl("auth", "can-i", verb, target, "-n", where, check=False)
            assert answer.stdout.strip() == "no", f"may {verb} {target} in {where}"
        elsewhere = {**MANIFEST, "metadata": {"name": "elsewhere"}, "spec": spec(replicas=1)}
        assert forbidden(
            identity.kubectl("apply", "-n", "default", "-f", "-", stdin=yaml.safe_dump(elsewhere), check=False)
        )
    finally:
        helm(cluster, "uninstall", RELEASE, "-n", system, "--wait", check=False)
        crds_gone = helm(cluster, "uninstall", "specinfer-crds", "-n", system, "--wait", check=False)
        cluster.kubectl("delete", "namespace", system, "--wait=false", check=False)
    assert "kept due to the resource policy" in crds_gone.stdout + crds_gone.stderr
    for document in yaml.safe_load_all(crd_yaml()):
        kind, name = document["kind"].lower(), document["metadata"]["name"]
        assert cluster.kubectl("get", kind, name, check=False).returncode == 0, f"{kind} {name} kept"
    assert resource(cluster, namespace, "big")["metadata"]["name"] == "big", "uninstall must keep the resources"
    assert condition(resource(cluster, namespace, "big"), "Ready")["status"] == "True"


def take_over_the_crds(cluster: Cluster, system: str) -> None:
    """The upgrade from a chart whose crds/ held the CRDs: they exist (the suite applies crds/ with kubectl), owned
    by no release, and older than the chart (a validation of the tenant policy missing here). The specinfer-crds
    release takes them over, as its README says, and brings them to its own version, as every upgrade will."""
    tenant = "validatingadmissionpolicy/speculativeinferences.specinfer.io-tenant"
    generated = cluster.get(tenant)["spec"]["validations"]
    cluster.kubectl("patch", tenant, "--type=json", "-p", '[{"op": "remove", "path": "/spec/validations/0"}]')
    assert len(cluster.get(tenant)["spec"]["validations"]) == len(generated) - 1
    install_crds = ["install", "specinfer-crds", str(CRDS_CHART), "-n", system, "--create-namespace"]
    refused = helm(cluster, *install_crds, check=False)
    assert "exists and cannot be imported into the current release" in refused.stderr, "owned by no release"
    helm(cluster, *install_crds, "--take-ownership")
    live = cluster.get(tenant)
    assert live["spec"]["validations"] == generated, "the release's version, not the one it found"
    assert live["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert live["metadata"]["annotations"]["meta.helm.sh/release-namespace"] == system


def test_the_podmonitor_and_the_plain_scrape_job_label_engine_targets_alike(cluster: Cluster, namespace: str) -> None:
    """scrape/engines.yaml is the PodMonitor for Prometheus without the prometheus-operator: the same pods, the
    same target labels (tests/e2e/test_prometheus.py runs the job on a real Prometheus)."""
    objects = render(cluster, namespace, VARIANTS["namespaced-with-monitors"])
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    job = yaml.safe_load((CHART / "scrape" / "engines.yaml").read_text())
    selected, port, *relabelled = job["relabel_configs"]
    assert selected["regex"] == ";".join(monitor["spec"]["selector"]["matchLabels"].values())
    assert (port["regex"], endpoint["port"]) == ("http", "http")
    fields = {"sourceLabels": "source_labels", "targetLabel": "target_label", "regex": "regex", "action": "action"}
    snake = [{fields.get(k, k): v for k, v in rule.items()} for rule in endpoint["relabelings"]]
    own = [r for r in relabelled if r.get("target_label") not in ("namespace", "pod")]  # the PodMonitor adds these
    assert own == snake
    limits = {camel: job[snake] for camel, snake in LIMITS.items()}
    assert {camel: monitor["spec"][camel] for camel in LIMITS} == limits, "scrape/engines.yaml: the chart's limits"
    assert monitor["spec"]["targetLimit"] == 500


def test_the_podmonitor_limits_are_the_values_and_the_schema_bounds_them(cluster: Cluster, namespace: str) -> None:
    def monitor(*values: str) -> dict[str, Any]:
        rendered = render(cluster, namespace, ["--set", "engineMetrics.podMonitor.enabled=true", *values])
        (found,) = [o for o in rendered if o["kind"] == "PodMonitor"]
        spec: dict[str, Any] = found["spec"]
        return spec

    assert "targetLimit" not in monitor(), "0, the default, is no limit"
    # --set-json reads numbers as a values file does: floats, which would render as 2.5e+06 unconverted.
    wanted = {"sampleLimit": 2_500_000, "labelLimit": 40, "bodySizeLimit": "4MiB", "targetLimit": 200}
    spec = monitor("--set-json", f"engineMetrics.podMonitor={json.dumps(wanted)}")
    assert {k: spec[k] for k in wanted} == wanted
    for value, words in (
        ("sampleLimit=0", "'/engineMetrics/podMonitor/sampleLimit': minimum: got 0, want 1"),
        ("bodySizeLimit=lots", "'/engineMetrics/podMonitor/bodySizeLimit': 'lots' does not match"),
        ("samplelimit=100", "'/engineMetrics/podMonitor': additional properties 'samplelimit' not allowed"),
    ):
        refused = helm(
            cluster, "template", RELEASE, str(CHART), "--set", f"engineMetrics.podMonitor.{value}", check=False
        )
        assert refused.returncode != 0, value
        assert words in refused.stderr, (value, refused.stderr)
