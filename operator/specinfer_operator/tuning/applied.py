"""The K (or schedule) Auto tuning applied: how a tuning decision reaches the pods, both ends of the path in
one module.

The path, from the telemetry loop to the reconcile loop:

1. telemetry/loop.py windows a resource's figures; tuning/auto.py decides that K should change, or that
   the best K differs by batch size and a schedule should serve.
2. `apply` writes that setting on the resource, in the annotation `tuning.specinfer.io/effective`, as
   `{"family": ..., "numSpeculativeTokens": K}`, with `"numSpeculativeTokensPerBatchSize": [[min, max, K],
   ...]` for a schedule and `"adaptivity": "AdaptiveVerification"` (or `DynamicVerification`) for an
   engine-side mechanism (tuning/adaptivity.py). Auto never edits the spec: GitOps keeps it as written.
3. The annotation is outside kopf's storage prefix (`specinfer.io/`), so the write is an update of the
   resource: manager/handlers.py's on_spec runs controller/reconcile.py.
4. Reconcile (and refresh) call `resolve`, which gives the resource to render with that setting, and the rollout
   that follows (controller/arrangement.py, through a canary when the spec asks for one) decides whether
   it stays.

The annotation counts only in mode Auto, for the configuration family it was measured on (a spec changed
in anything but K makes it stale), within the tuning bounds, and when the spec with that K passes every
rule; otherwise the spec's K is rendered and the reason is a warning. Setting the annotation by hand pins
K (or a schedule) the same way.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specinfer_operator.api.labels import TUNED_K_ANNOTATION
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.platform.kube import Kube
from specinfer_operator.tuning.adaptivity import ENGINE_SIDE, offered, switched_on
from specinfer_runtime.k_by_batch import MAX_SCHEDULE_RANGES
from specinfer_runtime.speculative import SpeculativeConfig
from specinfer_runtime.tokens import SCHEDULE_FIELD
from specinfer_runtime.validation import Report

MAX_ANNOTATION = 1024  # bytes: anything longer was not written by the operator


@dataclass(frozen=True)
class Effective:
    """The resource to render, the K the spec asked for, and whether the annotation set K (even to the
    spec's own value: a canary of it is then tuning's, reverted when slower, not the spec failing); the
    family of the spec as written, which tuning measures, and the engine-side mechanism Auto may try."""

    resource: SpeculativeInference
    requested_k: int
    family: str
    warning: str | None = None
    tuned: bool = False
    candidate: str = ""


Schedule = tuple[tuple[int, int, int], ...]  # (min batch, max batch, K), inclusive ranges from batch 1


@dataclass(frozen=True)
class Setting:
    """What Auto applies: K, and a schedule (K by batch size) when the best K differs by batch band; K is
    then the schedule's largest, as vLLM requires."""

    k: int
    schedule: Schedule = ()
    adaptivity: str = ""  # an engine-side mechanism (tuning/adaptivity.py) with K as its most

    def describe(self) -> str:
        if self.adaptivity:
            return f"{self.adaptivity} up to K={self.k}"
        if not self.schedule:
            return f"K={self.k}"
        return "K by batch size " + ", ".join(f"{a}-{b}: K={k}" for a, b, k in self.schedule)

    def ranges(self) -> list[dict[str, int]]:
        return as_ranges(self.schedule)


def as_ranges(schedule: Schedule) -> list[dict[str, int]]:
    """A schedule as spec.speculative.numSpeculativeTokensPerBatchSize (and the status) spell it."""
    return [{"minBatchSize": a, "maxBatchSize": b, "numSpeculativeTokens": k} for a, b, k in schedule]


def from_ranges(ranges: list[dict[str, Any]] | None) -> Schedule:
    """The schedule of a status's (or spec's) ranges."""
    return tuple((int(r["minBatchSize"]), int(r["maxBatchSize"]), int(r["numSpeculativeTokens"])) for r in ranges or [])


def schedule_of(speculative: SpeculativeConfig) -> Schedule:
    """The schedule a configuration renders (or ())."""
    ranges = speculative.num_speculative_tokens_per_batch_size or []
    return tuple((r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in ranges)


def largest(schedule: Schedule) -> int:
    """The K an engine serving this schedule is started with: its largest, as vLLM requires."""
    return max(k for _, _, k in schedule)


def in_force(k: int, schedule: Schedule, batch: float) -> int:
    """The K drafted at this batch size: its range's under a schedule, else K."""
    n = max(1, round(batch))
    return next((kk for a, b, kk in schedule if a <= n <= b), k)


def annotation(family: str, setting: Setting) -> str:
    value: dict[str, Any] = {"family": family, "numSpeculativeTokens": setting.k}
    if setting.schedule:
        value["numSpeculativeTokensPerBatchSize"] = [list(r) for r in setting.schedule]
    if setting.adaptivity:
        value["adaptivity"] = setting.adaptivity
    return json.dumps(value, separators=(",", ":"))


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _schedule(value: Any) -> Schedule | None:
    """The annotation's schedule: at most MAX_SCHEDULE_RANGES [min, max, K] triples of integers; None when
    it is not that (the API's rules on the ranges themselves are checked with the whole spec)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not 0 < len(value) <= MAX_SCHEDULE_RANGES:
        return None
    if not all(isinstance(r, list) and len(r) == 3 and all(map(_integer, r)) for r in value):
        return None
    return tuple((r[0], r[1], r[2]) for r in value)


def _tuned(body: dict[str, Any], family: str) -> tuple[Setting | None, str | None]:
    """What the annotation sets for this family, or why it sets nothing (None: it is absent or stale)."""
    raw = ((body.get("metadata") or {}).get("annotations") or {}).get(TUNED_K_ANNOTATION)
    if raw is None:
        return None, None
    if len(raw) > MAX_ANNOTATION:
        return None, f"{TUNED_K_ANNOTATION} is longer than {MAX_ANNOTATION} bytes: ignored"
    try:
        value = json.loads(raw)
    except ValueError:
        return None, f"{TUNED_K_ANNOTATION} is not JSON: ignored"
    value = value if isinstance(value, dict) else {}
    k = value.get("numSpeculativeTokens")
    schedule = _schedule(value.get("numSpeculativeTokensPerBatchSize"))
    adaptivity = value.get("adaptivity", "")
    if not isinstance(k, int) or isinstance(k, bool) or schedule is None or adaptivity not in ("", *ENGINE_SIDE):
        shape = (
            '{"family": ..., "numSpeculativeTokens": K, "numSpeculativeTokensPerBatchSize": [[min, max, K], ...], '
            f'"adaptivity": {" or ".join(ENGINE_SIDE)}}}'
        )
        return None, f"{TUNED_K_ANNOTATION} needs {shape} (schedule and adaptivity optional): ignored"
    if value.get("family") != family:
        return None, None  # measured on another configuration: the spec changed since
    return Setting(k, schedule, adaptivity), None


def resolve(
    body: dict[str, Any],
    report: Report[SpeculativeInference],
    family: Callable[[SpeculativeInference], str],
    check: Callable[[dict[str, Any]], Report[SpeculativeInference]],
) -> Effective | None:
    """What to render for a checked resource (None when the spec itself is invalid)."""
    cr = report.value
    if cr is None:
        return None
    requested = cr.spec.engine().effective_k()
    tuning = cr.spec.speculative.tuning
    measured = family(cr)
    if tuning is None or tuning.mode != "Auto":
        return Effective(cr, requested, measured)
    candidates = _candidates(body, cr, check)
    candidate = candidates[0] if candidates else ""
    setting, problem = _tuned(body, measured)
    if setting is None:
        return Effective(cr, requested, measured, problem, candidate=candidate)
    if setting == Setting(requested):
        return Effective(cr, requested, measured, tuned=True, candidate=candidate)
    top = tuning.max_k or requested
    outside = [k for k in (setting.k, *(k for _, _, k in setting.schedule if k)) if not tuning.min_k <= k <= top]
    if outside:
        why = f"{TUNED_K_ANNOTATION} sets K={outside[0]}, outside minK {tuning.min_k} to maxK {top}: ignored"
        return Effective(cr, requested, measured, why, candidate=candidate)
    if setting.adaptivity and setting.adaptivity not in candidates:
        why = (
            f"{TUNED_K_ANNOTATION} sets {setting.adaptivity}, which Auto may not try on this resource "
            f"({_no_trial(cr)}): ignored"
        )
        return Effective(cr, requested, measured, why, candidate=candidate)
    checked = check(_with(body, setting))
    if checked.value is None:
        why = "; ".join(str(p) for p in checked.errors)
        refused = f"{TUNED_K_ANNOTATION} sets {setting.describe()}, which the spec does not allow ({why}): ignored"
        return Effective(cr, requested, measured, refused, candidate=candidate)
    return Effective(_in_auto(checked.value), requested, measured, tuned=True, candidate=candidate)


def _with(body: dict[str, Any], setting: Setting) -> dict[str, Any]:
    """The resource body with `setting` in place of the spec's K."""
    tuned = copy.deepcopy(body)
    tuned["spec"]["speculative"]["numSpeculativeTokens"] = setting.k
    if setting.schedule:
        # Checked as mode Recommend would render it: the rule that refuses a written schedule under Auto
        # guards the spec as written, not the schedule Auto applies.
        tuned["spec"]["speculative"][SCHEDULE_FIELD] = setting.ranges()
        tuned["spec"]["speculative"]["tuning"]["mode"] = "Recommend"
    return switched_on(tuned, setting.adaptivity) if setting.adaptivity else tuned


def _no_trial(cr: SpeculativeInference) -> str:
    """Why a resource in Auto has no engine-side mechanism to try, when its settings are the reason."""
    tuning = cr.spec.speculative.tuning
    if tuning is not None and not tuning.try_engine_adaptivity:
        return "tuning.tryEngineAdaptivity is false"
    return "its method, image or graph mode does not run it"


def _candidates(
    body: dict[str, Any], cr: SpeculativeInference, check: Callable[[dict[str, Any]], Report[SpeculativeInference]]
) -> tuple[str, ...]:
    """The engine-side mechanisms Auto may try on this resource: its method has them, the spec passes every
    rule with them on (image releases, graph mode), and tuning.tryEngineAdaptivity allows it (Auto's canary
    judges it)."""
    tuning = cr.spec.speculative.tuning
    if tuning is None or not tuning.try_engine_adaptivity:
        return ()
    return tuple(m for m in offered(cr.spec.speculative) if check(switched_on(body, m)).value is not None)


def _in_auto(cr: SpeculativeInference) -> SpeculativeInference:
    """`cr` with tuning mode Auto (it was checked as Recommend)."""
    speculative = cr.spec.speculative
    assert speculative.tuning is not None
    tuning = speculative.tuning.model_copy(update={"mode": "Auto"})
    spec = cr.spec.model_copy(update={"speculative": speculative.model_copy(update={"tuning": tuning})})
    return cr.model_copy(update={"spec": spec})


def apply(kube: Kube, namespace: str, name: str, family: str, setting: Setting) -> None:
    """Hand Auto's setting to the reconcile loop: the annotation's update reconciles the resource (see above)."""
    kube.patch_metadata(namespace, name, {"annotations": {TUNED_K_ANNOTATION: annotation(family, setting)}})
