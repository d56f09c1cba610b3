"""The pod template overlay and the pod settings: merged under the operator's fields, which win."""

from __future__ import annotations

from typing import Any

from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, config_hash, family_hash, render
from tests.support.builders import cr, resource

BASE: dict[str, Any] = {
    "model": {"name": "org/target"},
    "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
}
OVERLAY: dict[str, Any] = {
    "metadata": {
        "labels": {"volcano.sh/queue-name": "q", "app.kubernetes.io/instance": "someone-else"},
        "annotations": {"prometheus.io/scrape": "true", "specinfer.io/config-hash": "forged"},
    },
    "spec": {
        "serviceAccountName": "llm",
        "runtimeClassName": "ascend",
        "terminationGracePeriodSeconds": 300,
        "volumes": [{"name": "driver", "hostPath": {"path": "/usr/local/Ascend/driver"}}],
        "containers": [{"name": "shipper", "image": "busybox:1.36"}],
        "initContainers": [{"name": "warm", "image": "busybox:1.36", "restartPolicy": "Always"}],
    },
}


def objects(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(cr(spec, uid="u1", namespace="ml"))}


def template(spec: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = objects(spec)["Deployment"]["spec"]["template"]
    return found


def test_the_overlay_is_merged_and_the_operators_fields_win() -> None:
    spec = {**BASE, "podTemplate": OVERLAY, "runtime": {"volumeMounts": [{"name": "driver", "mountPath": "/drv"}]}}
    tpl = template(spec)
    meta, pod = tpl["metadata"], tpl["spec"]
    assert meta["labels"]["volcano.sh/queue-name"] == "q"
    assert meta["labels"]["app.kubernetes.io/instance"] == "demo"  # the selector label is the operator's
    assert meta["annotations"]["prometheus.io/scrape"] == "true"
    assert meta["annotations"]["specinfer.io/config-hash"] == config_hash(cr(spec), RenderDefaults())
    assert [c["name"] for c in pod["containers"]] == ["engine", "shipper"]
    locked = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["initContainers"] == [
        {"name": "warm", "image": "busybox:1.36", "restartPolicy": "Always", "securityContext": locked}
    ]
    assert [v["name"] for v in pod["volumes"]] == ["engine-config", "shm", "hf-cache", "driver"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/etc/specinfer", "/dev/shm", "/var/cache/huggingface", "/drv"]
    assert (pod["serviceAccountName"], pod["runtimeClassName"]) == ("llm", "ascend")
    assert pod["terminationGracePeriodSeconds"] == 300


def test_without_an_overlay_the_pod_is_as_before() -> None:
    pod = template(BASE)["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert "initContainers" not in pod
    assert "serviceAccountName" not in pod
    assert pod["automountServiceAccountToken"] is False  # the engine calls no API: no token in its pods
    assert [c["name"] for c in pod["containers"]] == ["engine"]
    assert set(template(BASE)["metadata"]["annotations"]) == {"specinfer.io/config-hash"}


def test_env_from_secrets_and_config_maps() -> None:
    runtime = {
        "env": [{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}}],
        "envFrom": [{"secretRef": {"name": "extra"}}],
    }
    engine = template({**BASE, "runtime": runtime})["spec"]["containers"][0]
    assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}} in engine["env"]
    assert engine["envFrom"] == [{"secretRef": {"name": "extra"}}]


def test_limits_apart_from_requests() -> None:
    resources = {"cpu": "8", "cpuLimit": "16", "memory": "64Gi"}
    engine = template({**BASE, "resources": resources})["spec"]["containers"][0]
    requests = {"huawei.com/Ascend910": "1", "cpu": "8", "memory": "64Gi", "ephemeral-storage": "64Gi"}
    assert engine["resources"]["requests"] == requests
    assert engine["resources"]["limits"] == {"huawei.com/Ascend910": "1", "cpu": "16", "memory": "64Gi"}


def test_probe_timings_default_per_probe() -> None:
    engine = template({**BASE, "probes": {"startup": {"failureThreshold": 720}}})["spec"]["containers"][0]
    assert (engine["startupProbe"]["periodSeconds"], engine["startupProbe"]["failureThreshold"]) == (10, 720)
    assert (engine["livenessProbe"]["periodSeconds"], engine["livenessProbe"]["failureThreshold"]) == (15, 4)


def test_model_cache_size_or_claim() -> None:
    sized = template({**BASE, "resources": {"modelCache": "200Gi"}})["spec"]["volumes"]
    assert {"name": "hf-cache", "emptyDir": {"sizeLimit": "200Gi"}} in sized
    claimed = template({**BASE, "resources": {"modelCacheClaim": "hf"}})["spec"]["volumes"]
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf"}} in claimed


def test_spread_constraints_count_this_resources_pods_by_default() -> None:
    spread = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
    pod = template({**BASE, "placement": {"topologySpreadConstraints": [spread]}})["spec"]
    selector = pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "specinfer-engine", "app.kubernetes.io/instance": "demo"}


def test_service_annotations_and_disruption_budget() -> None:
    spec = {**BASE, "service": {"annotations": {"a.io/b": "c"}}, "disruptionBudget": {"minAvailable": 1}}
    found = objects(spec)
    assert found["Service"]["metadata"]["annotations"] == {"a.io/b": "c"}
    budget = found["PodDisruptionBudget"]
    assert budget["spec"] == {
        "selector": {
            "matchLabels": {"app.kubernetes.io/name": "specinfer-engine", "app.kubernetes.io/instance": "demo"}
        },
        "minAvailable": 1,
    }
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert "PodDisruptionBudget" not in objects(BASE)


def test_the_overlay_is_part_of_the_configuration_but_unset_fields_change_no_hash() -> None:
    defaults = RenderDefaults()
    plain = config_hash(cr(BASE), defaults)
    with_probes = {**BASE, "probes": {"startup": {"failureThreshold": 720}}}
    assert config_hash(cr(with_probes), defaults) == plain  # how the kubelet checks it is not how it serves
    overlaid = {**BASE, "podTemplate": OVERLAY}
    assert config_hash(cr(overlaid), defaults) != plain
    assert family_hash(cr(overlaid), defaults) != family_hash(cr(BASE), defaults)


def test_passthrough_keys_are_rendered_under_the_operators() -> None:
    spec = {
        **BASE,
        "graph": {"mode": "FULL_DECODE_ONLY", "captureSizes": [4, 8]},
        "compilationConfig": {"custom_ops": ["+rms_norm"]},
        "additionalConfig": {"enable_cpu_binding": False},
    }
    args = template(spec)["spec"]["containers"][0]["args"]
    compilation = args[args.index("--compilation-config") + 1]
    assert (
        compilation
        == '{"custom_ops":["+rms_norm"],"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[4,8]}'
    )
    assert args[args.index("--additional-config") + 1] == '{"enable_cpu_binding":false}'


def test_an_unknown_additional_key_is_a_warning() -> None:
    body = cr({**BASE, "additionalConfig": {"enable_cpu_bindng": True}}).model_dump(by_alias=True, exclude_none=True)
    report = check(body)
    assert report.value is not None
    assert any(w.path == "spec.additionalConfig.enable_cpu_bindng" for w in report.warnings), report.warnings


def test_overlay_keys_the_operator_sets_are_warned_about() -> None:
    body = cr({**BASE, "podTemplate": OVERLAY}).model_dump(by_alias=True, exclude_none=True)
    paths = [w.path for w in check(body).warnings]
    assert "spec.podTemplate.metadata.labels.app.kubernetes.io/instance" in paths
    assert "spec.podTemplate.metadata.annotations.specinfer.io/config-hash" in paths
    assert not any("volcano" in p for p in paths)


def test_every_container_drops_its_capabilities_and_cannot_escalate() -> None:
    """What Pod Security `baseline` and `restricted` ask of each container, and of the pod."""
    spec = {**BASE, "podTemplate": OVERLAY}
    pod = template(spec)["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for container in pod["containers"] + pod["initContainers"]:
        context = container["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
    assert pod["containers"][0]["securityContext"]["privileged"] is False
    assert "automountServiceAccountToken" not in pod  # a service account chosen: its token is wanted


def test_the_pod_security_context_runs_every_container_as_the_user_given() -> None:
    context = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "supplementalGroups": [1001]}
    spec = {**BASE, "podTemplate": {"spec": {"securityContext": context}}}
    assert template(spec)["spec"]["securityContext"] == {**context, "seccompProfile": {"type": "RuntimeDefault"}}
    escalating = {"name": "s", "image": "busybox:1.36", "securityContext": {"allowPrivilegeEscalation": True}}
    sidecar = template({**BASE, "podTemplate": {"spec": {"containers": [escalating]}}})["spec"]["containers"][1]
    assert sidecar["securityContext"]["allowPrivilegeEscalation"] is True  # the tenant policy decides


def test_run_as_non_root_with_user_zero_is_refused() -> None:
    context = {"runAsNonRoot": True, "runAsUser": 0}
    report = check({"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference", "metadata": {"name": "a"},
                    "spec": {**BASE, "podTemplate": {"spec": {"securityContext": context}}}})  # fmt: skip
    assert [p.path for p in report.errors] == ["spec.podTemplate.spec.securityContext.runAsUser"]


def test_the_engine_drains_its_requests_within_the_grace_period_before_it_stops() -> None:
    pod = template(BASE)["spec"]
    (engine,) = [c for c in pod["containers"] if c["name"] == "engine"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert engine["lifecycle"]["preStop"]["exec"]["command"] == [
        "specinfer-drain", "--port", "8000", "--timeout", "50"
    ]  # fmt: skip
    longer = template({**BASE, "podTemplate": {"spec": {"terminationGracePeriodSeconds": 300}}})["spec"]
    (engine,) = [c for c in longer["containers"] if c["name"] == "engine"]
    assert longer["terminationGracePeriodSeconds"] == 300
    assert engine["lifecycle"]["preStop"]["exec"]["command"][-1] == "290"


def test_the_pods_pull_with_the_resources_secrets_then_the_operators_each_once() -> None:
    own = {"imagePullSecrets": [{"name": "team-registry"}, {"name": "mirror"}]}
    defaults = RenderDefaults(image_pull_secrets=("mirror", "platform-registry"))
    deployment = next(o for o in render(cr({**BASE, "runtime": own}), defaults) if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "team-registry"},
        {"name": "mirror"},
        {"name": "platform-registry"},
    ]
    operator_only = next(o for o in render(cr(BASE), defaults) if o["kind"] == "Deployment")
    assert operator_only["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "mirror"},
        {"name": "platform-registry"},
    ]
    assert "imagePullSecrets" not in template(BASE)["spec"]  # none anywhere: the field is left out


def test_a_pull_secret_given_as_a_bare_name_is_refused_with_the_object_form() -> None:
    report = check(resource({**BASE, "runtime": {"imagePullSecrets": ["regcred"]}}))
    (problem,) = report.errors
    assert problem.path == "spec.runtime.imagePullSecrets[0]"
    assert 'Invalid value: "regcred"' in problem.message
    assert "write [{name: regcred}] instead of [regcred]" in problem.message


def test_a_pull_secret_named_twice_is_refused_as_the_api_server_does() -> None:
    report = check(resource({**BASE, "runtime": {"imagePullSecrets": [{"name": "regcred"}, {"name": "regcred"}]}}))
    (problem,) = report.errors
    assert (problem.path, problem.message) == ("spec.runtime.imagePullSecrets", 'Duplicate value: {"name":"regcred"}')
