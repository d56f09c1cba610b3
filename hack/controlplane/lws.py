"""LeaderWorkerSet without a Service or cert-manager: its controller runs on this machine with a webhook
certificate of the cluster CA, the API server calls its admission webhooks by URL on loopback, and its
CRDs come from the Go module hack/build-binaries.sh built it from. `hack/cluster lws off` removes all of it,
to see what the operator does on a cluster without LeaderWorkerSet.
"""

import json
import os
import shutil
import subprocess
from typing import NamedTuple

from .console import die, log
from .kubeapi import JsonObject
from .layout import CACHE, VERSIONS, StateDir, binpath
from .pki import b64file
from .processes import stop


class Webhook(NamedTuple):
    name: str
    path: str
    group: str
    resource: str
    operations: list[str]


# LeaderWorkerSet's admission webhooks (config/webhook/manifests.yaml of the module), called by URL on loopback
# instead of through a Service. The pod webhooks only see pods of a LeaderWorkerSet (the objectSelector its
# Helm chart sets too): while the controller is stopped, no other pod is refused.
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WEBHOOKS = {
    "mutating": [
        Webhook(
            "mleaderworkerset.kb.io",
            "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
            ["CREATE", "UPDATE"],
        ),
        Webhook("mpod.kb.io", "/mutate--v1-pod", "", "pods", ["CREATE"]),
    ],
    "validating": [
        Webhook(
            "vleaderworkerset.kb.io",
            "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
            ["CREATE", "UPDATE"],
        ),
        Webhook("vpod.kb.io", "/validate--v1-pod", "", "pods", ["CREATE", "UPDATE"]),
        Webhook(
            "vdisaggregatedset.kb.io",
            "/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset",
            "disaggregatedset.x-k8s.io",
            "disaggregatedsets",
            ["CREATE", "UPDATE"],
        ),
    ],
}
LWS_WEBHOOK_CONFIG = "specinfer-local-lws"


def lws_argv(state: StateDir, ports: dict[str, int]) -> list[str]:
    """The LeaderWorkerSet controller: its webhook server on loopback with a certificate of the cluster CA
    (no internal cert rotation, which needs a Service), no leader election, no metrics endpoint."""
    certs = state.path("lws-certs")
    os.makedirs(certs, exist_ok=True)
    for src, dst in (("lws-webhook.crt", "tls.crt"), ("lws-webhook.key", "tls.key")):
        shutil.copyfile(os.path.join(state.pki, src), os.path.join(certs, dst))
    cfg = state.path("lws.yaml")
    with open(cfg, "w") as f:
        f.write(
            "apiVersion: config.lws.x-k8s.io/v1alpha1\nkind: Configuration\n"
            "leaderElection:\n  leaderElect: false\ninternalCertManagement:\n  enable: false\n"
            f"webhook:\n  host: 127.0.0.1\n  port: {ports['lws']}\n  certDir: {json.dumps(certs)}\n"
            f"health:\n  healthProbeBindAddress: 127.0.0.1:{ports['lws-health']}\n"
            'metrics:\n  bindAddress: "0"\n'
        )
    return [binpath("lws"), f"--config={cfg}", f"--kubeconfig={state.kubeconfig_for('lws')}", "--zap-log-level=info"]


def lws_crds() -> str:
    return os.path.join(CACHE, "crds", f"lws-{VERSIONS['LWS_VERSION']}")


def lws_webhooks(state: StateDir, port: int) -> list[JsonObject]:
    """The Mutating and ValidatingWebhookConfiguration of the controller listening on 127.0.0.1:port."""
    ca = b64file(os.path.join(state.pki, "ca.crt"))
    out = []
    for kind, hooks in LWS_WEBHOOKS.items():
        webhooks = []
        for name, path, group, resource, operations in hooks:
            hook: JsonObject = {
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca},
                "rules": [
                    {"apiGroups": [group], "apiVersions": ["v1"], "operations": operations, "resources": [resource]}
                ],
            }
            if resource == "pods":
                hook["objectSelector"] = {"matchExpressions": [{"key": LWS_GROUP_LABEL, "operator": "Exists"}]}
            webhooks.append(hook)
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": f"{kind.title()}WebhookConfiguration",
                "metadata": {"name": LWS_WEBHOOK_CONFIG},
                "webhooks": webhooks,
            }
        )
    return out


def kubectl(state: StateDir, *args: str, stdin: str | None = None) -> str:
    """kubectl as the cluster's admin; dies when it fails."""
    r = subprocess.run(
        [binpath("kubectl"), f"--kubeconfig={state.kubeconfig}", *args], input=stdin, capture_output=True, text=True
    )
    if r.returncode != 0:
        die(f"kubectl {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def install_lws(state: StateDir, ports: dict[str, int], timeout: int) -> None:
    """LeaderWorkerSet's CRDs (Established before the controller starts, which watches them) and webhooks."""
    kubectl(state, "apply", "--server-side", "--force-conflicts", "-f", lws_crds())
    kubectl(state, "wait", "--for=condition=Established", "-f", lws_crds(), f"--timeout={timeout}s")
    webhooks = {"apiVersion": "v1", "kind": "List", "items": lws_webhooks(state, ports["lws"])}
    kubectl(state, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(webhooks))


def remove_lws(state: StateDir) -> None:
    """Stop the controller, delete its webhook configurations and its CRDs (and with them every LeaderWorkerSet)."""
    stop(state, "lws")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        kubectl(state, "delete", kind, LWS_WEBHOOK_CONFIG, "--ignore-not-found")
    kubectl(state, "delete", "--ignore-not-found", "--wait", "-f", lws_crds())
    log("LeaderWorkerSet removed")
