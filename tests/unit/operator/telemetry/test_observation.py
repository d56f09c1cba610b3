"""What measured figures write into the status: when, what, and the LowAcceptance signal."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specinfer_operator.api.service import TelemetrySettings
from specinfer_operator.controller.conditions import Desired, Observed, Verdict, compute
from specinfer_operator.measure.window import Counts, Failure, Figures
from specinfer_operator.telemetry.observation import moved, observed, update

T0, T1, LATER = "2026-11-23T10:00:00Z", "2026-11-23T10:00:30Z", "2026-11-23T10:05:00Z"
SETTINGS = TelemetrySettings(min_drafts=100, min_mean_acceptance_length=1.5)


def figures(drafts: int, accepted: int, k: int = 4, pods: int = 2, measured: int = 2) -> Figures:
    per_position = tuple(max(0, accepted - i * drafts) // k for i in range(k))
    return Figures(pods, measured, 300.0, Counts(drafts, drafts * k, accepted, per_position))


def status(**extra: Any) -> dict[str, Any]:
    return {"configHash": "abc", "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}], **extra}


def apply(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The status after a merge patch (speculation is merged, the rest replaced)."""
    out = dict(current)
    for key, value in patch.items():
        out[key] = {**(current.get(key) or {}), **value} if key == "speculation" else value
    return out


def written(current: dict[str, Any], measured: Figures) -> dict[str, Any]:
    change = update(current, measured, SETTINGS, 3, T0, refresh=300)
    assert change is not None
    return apply(current, change.patch)


def test_the_first_figures_are_written_with_their_configuration() -> None:
    change = update(status(), figures(200, 600), SETTINGS, 3, T0, refresh=300)
    assert change is not None
    obs = change.patch["speculation"]["observed"]
    assert obs == {
        "configHash": "abc",
        "windowSeconds": 300,
        "measuredTime": T0,
        "pods": 2,
        "podsMeasured": 2,
        "drafts": 200,
        "draftTokens": 800,
        "acceptedTokens": 600,
        "acceptanceRate": 0.75,
        "meanAcceptanceLength": 4.0,
        "positionAcceptanceRates": [0.75, 0.5, 0.25, 0.0],
        "draftTokensPerDraft": 4.0,
    }
    low = change.patch["conditions"][-1]
    assert (low["type"], low["status"], low["reason"]) == ("LowAcceptance", "False", "AboveThreshold")
    assert change.events == []


def test_steady_figures_are_not_rewritten_until_the_refresh() -> None:
    current = written(status(), figures(200, 600))
    assert update(current, figures(210, 632), SETTINGS, 3, T1, refresh=300) is None  # within tolerance
    assert update(current, figures(200, 600), SETTINGS, 3, LATER, refresh=300) is not None  # refresh due
    assert update(current, figures(200, 300), SETTINGS, 3, T1, refresh=300) is not None  # moved
    assert update(current, figures(200, 600, measured=1), SETTINGS, 3, T1, refresh=300) is not None


def test_nothing_measured_is_not_refreshed() -> None:
    """Pods that never answer (a NetworkPolicy, an engine without metrics) cost one write, not one per refresh."""
    silent = figures(0, 0, measured=0)
    first = update(status(), silent, SETTINGS, 3, T0, refresh=300)
    assert first is not None
    assert first.patch["speculation"]["observed"]["podsMeasured"] == 0
    current = apply(status(), first.patch)
    assert update(current, silent, SETTINGS, 3, LATER, refresh=300) is None


def test_the_k_in_force_and_the_load_per_engine_are_news() -> None:
    """Under a schedule the K drafted follows the batch: a scale event that halves the batch per engine, and the K
    that comes with it, are written at once, not at the next refresh; jitter is not."""
    before = {"configHash": "abc", "pods": 2, "podsMeasured": 2, "draftTokensPerDraft": 2.0, "decodeBatch": 8.0}
    assert not moved(before, {**before, "draftTokensPerDraft": 2.2, "decodeBatch": 9.5})
    assert moved(before, {**before, "draftTokensPerDraft": 3.9})
    assert moved(before, {**before, "decodeBatch": 4.1})
    assert moved(before, {k: v for k, v in before.items() if k != "decodeBatch"})
    half = Figures(2, 2, 300.0, Counts(200, 500, 300, (150, 100, 50, 0)))
    assert observed(half, "abc", T0)["draftTokensPerDraft"] == 2.5  # a schedule's K 2 and K 3 steps, half each


def test_moved_tolerances() -> None:
    base = observed(figures(200, 600), "abc", T0)
    assert not moved(base, {**base, "drafts": 999, "measuredTime": T1})
    assert moved(base, {**base, "meanAcceptanceLength": base["meanAcceptanceLength"] + 0.05})
    assert moved(base, {**base, "positionAcceptanceRates": [0.75, 0.5, 0.25]})
    assert moved(base, {k: v for k, v in base.items() if k != "acceptanceRate"})


def test_low_acceptance_fires_once_with_the_figures_and_clears() -> None:
    current = written(status(), figures(200, 600))
    bad = update(current, figures(400, 80), SETTINGS, 3, T1, refresh=300)
    assert bad is not None
    low = bad.patch["conditions"][-1]
    assert (low["status"], low["reason"]) == ("True", "BelowThreshold")
    assert bad.events == [("Warning", "LowAcceptance", low["message"])]
    assert "mean acceptance length 1.20 is below 1.5 over the last 300 s (400 drafts from 2 pods)" in low["message"]
    assert [c["type"] for c in bad.patch["conditions"]] == ["Ready", "LowAcceptance"]  # the others are kept
    current = apply(current, bad.patch)
    assert update(current, figures(400, 84), SETTINGS, 3, T1, refresh=300) is None  # still low, no news
    good = update(current, figures(400, 1200), SETTINGS, 3, LATER, refresh=300)
    assert good is not None
    assert good.patch["conditions"][-1]["status"] == "False"
    assert good.events == [("Normal", "AcceptanceRecovered", good.patch["conditions"][-1]["message"])]


def test_low_acceptance_needs_evidence() -> None:
    few = update(status(), figures(20, 0), SETTINGS, 3, T0, refresh=300)
    assert few is not None
    assert "conditions" not in few.patch  # 20 drafts are no evidence: not judged
    assert few.events == []


def test_figures_that_become_evidence_are_written_though_steady() -> None:
    """Learning takes a promoted draft's figures once they hold minDrafts: a window that grows past it with
    steady ratios is written then, not one refresh later (LowAcceptance, judged on the configuration before,
    does not turn)."""
    judged = written(status(), figures(200, 600))["conditions"]
    current = written(status(configHash="new", conditions=judged), figures(60, 180))
    assert update(current, figures(90, 270), SETTINGS, 3, T1, refresh=300) is None
    change = update(current, figures(100, 300), SETTINGS, 3, T1, refresh=300)
    assert change is not None
    assert change.patch["speculation"]["observed"]["drafts"] == 100


def test_figures_of_another_configuration_are_replaced_not_compared() -> None:
    old = observed(figures(200, 600), "old", T0)
    change = update(status(speculation={"observed": old}), figures(200, 600), SETTINGS, 3, T1, refresh=300)
    assert change is not None
    assert change.patch["speculation"]["observed"]["configHash"] == "abc"
    assert update({"conditions": []}, figures(200, 600), SETTINGS, 3, T0, refresh=300) is None  # nothing rolled out


DESIRED = Desired("abc", 2, "ngram", 4, [], 1, "huawei.com/Ascend910", "http://x", "app=x")
DEPLOYMENT = {
    "metadata": {"generation": 1},
    "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"specinfer.io/config-hash": "abc"}}}},
    "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2},
}


def test_reconcile_keeps_the_measured_figures_of_its_configuration_only() -> None:
    low = {"type": "LowAcceptance", "status": "True", "reason": "BelowThreshold", "message": "m"}
    previous = status(speculation={"observed": observed(figures(200, 80), "abc", T0)}, conditions=[low])
    kept = compute(3, Verdict(True), DESIRED, Observed(DEPLOYMENT, []), previous, T1)
    assert kept["speculation"]["observed"] == previous["speculation"]["observed"]
    assert low in kept["conditions"]
    moved_on = compute(4, Verdict(True), replace(DESIRED, config_hash="new"), Observed(DEPLOYMENT, []), previous, T1)
    assert "observed" not in moved_on["speculation"]
    assert all(c["type"] != "LowAcceptance" for c in moved_on["conditions"])
    refused = compute(4, Verdict(False, "InvalidSpec", "bad"), None, Observed(DEPLOYMENT, []), previous, T1)
    assert refused["speculation"]["observed"] == previous["speculation"]["observed"]  # the old pods still serve
    assert low in refused["conditions"]


def test_ratios_that_are_gone_are_removed_by_the_merge_patch() -> None:
    current = written(status(), figures(200, 600))
    silent = update(current, Figures(2, 0, 0.0, Counts()), SETTINGS, 3, T1, refresh=300)
    assert silent is not None
    obs = silent.patch["speculation"]["observed"]
    assert obs["meanAcceptanceLength"] is None  # null deletes the key; left out, it would stay as it was
    assert (obs["podsMeasured"], obs["drafts"]) == (0, 0)


def failing(measured: Figures, *pods: tuple[str, str]) -> Figures:
    return replace(measured, failures=tuple((pod, Failure(reason, "timeout")) for pod, reason in pods))


def test_a_pod_that_fails_is_named_with_why_once() -> None:
    before = written(status(), figures(200, 600))
    slow = failing(figures(200, 600, measured=1), ("demo-b", "http://127.100.0.6:8000/metrics took longer than 2 s"))
    change = update(before, slow, SETTINGS, 3, T1, refresh=300)
    assert change is not None
    assert change.patch["speculation"]["observed"]["scrapeFailures"] == [
        {"pod": "demo-b", "result": "timeout", "reason": "http://127.100.0.6:8000/metrics took longer than 2 s"}
    ]
    assert [(kind, reason) for kind, reason, _ in change.events] == [("Warning", "ScrapeFailed")]
    assert "pod demo-b: http://127.100.0.6:8000/metrics took longer than 2 s" in change.events[0][2]
    # The same failure next round: nothing new to write or tell.
    assert update(apply(before, change.patch), slow, SETTINGS, 3, T1, refresh=300) is None
    # Recovered: the failures go from the status, without an event.
    recovered = update(apply(before, change.patch), figures(200, 600), SETTINGS, 3, T1, refresh=300)
    assert recovered is not None
    assert recovered.patch["speculation"]["observed"]["scrapeFailures"] is None
    assert recovered.events == []


def test_many_failing_pods_make_one_event() -> None:
    many = failing(figures(200, 600, pods=20, measured=0), *((f"p{i:02}", "refused") for i in range(20)))
    change = update(status(), many, SETTINGS, 3, T0, refresh=300)
    assert change is not None
    assert len(change.patch["speculation"]["observed"]["scrapeFailures"]) == 16
    assert [reason for _, reason, _ in change.events] == ["ScrapeFailed"]
    assert change.events[0][2].count("pod p") == 3
    assert "and 13 more" in change.events[0][2]  # of the 16 named in the status
