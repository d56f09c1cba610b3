"""One engine over several nodes: what each pod of a LeaderWorkerSet group adds to `vllm serve`.

Every pod of a group gets the same command line (argv.vllm_argv, checked against the engine config like any
other); what differs by rank comes from the variables LeaderWorkerSet's webhook sets in each container, and
is added here. vLLM's multiprocessing backend then joins the pods into one engine: `--nnodes`, `--node-rank`,
`--master-addr`, `--master-port`, with `--headless` on every pod but the leader, which alone serves the API.
vLLM infers data parallelism across nodes from the same flags. HCCL, Gloo and the tensor-parallel sockets
are bound to the interface that holds the pod's IP, as vLLM-Ascend's multi-node guide sets them by hand.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Mapping

from specinfer_runtime.engine import EngineSpec

# Set in every container by LeaderWorkerSet's pod webhook.
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
# Set by the operator from the pod's status.podIP (the downward API).
POD_IP_ENV = "SPECINFER_POD_IP"
# torch.distributed's rendezvous on the leader; each pod has its own network namespace.
MASTER_PORT = 29500
SOCKET_INTERFACE_VARIABLES = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
_SIOCGIFADDR = 0x8915


class GroupError(ValueError):
    """Why this pod cannot take its place in the group, in one line."""


def _index(env: Mapping[str, str], nodes: int) -> int:
    missing = [name for name in (LEADER_ADDRESS_ENV, GROUP_SIZE_ENV, WORKER_INDEX_ENV) if not env.get(name)]
    if missing:
        raise GroupError(
            f"{', '.join(missing)} unset: an engine over {nodes} nodes runs as a LeaderWorkerSet group, whose "
            "webhook sets them; check that the LeaderWorkerSet controller runs"
        )
    size, index = env[GROUP_SIZE_ENV].strip(), env[WORKER_INDEX_ENV].strip()
    if size != str(nodes):
        raise GroupError(
            f"the group has {size} pods ({GROUP_SIZE_ENV}), the engine config spans {nodes} nodes: "
            "operator and LeaderWorkerSet out of step"
        )
    if not index.isdigit() or int(index) >= nodes:
        raise GroupError(f"{WORKER_INDEX_ENV} {index!r} is not a rank below {nodes}")
    return int(index)


def flags(spec: EngineSpec, env: Mapping[str, str]) -> list[str]:
    """The rank-dependent flags of this pod (none for a one-node engine). The leader names itself by its
    IP, as the data-parallel head binds that address and ZeroMQ cannot bind a DNS name; the workers reach
    it by the name LeaderWorkerSet gives it."""
    nodes = spec.parallelism.group_size()
    if nodes == 1:
        return []
    rank = _index(env, nodes)
    leader = env.get(POD_IP_ENV, "").strip() if rank == 0 else ""
    out = ["--distributed-executor-backend", "mp", "--nnodes", str(nodes), "--node-rank", str(rank)]
    out += ["--master-addr", leader or env[LEADER_ADDRESS_ENV].strip(), "--master-port", str(MASTER_PORT)]
    return out + (["--headless"] if rank > 0 else [])


def environment(spec: EngineSpec, env: Mapping[str, str], interface: str | None) -> dict[str, str]:
    """HCCL_IF_IP and the socket interfaces for a pod of a group; a variable the pod sets already wins."""
    if spec.parallelism.group_size() == 1:
        return {}
    wanted = {"HCCL_IF_IP": env.get(POD_IP_ENV, "").strip()}
    wanted |= dict.fromkeys(SOCKET_INTERFACE_VARIABLES, interface or "")
    return {name: value for name, value in wanted.items() if value and not env.get(name)}


def interface_of(address: str) -> str | None:
    """The network interface holding `address` (IPv4), or None."""
    if not address:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None
