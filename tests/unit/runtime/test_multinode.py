"""What specinfer-runtime adds for a pod of a group: the rank flags vLLM joins the pods with, the HCCL and
socket variables, and a one-line refusal when LeaderWorkerSet's variables are missing or disagree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specinfer_runtime import compat, multinode
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.launcher import Environment, PreflightError, prepare
from tests.support.builders import engine, example

SPEC = {
    k: v
    for k, v in example("multinode/deepseek-v3.2-mtp")["spec"].items()
    if k in ("model", "parallelism", "speculative", "graph", "scheduling", "engineArgs")
}
GROUP = engine(SPEC)
LEADER = {"LWS_LEADER_ADDRESS": "dsv3-group-0.dsv3-group.ml", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}
POD_IP = {multinode.POD_IP_ENV: "10.0.0.7"}


def test_the_leader_names_itself_by_ip_and_serves() -> None:
    flags = multinode.flags(GROUP, {**LEADER, **POD_IP})
    assert flags == [
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "10.0.0.7",
        "--master-port",
        str(multinode.MASTER_PORT),
    ]


def test_a_worker_joins_the_leader_by_name_headless() -> None:
    flags = multinode.flags(GROUP, {**LEADER, **POD_IP, "LWS_WORKER_INDEX": "1"})
    assert flags[flags.index("--node-rank") + 1] == "1"
    assert flags[flags.index("--master-addr") + 1] == "dsv3-group-0.dsv3-group.ml"
    assert flags[-1] == "--headless"


def test_one_node_adds_nothing() -> None:
    single = engine({**SPEC, "parallelism": {"tensor": 8}})
    assert multinode.flags(single, {}) == []
    assert multinode.environment(single, POD_IP, "eth0") == {}


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX unset"),
        ({**LEADER, "LWS_GROUP_SIZE": "3"}, "the group has 3 pods (LWS_GROUP_SIZE), the engine config spans 2 nodes"),
        ({**LEADER, "LWS_WORKER_INDEX": "2"}, "LWS_WORKER_INDEX '2' is not a rank below 2"),
        ({**LEADER, "LWS_WORKER_INDEX": "x"}, "LWS_WORKER_INDEX 'x' is not a rank below 2"),
    ],
)
def test_a_pod_outside_a_proper_group_is_refused(env: dict[str, str], said: str) -> None:
    with pytest.raises(multinode.GroupError, match=re.escape(said)):
        multinode.flags(GROUP, env)


def test_hccl_and_sockets_follow_the_pod_ip_unless_set() -> None:
    out = multinode.environment(GROUP, POD_IP, "eth0")
    assert out == {
        "HCCL_IF_IP": "10.0.0.7",
        "GLOO_SOCKET_IFNAME": "eth0",
        "TP_SOCKET_IFNAME": "eth0",
        "HCCL_SOCKET_IFNAME": "eth0",
    }
    mine = multinode.environment(GROUP, {**POD_IP, "HCCL_SOCKET_IFNAME": "enp189s0f0"}, "eth0")
    assert "HCCL_SOCKET_IFNAME" not in mine
    assert "GLOO_SOCKET_IFNAME" not in multinode.environment(GROUP, POD_IP, None)


def test_the_interface_of_the_loopback_address() -> None:
    assert multinode.interface_of("127.0.0.1") == "lo"
    assert multinode.interface_of("") is None
    assert multinode.interface_of("192.0.2.250") is None  # TEST-NET-1: on no interface here


def test_prepare_appends_the_rank_to_the_checked_command(tmp_path: Path) -> None:
    config = tmp_path / "engine.json"
    config.write_text(json.dumps(GROUP.dump()))
    env = {**LEADER, **POD_IP, "LWS_WORKER_INDEX": "1", "SPECINFER_SKIP_NPU_CHECK": "1", compat.SKIP: "1"}
    launch = prepare(str(config), vllm_argv(GROUP), Environment(env=env, interface="eth0"))
    assert launch.argv[: len(vllm_argv(GROUP))] == vllm_argv(GROUP)
    assert launch.argv[-1] == "--headless"
    assert launch.env["HCCL_IF_IP"] == "10.0.0.7"
    with pytest.raises(PreflightError, match="LWS_GROUP_SIZE unset"):
        prepare(str(config), [], Environment(env={k: v for k, v in env.items() if k != "LWS_GROUP_SIZE"}))


def test_preflight_counts_the_npus_of_one_node(tmp_path: Path) -> None:
    config = tmp_path / "engine.json"
    config.write_text(json.dumps(GROUP.dump()))
    env = {**LEADER, **POD_IP, "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3", compat.SKIP: "1"}
    with pytest.raises(PreflightError, match="4 NPUs visible, tensor x pipeline x data / nodes 2 needs 8"):
        prepare(str(config), [], Environment(env=env))
