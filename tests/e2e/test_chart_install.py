"""What the operator chart grants and installs, on the real control plane: the operator pod's lockdown, its
NetworkPolicies, RBAC, the monitors of the engines, and an install (specinfer-crds taking over the CRDs, then
specinfer-operator) with the operator running under the chart's ServiceAccount (a TokenRequest token) to prove
the RBAC is enough and no more."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.kubeclient import Cluster, pods, wait_until
from specinfer_operator.api.crd import crd_yaml
from specinfer_operator.render import children
from tests.e2e.conftest import Operator
from tests.e2e.test_canary import deployments
from tests.e2e.test_chart import CHART, CRDS_CHART, FULLNAME, MANIFEST, RELEASE, VARIANTS, helm, render
from tests.e2e.test_groups import group
from tests.e2e.test_inference_pool import install, pool_of, pooled, with_pool
from tests.e2e.test_operator import apply, condition, resource, spec, wait_ready, wait_resource
from tests.support.builders import cr
from tests.unit.test_scrape_limits import LIMITS


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


def test_metrics_are_https_for_the_reader_and_reachable_from_monitoring_only(cluster: Cluster, namespace: str) -> None:
    """The ServiceMonitor presents Prometheus' token over HTTPS; the reader role is get on /metrics and no more,
    bound to the ServiceAccount named; the operator may review tokens; ingress admits monitoring to the metrics
    port and nobody else beyond the node's probes."""
    reader = [
        "--set",
        "metrics.reader.serviceAccount.name=prometheus",
        "--set",
        "metrics.reader.serviceAccount.namespace=mon",
    ]
    values = [*VARIANTS["namespaced-with-monitors"], *reader, "--set", "networkPolicy.enabled=true"]
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(cluster, namespace, values)}
    (endpoint,) = objects[("ServiceMonitor", FULLNAME)]["spec"]["endpoints"]
    assert (endpoint["scheme"], endpoint["port"], endpoint["tlsConfig"]) == (
        "https",
        "metrics",
        {"insecureSkipVerify": True},
    )
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert objects[("ClusterRole", f"{FULLNAME}-metrics-reader")]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    binding = objects[("ClusterRoleBinding", f"{FULLNAME}-metrics-reader")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "mon"}]
    assert grants(cluster, namespace, values, "tokenreviews", "subjectaccessreviews") == {
        ("ClusterRole", "tokenreviews", ("create",)),
        ("ClusterRole", "subjectaccessreviews", ("create",)),
    }
    env = {
        e["name"]: e.get("value")
        for e in objects[("Deployment", FULLNAME)]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert (env["SPECINFER_METRICS_BIND_ADDRESS"], env["SPECINFER_METRICS_SECURE"]) == (":8443", "true")
    policy = objects[("NetworkPolicy", FULLNAME)]["spec"]
    assert "Ingress" in policy["policyTypes"]
    # The health port: no rule, as a NetworkPolicy always lets the pod's node (its kubelet's probes) in.
    (metrics_rule,) = policy["ingress"]
    assert metrics_rule["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert metrics_rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    peers = [{"ipBlock": {"cidr": "10.0.0.0/8"}}]
    (wider,) = [
        o["spec"]
        for o in render(cluster, namespace, [*values, "--set-json", f"networkPolicy.healthFrom={json.dumps(peers)}"])
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == FULLNAME
    ]
    assert wider["ingress"][1] == {"ports": [{"protocol": "TCP", "port": 8081}], "from": peers}

    plain = {
        (o["kind"], o["metadata"]["name"]): o
        for o in render(cluster, namespace, [*values, "--set", "metrics.secure=false"])
    }
    assert ("Service", f"{FULLNAME}-metrics") not in plain
    assert ("ServiceMonitor", FULLNAME) not in plain
    assert ("ClusterRole", f"{FULLNAME}-metrics-reader") not in plain
    env = {
        e["name"]: e.get("value")
        for e in plain[("Deployment", FULLNAME)]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SPECINFER_METRICS_BIND_ADDRESS"] == "127.0.0.1:8443"
    (plain_policy,) = [
        o["spec"] for (kind, _), o in plain.items() if kind == "NetworkPolicy" and o["metadata"]["name"] == FULLNAME
    ]
    assert plain_policy["ingress"] == []


def test_no_rule_grants_secrets_or_wildcards(cluster: Cluster, namespace: str) -> None:
    for values in VARIANTS.values():
        for obj in render(cluster, namespace, values):
            for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
                resources, groups = rule.get("resources", []), rule.get("apiGroups", [])
                assert "secrets" not in resources, obj["metadata"]["name"]
                assert "*" not in resources + rule["verbs"] + groups + rule.get("nonResourceURLs", []), rule


def grants(
    cluster: Cluster, namespace: str, values: list[str], *resources: str
) -> set[tuple[str, str, tuple[str, ...]]]:
    """The operator's rules on `resources` when the chart is rendered with `values`: kind, resource, verbs."""
    return {
        (obj["kind"], resource, tuple(rule["verbs"]))
        for obj in render(cluster, namespace, values)
        if obj["kind"] in ("Role", "ClusterRole")
        for rule in obj.get("rules", [])
        for resource in rule.get("resources", [])
        if resource in resources
    }


def operator_env(cluster: Cluster, namespace: str, values: list[str], name: str) -> str:
    (operator,) = [o for o in render(cluster, namespace, values) if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
    return str(env[name])


def test_leaderworkerset_rbac_only_when_enabled(cluster: Cluster, namespace: str) -> None:
    """Exactly the verbs engines over several nodes need, and none without leaderWorkerSet.enabled."""
    kinds = ("leaderworkersets", "controllerrevisions", "statefulsets")
    assert grants(cluster, namespace, [], *kinds) == set()
    assert operator_env(cluster, namespace, [], "SPECINFER_LEADER_WORKER_SET") == "false"
    enabled = ["--set", "leaderWorkerSet.enabled=true"]
    assert grants(cluster, namespace, enabled, *kinds) == {
        ("ClusterRole", "leaderworkersets", ("get", "create", "patch", "delete")),
        ("ClusterRole", "controllerrevisions", ("list",)),
        ("ClusterRole", "statefulsets", ("get",)),
    }
    assert operator_env(cluster, namespace, enabled, "SPECINFER_LEADER_WORKER_SET") == "true"


def test_keda_rbac_only_with_its_prometheus(cluster: Cluster, namespace: str) -> None:
    """ScaledObjects only for an operator given KEDA's Prometheus; an address that is no URL is refused."""
    assert grants(cluster, namespace, [], "scaledobjects") == set()
    assert operator_env(cluster, namespace, [], "SPECINFER_KEDA_PROMETHEUS") == ""
    given = ["--set", "keda.prometheusAddress=http://prometheus-operated.monitoring:9090"]
    assert grants(cluster, namespace, given, "scaledobjects") == {
        ("ClusterRole", "scaledobjects", ("get", "create", "patch", "delete"))
    }
    assert (
        operator_env(cluster, namespace, given, "SPECINFER_KEDA_PROMETHEUS")
        == "http://prometheus-operated.monitoring:9090"
    )
    refused = helm(cluster, "template", "x", str(CHART), "--set", "keda.prometheusAddress=prometheus:9090", check=False)
    assert refused.returncode != 0
    assert "/keda/prometheusAddress" in refused.stderr  # the path, as helm names it


def test_inferencepool_rbac_wherever_the_operator_reconciles(cluster: Cluster, namespace: str) -> None:
    """spec.inferencePool's verbs, cluster-wide or in each watched namespace; nothing on its other kinds."""

    def grants(values: list[str]) -> set[tuple[str, str, str, tuple[str, ...]]]:
        return {
            (obj["kind"], obj["metadata"].get("namespace", ""), resource, tuple(rule["verbs"]))
            for obj in render(cluster, namespace, values)
            if obj["kind"] in ("Role", "ClusterRole")
            for rule in obj.get("rules", [])
            if "inference.networking.k8s.io" in rule.get("apiGroups", [])
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
