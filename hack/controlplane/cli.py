"""The commands of hack/cluster (up, down, status, env, kubeconfig, fake-nodes, lws): argument parsing and
the order in which the other modules' steps run. Each command returns the process's exit code.
"""

import argparse
import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .components import (
    COMPONENTS,
    ClusterConf,
    add_ports,
    all_alive,
    argv_for,
    free_port,
    healthy,
    healthy_or_dead,
    load_conf,
    make_conf,
    port_free,
    save_conf,
)
from .console import die, log
from .kubeapi import Api, http_get
from .layout import BIN, FAKE_NODES_STATE, STATE, VERSIONS, binpath, ensure_binaries
from .lws import install_lws, remove_lws
from .nodes import (
    MAX_NODES,
    NODE_CIDR_FIRST,
    NPU_RESOURCE,
    OTHER_CLUSTER_POD_CIDR,
    OWNER_LABEL,
    api_ops,
    before_kwok_start,
    ensure_nodes,
    kubectl_ops,
    kwok_argv,
    node_object,
    nodes_ready,
)
from .pki import ensure_openssl, ensure_pki, write_kubeconfigs
from .processes import comp_alive, logfile, read_pid, start, stop, wait_for

DESCRIPTION = "Local Kubernetes control plane on loopback with kwok-simulated Ascend NPU nodes."


@dataclass
class UpOptions:
    nodes: int
    npus: int
    nodes_given: bool  # --nodes or --npus given: they replace what cluster.json says
    npus_given: bool
    first_node: int | None  # --first-node, else what cluster.json says (0 for a new cluster)
    apiserver_port: int | None
    timeout: int


@dataclass
class FakeNodesOptions:
    kubeconfig: str
    nodes: int
    npus: int
    timeout: int
    stop: bool


@dataclass
class LwsOptions:
    state: str  # "on" or "off"
    timeout: int


def set_nodes(conf: ClusterConf, opts: UpOptions) -> None:
    """The nodes the options give, in place of what cluster.json says."""
    if opts.nodes_given or opts.npus_given:
        conf["nodes"], conf["npus"] = opts.nodes, opts.npus
    if opts.first_node is not None:
        conf["first_node"] = opts.first_node


def cmd_up(opts: UpOptions) -> int:
    t0 = time.time()
    conf = load_conf(STATE)
    if conf and all_alive(STATE) and all(healthy(STATE, c, conf["ports"]) for c in COMPONENTS):
        api = Api(conf["ports"]["kube-apiserver"], STATE.pki)
        set_nodes(conf, opts)
        save_conf(STATE, conf)
        names = ensure_nodes(api, conf["nodes"], conf["npus"], conf.get("first_node", 0))
        wait_for(STATE, "fake nodes Ready", lambda: nodes_ready(api, names), opts.timeout, "kwok")
        log(f"cluster is already up (apiserver https://127.0.0.1:{conf['ports']['kube-apiserver']})")
        print(f"KUBECONFIG={STATE.kubeconfig}")
        return 0

    ensure_openssl()
    ensure_binaries()
    os.makedirs(STATE.root, exist_ok=True)
    if conf is None:
        conf = make_conf(opts.apiserver_port, opts.nodes, opts.npus)
        set_nodes(conf, opts)
        save_conf(STATE, conf)
    else:
        if conf.get("versions", {}).get("ETCD_VERSION", VERSIONS["ETCD_VERSION"]) != VERSIONS["ETCD_VERSION"]:
            log("warning: state dir was created with a different etcd version")
        set_nodes(conf, opts)
        add_ports(conf)
        save_conf(STATE, conf)
    ports = conf["ports"]
    ensure_pki(STATE)
    write_kubeconfigs(STATE, ports["kube-apiserver"])

    for comp in COMPONENTS:
        port_keys = [comp] + (["etcd-peer"] if comp == "etcd" else [])
        if comp_alive(STATE, comp):
            if healthy_or_dead(STATE, comp, ports, opts.timeout):
                log(f"{comp} already running (pid {read_pid(STATE, comp)})")
                continue
            log(f"{comp} (pid {read_pid(STATE, comp)}) is not healthy; restarting it")
            stop(STATE, comp)
        for k in port_keys:
            if not port_free(ports[k]):
                die(
                    f"port {ports[k]} for {comp} is in use by another process; "
                    f"run `hack/cluster down` (or free the port) and retry"
                )
        if comp == "kwok":
            before_kwok_start(*api_ops(Api(ports["kube-apiserver"], STATE.pki)))
        if comp == "lws":
            install_lws(STATE, ports, opts.timeout)
        ts = time.time()
        start(STATE, comp, argv_for(STATE, comp, ports))
        is_healthy = functools.partial(healthy, STATE, comp, ports)
        wait_for(STATE, f"{comp} to become healthy", is_healthy, opts.timeout, comp)
        log(f"{comp} healthy on 127.0.0.1:{ports[comp]} ({time.time() - ts:.1f}s, log {logfile(STATE, comp)})")

    api = Api(ports["kube-apiserver"], STATE.pki)
    ts = time.time()
    names = ensure_nodes(api, conf["nodes"], conf["npus"], conf.get("first_node", 0))
    wait_for(STATE, f"{len(names)} fake nodes Ready", lambda: nodes_ready(api, names), opts.timeout, "kwok")
    log(f"fake nodes Ready: {', '.join(names)} ({conf['npus']} x {NPU_RESOURCE} each, {time.time() - ts:.1f}s)")
    ts = time.time()
    wait_for(
        STATE,
        "default/default ServiceAccount (controller-manager)",
        lambda: api.req("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
        opts.timeout,
        "kube-controller-manager",
    )
    log(f"default ServiceAccount exists ({time.time() - ts:.1f}s)")
    log(f"cluster up in {time.time() - t0:.1f}s; apiserver https://127.0.0.1:{ports['kube-apiserver']}")
    print(f"KUBECONFIG={STATE.kubeconfig}")
    return 0


def cmd_down() -> int:
    for comp in reversed(COMPONENTS):
        stop(STATE, comp)
    if os.path.isdir(STATE.root):
        shutil.rmtree(STATE.root)
        log(f"removed {STATE.root}")
    else:
        log("nothing to remove")
    return 0


def cmd_status() -> int:
    conf = load_conf(STATE)
    if not conf:
        print("cluster: not created")
        return 1
    ok = True
    for comp in COMPONENTS:
        alive = comp_alive(STATE, comp)
        h = alive and healthy(STATE, comp, conf["ports"])
        ok = ok and h
        print(
            f"{comp:25s} pid={read_pid(STATE, comp) or '-':<8} port={conf['ports'][comp]:<6} "
            f"{'healthy' if h else ('running' if alive else 'STOPPED')}"
        )
    print(f"kubeconfig: {STATE.kubeconfig}")
    if ok:
        api = Api(conf["ports"]["kube-apiserver"], STATE.pki)
        code, lst = api.req("GET", "/api/v1/nodes")
        for it in lst.get("items", []) if code == 200 else []:
            st = {c["type"]: c["status"] for c in it.get("status", {}).get("conditions", []) or []}
            alloc = it.get("status", {}).get("allocatable", {})
            print(
                f"node {it['metadata']['name']:20s} Ready={st.get('Ready', '?'):6s} "
                f"{NPU_RESOURCE}={alloc.get(NPU_RESOURCE, '0')} cpu={alloc.get('cpu')} memory={alloc.get('memory')}"
            )
    print("status:", "up" if ok else "DEGRADED/DOWN")
    return 0 if ok else 1


def cmd_fake_nodes(opts: FakeNodesOptions) -> int:
    """Simulated Ascend nodes in another cluster (kind, a test cluster): kwok runs here, against it."""
    state = FAKE_NODES_STATE
    if opts.stop:
        stop(state, "kwok")
        return 0
    ensure_binaries()
    os.makedirs(state.run, exist_ok=True)
    os.makedirs(state.logs, exist_ok=True)
    kubeconfig = os.path.abspath(os.path.expanduser(opts.kubeconfig))
    kubectl = [binpath("kubectl"), f"--kubeconfig={kubeconfig}"]
    if not comp_alive(state, "kwok"):
        before_kwok_start(*kubectl_ops(kubectl))
        port = free_port(set())
        start(state, "kwok", kwok_argv(state, kubeconfig, port, OTHER_CLUSTER_POD_CIDR))
        wait_for(
            state,
            "kwok to become healthy",
            lambda: http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200,
            opts.timeout,
            "kwok",
        )
        log(f"kwok running against {kubeconfig} (pid {read_pid(state, 'kwok')}, log {logfile(state, 'kwok')})")
    names = []
    for i in range(opts.nodes):
        node = node_object(i, opts.npus)
        names.append(node["metadata"]["name"])
        r = subprocess.run([*kubectl, "create", "-f", "-"], input=json.dumps(node), capture_output=True, text=True)
        if r.returncode != 0 and "AlreadyExists" not in r.stderr:
            die(f"creating node {names[-1]} failed: {r.stderr.strip()}")

    def ready() -> bool:
        selector = f"{OWNER_LABEL[0]}={OWNER_LABEL[1]}"
        r = subprocess.run([*kubectl, "get", "nodes", "-l", selector, "-o", "json"], capture_output=True, text=True)
        items = json.loads(r.stdout).get("items", []) if r.returncode == 0 else []
        up = {
            it["metadata"]["name"]
            for it in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in it["status"].get("conditions", []))
        }
        return set(names) <= up

    wait_for(state, f"{len(names)} fake nodes Ready", ready, opts.timeout, "kwok")
    log(
        f"fake nodes Ready: {', '.join(names)} ({opts.npus} x {NPU_RESOURCE} each); "
        "stop kwok with `hack/cluster fake-nodes --stop`"
    )
    return 0


def cmd_lws(opts: LwsOptions) -> int:
    """Remove LeaderWorkerSet (controller, webhooks, CRDs and with them every LeaderWorkerSet), or put it back,
    to see what the operator does on a cluster without it."""
    conf = load_conf(STATE)
    if not conf or not comp_alive(STATE, "kube-apiserver"):
        die("the cluster is not up: run `hack/cluster up`")
    ports = conf["ports"]
    if opts.state == "off":
        remove_lws(STATE)
        return 0
    if comp_alive(STATE, "lws") and healthy(STATE, "lws", ports):
        log("LeaderWorkerSet is already installed")
        return 0
    install_lws(STATE, ports, opts.timeout)
    start(STATE, "lws", argv_for(STATE, "lws", ports))
    wait_for(STATE, "lws to become healthy", lambda: healthy(STATE, "lws", ports), opts.timeout, "lws")
    log(f"LeaderWorkerSet installed (controller pid {read_pid(STATE, 'lws')}, log {logfile(STATE, 'lws')})")
    return 0


def cmd_env() -> int:
    print(f"export KUBECONFIG={STATE.kubeconfig}")
    print(f'export PATH="{BIN}:$PATH"')
    return 0


def cmd_kubeconfig() -> int:
    print(STATE.kubeconfig)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hack/cluster", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start (or verify) the local cluster")
    up.add_argument("--nodes", type=int, default=None, help="number of fake Ascend nodes (default 2)")
    up.add_argument("--npus", type=int, default=None, help=f"{NPU_RESOURCE} per node (default 8)")
    up.add_argument(
        "--first-node",
        type=int,
        default=int(os.environ["SPECINFER_FIRST_NODE"]) if os.environ.get("SPECINFER_FIRST_NODE") else None,
        help="index of the first fake node (default 0): a second cluster beside the first, whose nodes start "
        "past the first's, has pod addresses of its own",
    )
    up.add_argument(
        "--apiserver-port",
        type=int,
        default=int(os.environ.get("SPECINFER_APISERVER_PORT", "0")) or None,
        help="kube-apiserver port (default: a free port, chosen once per cluster)",
    )
    up.add_argument("--timeout", type=int, default=120, help="seconds to wait for each readiness step")
    sub.add_parser("down", help="stop all components and delete the state dir")
    sub.add_parser("status", help="show component / node status")
    sub.add_parser("env", help="print shell exports (KUBECONFIG, PATH)")
    fake = sub.add_parser("fake-nodes", help="simulate Ascend nodes in another cluster (e.g. kind) with a local kwok")
    fake.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", os.path.expanduser("~/.kube/config")))
    fake.add_argument("--nodes", type=int, default=2, help="number of fake Ascend nodes (default 2)")
    fake.add_argument("--npus", type=int, default=8, help=f"{NPU_RESOURCE} per node (default 8)")
    fake.add_argument("--timeout", type=int, default=120, help="seconds to wait for the nodes")
    fake.add_argument("--stop", action="store_true", help="stop the local kwok started for another cluster")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    lws = sub.add_parser("lws", help="install (on) or remove (off) LeaderWorkerSet on the running cluster")
    lws.add_argument("state", choices=["on", "off"])
    lws.add_argument("--timeout", type=int, default=120, help="seconds to wait for each readiness step")
    return ap


def up_options(args: argparse.Namespace) -> UpOptions:
    """--nodes/--npus/--first-node default to SPECINFER_NODES/SPECINFER_NPUS/SPECINFER_FIRST_NODE (then 2, 8 and
    what cluster.json says); nodes kwok can serve."""
    nodes = args.nodes if args.nodes is not None else int(os.environ.get("SPECINFER_NODES", "2"))
    npus = args.npus if args.npus is not None else int(os.environ.get("SPECINFER_NPUS", "8"))
    first = args.first_node or 0
    if nodes < 0 or first < 0 or first + nodes > MAX_NODES:
        die(
            f"--first-node plus --nodes must be between 0 and {MAX_NODES} "
            f"(node i gets pod CIDR 127.({NODE_CIDR_FIRST}+i).0.0/16)"
        )
    return UpOptions(
        nodes, npus, args.nodes is not None, args.npus is not None, args.first_node, args.apiserver_port, args.timeout
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "up":
        return cmd_up(up_options(args))
    if args.cmd == "down":
        return cmd_down()
    if args.cmd == "status":
        return cmd_status()
    if args.cmd == "env":
        return cmd_env()
    if args.cmd == "kubeconfig":
        return cmd_kubeconfig()
    if args.cmd == "fake-nodes":
        return cmd_fake_nodes(FakeNodesOptions(args.kubeconfig, args.nodes, args.npus, args.timeout, args.stop))
    return cmd_lws(LwsOptions(args.state, args.timeout))
