"""The control plane's components, in the order `up` starts them: the ports each listens on (chosen once per
cluster and kept in cluster.json), the command line each runs with, and how to tell each is healthy.
"""

import json
import os
import socket
import time
from collections.abc import Iterable
from typing import NotRequired, TypedDict

from .kubeapi import http_get, insecure_context, tls_context
from .layout import SERVICE_CIDR, VERSIONS, StateDir, binpath
from .lws import lws_argv
from .nodes import POD_CIDR, kwok_argv
from .processes import comp_alive

COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "lws"]
# One port each; etcd-peer and lws-health are the second ports of etcd and lws.
PORT_KEYS = [
    "kube-apiserver",
    "etcd",
    "etcd-peer",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "lws",
    "lws-health",
]
# Client rate limits of kube-controller-manager and kube-scheduler (defaults 20/30 and 50/100 requests/s).
# A benchmark creating 500 Deployments makes the controller-manager write ~500 ReplicaSets, ~500 Pods and
# a few status updates of each (the scheduler ~500 bindings): a few thousand requests, which at 20 QPS
# take minutes and would measure the controller-manager, not the operator under test. At 500 QPS
# (burst 1000 for the first wave) they take seconds; the local apiserver serves that easily.
KUBE_API_QPS, KUBE_API_BURST = 500, 1000
NODE_GRACE = "5m"  # kube-controller-manager's --node-monitor-grace-period (see controller_manager_argv)
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ClusterConf(TypedDict):
    """cluster.json: what the cluster was created with, kept across `up`s."""

    ports: dict[str, int]  # PORT_KEYS -> port on 127.0.0.1
    versions: dict[str, str]  # hack/versions.env at creation
    nodes: int
    npus: int
    first_node: NotRequired[int]  # the index of the first fake node (0 when absent)


# --------------------------------------------------------------------------- ports / cluster.json


def free_port(taken: Iterable[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            p: int = s.getsockname()[1]
        if p not in taken:
            return p


def port_free(p: int) -> bool:
    """Whether a component could listen on p; SO_REUSEADDR as Go's listeners use, so connections left in
    TIME_WAIT by a killed component do not block its restart."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
            return True
        except (OSError, OverflowError):
            return False


def load_conf(state: StateDir) -> ClusterConf | None:
    if os.path.exists(state.conf):
        with open(state.conf) as f:
            conf: ClusterConf = json.load(f)
            return conf
    return None


def save_conf(state: StateDir, conf: ClusterConf) -> None:
    with open(state.conf + ".tmp", "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    os.replace(state.conf + ".tmp", state.conf)


def make_conf(apiserver_port: int | None, nodes: int, npus: int) -> ClusterConf:
    taken = set()
    ports = {}
    if apiserver_port:
        ports["kube-apiserver"] = apiserver_port
        taken.add(apiserver_port)
    conf: ClusterConf = {"ports": ports, "versions": dict(VERSIONS), "nodes": nodes, "npus": npus}
    add_ports(conf, taken)
    return conf


def add_ports(conf: ClusterConf, taken: Iterable[int] = ()) -> None:
    """A port for each component that has none yet (a state dir made before the component existed)."""
    ports = conf["ports"]
    used = set(taken) | set(ports.values())
    for k in PORT_KEYS:
        if k not in ports:
            ports[k] = free_port(used)
            used.add(ports[k])


# --------------------------------------------------------------------------- command lines


def etcd_argv(state: StateDir, p: dict[str, int]) -> list[str]:
    return [
        binpath("etcd"),
        "--name=specinfer",
        f"--data-dir={state.path('etcd-data')}",
        f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
        f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
        f"--listen-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
        f"--initial-cluster=specinfer=http://127.0.0.1:{p['etcd-peer']}",
        "--auto-compaction-retention=1",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_argv(state: StateDir, p: dict[str, int]) -> list[str]:
    def pki(name: str) -> str:
        return os.path.join(state.pki, name)

    return [
        binpath("kube-apiserver"),
        "--bind-address=127.0.0.1",
        f"--secure-port={p['kube-apiserver']}",
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
        f"--cert-dir={pki('apiserver-serving')}",
        f"--tls-cert-file={pki('apiserver.crt')}",
        f"--tls-private-key-file={pki('apiserver.key')}",
        f"--client-ca-file={pki('ca.crt')}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki('sa.pub')}",
        f"--service-account-signing-key-file={pki('sa.key')}",
        "--authorization-mode=Node,RBAC",
        # front-proxy / aggregation layer (also fills extension-apiserver-authentication)
        f"--requestheader-client-ca-file={pki('front-proxy-ca.crt')}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki('front-proxy-client.crt')}",
        f"--proxy-client-key-file={pki('front-proxy-client.key')}",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(state: StateDir, p: dict[str, int]) -> list[str]:
    comp = "kube-controller-manager"
    kc = state.kubeconfig_for(comp)

    def pki(name: str) -> str:
        return os.path.join(state.pki, name)

    return [
        binpath(comp),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--bind-address=127.0.0.1",
        f"--secure-port={p[comp]}",
        f"--cert-dir={pki('kube-controller-manager-serving')}",
        "--leader-elect=false",
        # No endpoint controllers: pod IPs are loopback addresses, which the API server refuses in
        # Endpoints and EndpointSlices; the controllers would retry every Service forever.
        "--controllers=*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki('sa.key')}",
        f"--root-ca-file={pki('ca.crt')}",
        f"--cluster-signing-cert-file={pki('ca.crt')}",
        f"--cluster-signing-key-file={pki('ca.key')}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Fake nodes get their spec.podCIDR at creation (ensure_nodes), so no nodeipam controller:
        # with --allocate-node-cidrs it would also refuse to start unless --cluster-cidr covered
        # every node's 127.x range. false is the default; explicit so nobody turns it on unawares.
        "--allocate-node-cidrs=false",
        f"--kube-api-qps={KUBE_API_QPS}",
        f"--kube-api-burst={KUBE_API_BURST}",
        # kwok renews every fake node's Lease from one process: on two cores busy with real engines its
        # renewals can come late, and a node past the grace period (default 50 s) is tainted not-ready, which
        # no pod of the tests tolerates. No test takes a node down, so a late renewal must not either.
        f"--node-monitor-grace-period={NODE_GRACE}",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_argv(state: StateDir, p: dict[str, int]) -> list[str]:
    comp = "kube-scheduler"
    kc = state.kubeconfig_for(comp)
    # The client connection (rate limits) lives in a KubeSchedulerConfiguration: the scheduler's
    # --kubeconfig / --kube-api-qps / --kube-api-burst / --profiling flags are deprecated.
    cfg = state.path("kube-scheduler.yaml")
    with open(cfg, "w") as f:
        f.write(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  kubeconfig: {json.dumps(kc)}\n"
            f"  qps: {KUBE_API_QPS}\n  burst: {KUBE_API_BURST}\n"
            "leaderElection:\n  leaderElect: false\nenableProfiling: false\n"
        )
    return [
        binpath(comp),
        f"--config={cfg}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--bind-address=127.0.0.1",
        f"--secure-port={p[comp]}",
        f"--cert-dir={os.path.join(state.pki, 'kube-scheduler-serving')}",
        "--v=1",
    ]


def argv_for(state: StateDir, comp: str, ports: dict[str, int]) -> list[str]:
    """The command line of comp (writing the config files it reads into the state dir)."""
    if comp == "etcd":
        return etcd_argv(state, ports)
    if comp == "kube-apiserver":
        return apiserver_argv(state, ports)
    if comp == "kube-controller-manager":
        return controller_manager_argv(state, ports)
    if comp == "kube-scheduler":
        return scheduler_argv(state, ports)
    if comp == "kwok":
        return kwok_argv(state, state.kubeconfig_for("kwok"), ports["kwok"], POD_CIDR)
    if comp == "lws":
        return lws_argv(state, ports)
    raise KeyError(comp)


# --------------------------------------------------------------------------- health


def healthy(state: StateDir, comp: str, ports: dict[str, int]) -> bool:
    p = ports[comp]
    if comp == "etcd":
        code, body = http_get(f"http://127.0.0.1:{p}/health")
        return code == 200 and '"health":"true"' in body.replace(" ", "")
    if comp == "kube-apiserver":
        code, body = http_get(f"https://127.0.0.1:{p}/readyz", tls_context(state.pki))
    elif comp in ("kube-controller-manager", "kube-scheduler"):
        code, body = http_get(f"https://127.0.0.1:{p}/healthz", insecure_context())
    elif comp == "kwok":
        code, body = http_get(f"http://127.0.0.1:{p}/healthz")
    elif comp == "lws":
        code, body = http_get(f"http://127.0.0.1:{ports.get('lws-health')}/healthz")
    else:
        raise KeyError(comp)
    return code == 200 and body.strip() == "ok"


def healthy_or_dead(state: StateDir, comp: str, ports: dict[str, int], timeout: float) -> bool:
    """For an already-running component: True once healthy, False if it exits or stays unhealthy."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if healthy(state, comp, ports):
            return True
        if not comp_alive(state, comp):
            return False
        time.sleep(0.25)
    return False


def all_alive(state: StateDir) -> bool:
    return all(comp_alive(state, c) for c in COMPONENTS)
