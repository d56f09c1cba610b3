"""Engine-side adaptivity as Auto's candidate (pure): which mechanism a resource may try, how the annotation
renders it, when Auto tries it, how its canary is judged (minGainPercent faster, or reverted), and what
the status says serves."""

from __future__ import annotations

from typing import Any

from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.controller import verdict
from specinfer_operator.controller.conditions import NOT_FASTER, Observed, Verdict, compute
from specinfer_operator.controller.context import desired_of
from specinfer_operator.render.admission import check
from specinfer_operator.render.children import RenderDefaults, family_hash
from specinfer_operator.tuning import applied, auto
from specinfer_operator.tuning.adaptivity import ADAPTIVE, DYNAMIC, STATIC_K
from specinfer_operator.tuning.applied import Setting
from tests.support.builders import example, resource
from tests.support.statuses import NOW, deployment
from tests.unit.operator.controller.test_verdict import SETTINGS, figures, repeated
from tests.unit.operator.tuning.test_auto import AUTO, LATER, apply, resolve, status, two_profiles
from tests.unit.operator.tuning.test_auto import figures as window

ENGINES = {"old": ("0.25.1rc1", "0.25.1"), "dynamic": ("0.27.1rc1", "0.27.1"), "adaptive": ("0.28.0rc1", "0.28.0")}


def dspark(engines: str = "adaptive", adaptivity: str | None = None, **tuning: Any) -> dict[str, Any]:
    """examples/dspark.yaml in Auto on an image of these engine releases, annotated with `adaptivity`."""
    spec = example("dspark")["spec"]
    spec["speculative"]["tuning"] = {"mode": "Auto", **tuning}
    spec["rollout"] = {"strategy": "Canary"}
    spec["replicas"] = 2
    vllm_ascend, vllm = ENGINES[engines]
    spec["runtime"]["engineVersions"] = {"vllmAscend": vllm_ascend, "vllm": vllm}
    out = resource(spec, name="d", namespace="ml", uid="u")
    if adaptivity is not None:
        family = family_hash(check(out).value, RenderDefaults())  # type: ignore[arg-type]
        setting = Setting(7, (), adaptivity)
        out["metadata"]["annotations"] = {TUNED_K_ANNOTATION: applied.annotation(family, setting)}
    return out


def test_the_candidate_is_the_first_mechanism_the_method_image_and_settings_allow() -> None:
    assert resolve(dspark("adaptive")).candidate == ADAPTIVE
    assert resolve(dspark("dynamic")).candidate == DYNAMIC  # adaptive verification needs vLLM-Ascend 0.28
    assert resolve(dspark("old")).candidate == ""  # neither runs on 0.25
    assert resolve(dspark(tryEngineAdaptivity=False)).candidate == ""
    ngram = example("ngram")
    ngram["spec"]["speculative"]["tuning"] = {"mode": "Auto"}
    ngram["spec"]["rollout"] = {"strategy": "Canary"}
    assert resolve(ngram).candidate == ""  # ngram has no engine-side adaptivity
    written = dspark("adaptive")
    written["spec"]["speculative"]["dspark"] = {"adaptiveVerification": True}
    assert resolve(written).candidate == ""  # the spec runs one already


def test_an_annotated_mechanism_renders_in_another_family_and_tuning_keeps_measuring_the_spec() -> None:
    chosen = resolve(dspark("adaptive", adaptivity=ADAPTIVE))
    assert (chosen.warning, chosen.tuned) == (None, True)
    assert chosen.resource.spec.speculative.dspark is not None
    assert chosen.resource.spec.speculative.dspark.adaptive_verification
    desired = desired_of(chosen.resource, RenderDefaults(), chosen=chosen)
    plain = resolve(dspark("adaptive"))
    untuned = desired_of(plain.resource, RenderDefaults(), chosen=plain)
    assert (desired.adaptivity, untuned.adaptivity) == (ADAPTIVE, STATIC_K)
    assert desired.family != untuned.family  # its figures are not profiles of K
    assert desired.tuning_family == untuned.tuning_family == untuned.family
    dynamic = resolve(dspark("dynamic", adaptivity=DYNAMIC)).resource.spec.speculative.dynamic_verification
    assert dynamic is not None
    assert dynamic.initial_verify_budget_per_request == 5


def test_a_mechanism_the_resource_may_not_try_is_ignored_with_the_reason() -> None:
    old = resolve(dspark("dynamic", adaptivity=ADAPTIVE))
    assert "sets AdaptiveVerification, which Auto may not try on this resource" in (old.warning or "")
    assert (
        old.resource.spec.speculative.dspark is None or not old.resource.spec.speculative.dspark.adaptive_verification
    )
    off = resolve(dspark(adaptivity=ADAPTIVE, tryEngineAdaptivity=False))
    assert "tuning.tryEngineAdaptivity is false" in (off.warning or "")
    odd = dspark()
    odd["metadata"]["annotations"] = {
        TUNED_K_ANNOTATION: '{"family": "x", "numSpeculativeTokens": 7, "adaptivity": "Magic"}'
    }
    assert "needs" in (resolve(odd).warning or "")


SETTLED = AUTO.model_copy(update={"min_k": 2})  # K 2 and 4 measured: nothing left to explore


def settled() -> dict[str, Any]:
    """K=2 recommended and serving, with an engine-side candidate offered; the recommendation keeps K=2."""
    current = two_profiles()
    current["tuning"].update(mode="Auto", effectiveNumSpeculativeTokens=2, adaptivityCandidate=ADAPTIVE)
    kept = auto.update(current, SETTLED, [], NOW, 256)
    assert kept is not None
    assert kept.patch["tuning"]["recommendation"]["summary"] == "keep K=2"
    return apply(current, kept)


def test_once_k_has_settled_auto_tries_the_engines_own_adaptivity() -> None:
    found = auto.update(settled(), SETTLED, [], LATER, 256)
    assert found is not None
    assert found.apply == Setting(2, (), ADAPTIVE)
    change = found.patch["tuning"]["lastChange"]
    assert (change["toK"], change["toAdaptivity"], change["result"]) == (2, ADAPTIVE, "Trying")
    assert "at least minGainPercent 5% faster" in change["message"]
    # No recommendation yet, or one still asking to measure: K has not settled.
    fresh = status()
    fresh["tuning"]["adaptivityCandidate"] = ADAPTIVE
    assert auto.update(fresh, AUTO, [], LATER, 256) is None
    # A K still to move comes first.
    moving = two_profiles()
    moving["tuning"].update(mode="Auto", adaptivityCandidate=ADAPTIVE)
    del moving["tuning"]["lastChange"]
    first = auto.update(moving, AUTO, [], LATER, 256)
    assert first is not None
    assert first.apply == Setting(2)


def test_the_trial_is_promoted_when_it_serves_and_auto_then_holds_without_taking_profiles() -> None:
    trying = apply(settled(), auto.update(settled(), SETTLED, [], LATER, 256))  # type: ignore[arg-type]
    trying["tuning"]["tunedAdaptivity"] = ADAPTIVE  # what reconcile writes once it serves on every pod
    done = auto.update(trying, SETTLED, [], LATER, 256)
    assert done is not None
    assert done.patch["tuning"]["lastChange"]["result"] == "Promoted"
    serving = apply(trying, done)
    later = "2026-01-02T00:00:00Z"
    measured: list[auto.Measured] = [(2, (), window(2, (500, 100), 1000, 2.0))]
    assert auto.update(serving, SETTLED, measured, later, 256) is None  # no profile, no move: the engine chooses


def test_a_trial_not_fast_enough_is_reverted_and_not_tried_again_soon() -> None:
    trying = apply(settled(), auto.update(settled(), SETTLED, [], LATER, 256))  # type: ignore[arg-type]
    trying["tuning"]["tunedNumSpeculativeTokens"] = 2
    trying["rollout"] = {"rolledBack": {"reason": NOT_FASTER, "message": "canary +1.0%"}}
    back = auto.update(trying, SETTLED, [], LATER, 256)
    assert back is not None
    assert back.apply == Setting(2)  # the static K is put back
    ended = back.patch["tuning"]["lastChange"]
    assert (ended["result"], ended["toAdaptivity"]) == ("Reverted", ADAPTIVE)
    assert "GainBelowMinimum" in ended["message"]
    reverted = apply(trying, back)
    del reverted["rollout"]
    assert auto.update(reverted, SETTLED, [], "2026-01-01T01:20:00Z", 256) is None  # within 4 x minIntervalSeconds
    again = auto.update(reverted, SETTLED, [], "2026-01-01T02:00:00Z", 256)
    assert again is not None
    assert again.apply == Setting(2, (), ADAPTIVE)


def test_an_engine_side_canary_must_be_min_gain_percent_faster() -> None:
    stable = figures("good", 4.0, 8.0)  # 500 tokens/s per request
    barely = [figures("canary", 3.0, 5.85, time=f"t{i}") for i in range(3)]  # 513/s: +2.6%
    plain = repeated(barely, stable)[-1]
    assert plain.action == "promote"  # a K change within maxSpeedDropPercent is kept
    kept: tuple[dict[str, Any], ...] = ()
    for measured in barely:
        record = {"configHash": "canary", "stableConfigHash": "good", "observed": measured, "comparisons": list(kept)}
        said = verdict.judge(record, stable, 1, True, SETTINGS, 1.5, None, min_gain=5)
        kept = said.comparisons
    assert (said.action, said.reason) == ("rollback", NOT_FASTER)
    assert "less than minGainPercent 5% faster" in said.message
    clear = {
        "configHash": "canary",
        "stableConfigHash": "good",
        "observed": barely[-1],
        "comparisons": [{**c, "ratio": 1.3} for c in kept],
    }
    assert verdict.judge(clear, stable, 1, True, SETTINGS, 1.5, None, min_gain=5).action == "promote"


def test_the_status_says_which_mechanism_serves() -> None:
    plain = resolve(dspark("adaptive"))
    good = desired_of(plain.resource, RenderDefaults(), chosen=plain)
    first = compute(3, Verdict(True), good, Observed(deployment(good.config_hash), []), {}, NOW)
    assert first["speculation"]["adaptivity"] == STATIC_K
    assert first["tuning"]["adaptivityCandidate"] == ADAPTIVE
    assert "tunedAdaptivity" not in first["tuning"]
    tried = resolve(dspark("adaptive", adaptivity=ADAPTIVE))
    desired = desired_of(tried.resource, RenderDefaults(), chosen=tried)
    serving = compute(3, Verdict(True), desired, Observed(deployment(desired.config_hash), []), first, LATER)
    assert serving["speculation"]["adaptivity"] == ADAPTIVE
    assert serving["tuning"]["tunedAdaptivity"] == ADAPTIVE
    assert serving["tuning"]["family"] == first["tuning"]["family"]  # the evidence is kept
    assert serving["rollout"]["lastGood"]["adaptivity"] == ADAPTIVE
