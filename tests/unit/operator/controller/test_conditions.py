"""Status computation from observed objects (pure): conditions, reasons, messages, transitions."""

from __future__ import annotations

from typing import Any

from specinfer_operator.api.engine import EngineVersions
from specinfer_operator.controller.conditions import Observed, Verdict, compute, transitions
from specinfer_operator.controller.context import desired_of
from specinfer_operator.controller.health import unschedulable_message
from specinfer_operator.controller.publish import status_patch
from specinfer_operator.controller.refresh import drifted
from specinfer_operator.render.children import RenderDefaults
from tests.support.builders import cr, engine_pod, example
from tests.support.statuses import DESIRED, LATER, NOW, conditions, deployment


def pending_pod(message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
        },
    }


def test_desired_state_of_a_resource() -> None:
    assert DESIRED.method == "eagle3"
    assert DESIRED.num_speculative_tokens == 3
    assert DESIRED.capture_sizes == [4, 8, 12, 16]
    assert DESIRED.npus_per_pod == 4
    assert DESIRED.endpoint == "http://llama3-eagle3.ml.svc:8000"


def test_ready_when_every_pod_runs_the_current_config() -> None:
    status = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), {}, NOW)
    assert conditions(status) == {
        "Ready": ("True", "Ready"),
        "Progressing": ("False", "RolloutComplete"),
        "Degraded": ("False", "AsExpected"),
        "ConfigValid": ("True", "Valid"),
        "Reconciling": ("False", "RolloutComplete"),
        "Stalled": ("False", "AsExpected"),
    }
    assert status["ready"] == "2/2"
    assert status["speculation"] == {
        "method": "eagle3",
        "numSpeculativeTokens": 3,
        "captureSizes": [4, 8, 12, 16],
        "adaptivity": "StaticK",
        "image": "ghcr.io/specinfer/specinfer-runtime:0.2.0",  # the default: its releases are the policy's to state
    }
    assert status["observedGeneration"] == 3


def test_rollout_in_progress_while_old_pods_remain() -> None:
    observed = Observed(deployment(DESIRED.config_hash, replicas=3, ready=2, updated=1), [])
    status = compute(3, Verdict(True), DESIRED, observed, {}, NOW)
    assert conditions(status)["Progressing"] == ("True", "RolloutInProgress")
    assert conditions(status)["Ready"] == ("False", "RolloutInProgress")
    assert conditions(status)["Reconciling"] == ("True", "RolloutInProgress")
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert "1/2 pods updated" in progressing["message"]


def test_old_template_is_not_ready() -> None:
    status = compute(3, Verdict(True), DESIRED, Observed(deployment("0ld"), []), {}, NOW)
    assert conditions(status)["Ready"] == ("False", "RolloutInProgress")


def test_unschedulable_names_the_free_npus() -> None:
    scheduler = "0/2 nodes are available: 2 Insufficient huawei.com/Ascend910. preemption: 0/2 nodes are available."
    observed = Observed(deployment(DESIRED.config_hash, ready=1), [pending_pod(scheduler)])
    status = compute(3, Verdict(True), DESIRED, observed, {}, NOW)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == ("Unschedulable", "0/2 nodes have 4 free huawei.com/Ascend910")
    assert conditions(status)["Degraded"] == ("True", "Unschedulable")
    assert conditions(status)["Stalled"] == ("True", "Unschedulable")


def test_other_scheduling_reasons_are_passed_on() -> None:
    assert unschedulable_message('0/2 nodes are available: persistentvolumeclaim "m" not found.', 4, "x.io/npu") == (
        '0/2 nodes are available: persistentvolumeclaim "m" not found.'
    )


def test_crash_loop_shows_the_termination_message_and_restarts() -> None:
    pod = engine_pod("llama3-abc", waiting="CrashLoopBackOff", message="preflight: 4 NPUs visible, 8 needed\n")
    observed = Observed(deployment(DESIRED.config_hash, ready=1), [pod])
    ready = next(c for c in compute(3, Verdict(True), DESIRED, observed, {}, NOW)["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "CrashLoopBackOff"
    assert ready["message"] == "pod llama3-abc restarted 4 times; last exit: preflight: 4 NPUs visible, 8 needed"


def test_progress_deadline_exceeded_is_degraded() -> None:
    stalled = deployment(
        DESIRED.config_hash,
        ready=1,
        updated=1,
        conditions=[
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "RS x"}
        ],
    )
    status = compute(3, Verdict(True), DESIRED, Observed(stalled, []), {}, NOW)
    assert conditions(status)["Degraded"] == ("True", "ProgressDeadlineExceeded")
    assert conditions(status)["Progressing"] == ("False", "ProgressDeadlineExceeded")


def test_invalid_spec_keeps_describing_what_serves() -> None:
    good = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), {}, NOW)
    verdict = Verdict(False, "InsufficientNPUCapacity", "each pod needs 16")
    bad = compute(4, verdict, None, Observed(deployment(DESIRED.config_hash), []), good, LATER)
    assert conditions(bad) == {
        "Ready": ("False", "InvalidConfig"),
        "Progressing": ("False", "InvalidConfig"),
        "Degraded": ("True", "InvalidConfig"),
        "ConfigValid": ("False", "InsufficientNPUCapacity"),
        "Reconciling": ("False", "InvalidConfig"),
        "Stalled": ("True", "InvalidConfig"),
    }
    assert bad["speculation"] == good["speculation"]
    assert bad["configHash"] == good["configHash"]
    ready = next(c for c in bad["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "each pod needs 16; the last valid configuration keeps serving"


def test_transition_times_move_only_with_the_status() -> None:
    first = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), {}, NOW)
    again = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), first, LATER)
    assert again == first
    assert status_patch(first, again) is None
    assert transitions(first, again) == []


def test_events_report_the_originals_not_the_kstatus_mirrors() -> None:
    rolling = compute(
        3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash, ready=1, updated=1), []), {}, NOW
    )
    done = compute(3, Verdict(True), DESIRED, Observed(deployment(DESIRED.config_hash), []), rolling, LATER)
    assert [kind for kind, _, _ in transitions(rolling, done)] == ["Ready", "Progressing"]
    reconciling = next(c for c in done["conditions"] if c["type"] == "Reconciling")
    assert (reconciling["status"], reconciling["lastTransitionTime"]) == ("False", LATER)


def test_drift_ignores_server_defaults_but_not_edits() -> None:
    wanted = {"replicas": 2, "template": {"spec": {"containers": [{"name": "engine", "args": ["a"]}]}}}
    engine: dict[str, Any] = {"name": "engine", "args": ["a"], "terminationMessagePolicy": "File"}
    live = {"replicas": 2, "revisionHistoryLimit": 10, "template": {"spec": {"containers": [engine]}}}
    assert not drifted(wanted, live)
    assert drifted(wanted, {**live, "replicas": 5})
    engine["args"] = ["b"]
    assert drifted(wanted, live)


def test_zero_values_the_api_server_omits_are_not_drift() -> None:
    """A writable volume renders readOnly: false, which the API server does not store."""
    wanted = {"volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "c", "readOnly": False}}]}
    live = {"volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "c"}}]}
    assert not drifted(wanted, live)
    assert not drifted({"env": [], "replicas": 0, "name": ""}, {})
    assert drifted({"readOnly": True}, {})


def test_the_status_says_which_image_and_engine_serve() -> None:
    own = example("dspark")["spec"]  # an image of its own, with its releases declared
    desired = desired_of(cr(own, name="qwen3-dspark", namespace="ml"), RenderDefaults())
    serving = deployment(desired.config_hash, replicas=1, ready=1, updated=1)
    status = compute(3, Verdict(True), desired, Observed(serving, []), {}, NOW)
    assert status["speculation"]["image"] == own["runtime"]["image"]
    assert status["speculation"]["engineVersions"] == {"vllmAscend": "0.25.1rc1", "vllm": "0.25.1"}
    assert status["rollout"]["lastGood"]["engineVersions"] == status["speculation"]["engineVersions"]
    stated = EngineVersions(vllm_ascend="0.23.0")  # the default image, as the tenant policy states it
    default = desired_of(cr(example("ngram")["spec"]), RenderDefaults(), default_versions=stated)
    assert (default.image, default.engine_versions) == (RenderDefaults().runtime_image, {"vllmAscend": "0.23.0"})
    assert desired_of(cr(example("ngram")["spec"]), RenderDefaults()).engine_versions is None  # unknown: not said
