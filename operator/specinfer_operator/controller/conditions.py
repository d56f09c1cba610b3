"""The status of a SpeculativeInference, computed from what the cluster shows (pure: no I/O).

Conditions follow kstatus conventions so `kubectl wait --for=condition=Ready`, Argo CD and Flux read
them: Ready (serving the current spec), Progressing (a rollout is under way), Degraded (something needs
a human), ConfigValid (the spec can be rolled out). The Ready reason doubles as the STATUS column.
Reconciling and Stalled mirror Progressing and Degraded under the names kstatus (Flux, `kubectl` tooling
built on cli-utils) looks for: without them kstatus calls a resource Current as soon as its generation
is observed, before any pod serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from specinfer_operator.api.autoscaling import AutoscalingSettings, status_of
from specinfer_operator.api.engine import ENGINE_RULE
from specinfer_operator.api.schema_limits import clamp
from specinfer_operator.controller.health import Health, health
from specinfer_operator.render import workload
from specinfer_operator.tuning import auto
from specinfer_operator.tuning.adaptivity import ENGINE_SIDE
from specinfer_operator.tuning.applied import Schedule, as_ranges, from_ranges
from specinfer_runtime.tokens import SCHEDULE_FIELD

# Written by the telemetry loop (telemetry/observation.py); reconcile carries it while the figures it judged stay.
# ConfigValid's reasons when the spec may not roll out.
FORBIDDEN_BY_POLICY = "ForbiddenByPolicy"  # the tenant policy refuses the spec
ENGINE_TOO_OLD = "EngineTooOld"  # its features need later vLLM or vllm-ascend releases than its image runs
GROUPS_MISSING = "LeaderWorkerSetMissing"  # an engine over several nodes, and no LeaderWorkerSet to run it
# The API server refused a child; handlers retry such a resource on a timer, as the cause may be outside it.
APPLY_REJECTED = "ApplyRejected"
NAME_CONFLICT = "NameConflict"  # a child's name is held by an object this resource does not own
REFUSED = (APPLY_REJECTED, NAME_CONFLICT)
INVALID_SPEC = "InvalidSpec"
INSUFFICIENT_NPUS = "InsufficientNPUCapacity"
# Every ConfigValid reason and when it is given: the table of docs/operator.md is generated from it (make docs),
# and a test holds that the reconcile and refresh code write no other.
CONFIG_VALID = {
    "Valid": "the spec is valid; it rolls out",
    "ValidWithWarnings": "valid, but probably not what was meant: the warnings are in the message and in Events",
    INVALID_SPEC: "a rule of the CRD or of the operator refuses the spec: the message names the field and the fix",
    FORBIDDEN_BY_POLICY: "the tenant policy (SpeculativeInferencePolicy) refuses what the spec asks of its pods",
    ENGINE_TOO_OLD: "the spec needs a later vLLM or vllm-ascend release than its runtime image runs",
    INSUFFICIENT_NPUS: "a pod would need more NPUs than any node has",
    GROUPS_MISSING: "an engine over several nodes, and no LeaderWorkerSet in the cluster to run it",
    APPLY_REJECTED: "the API server or an admission policy refused a child: its message; retried every 30 s",
    NAME_CONFLICT: "an object of a child's name belongs to someone else: left alone, named; retried every 30 s",
}
# The ConfigValid reason when these rules alone refuse the spec (any other mix is InvalidSpec).
RULE_REASONS = {frozenset({"policy"}): FORBIDDEN_BY_POLICY, frozenset({ENGINE_RULE}): ENGINE_TOO_OLD}
MEASURED_CONDITION = "LowAcceptance"

# kstatus's abnormal-true conditions, each the mirror of one of ours; events report only the originals.
KSTATUS_MIRRORS = {"Reconciling": "Progressing", "Stalled": "Degraded"}


@dataclass(frozen=True)
class Desired:
    """What the current spec asks for, when it is valid."""

    config_hash: str
    replicas: int
    method: str
    num_speculative_tokens: int
    capture_sizes: list[int]
    npus_per_pod: int
    npu_resource: str
    endpoint: str
    selector: str
    config_map: str = ""  # the engine ConfigMap of this configuration
    family: str = ""  # the configuration but for K (children.family_hash)
    requested_k: int = 0  # K as the spec says; num_speculative_tokens is K as rendered
    tuning: str = "Off"  # spec.speculative.tuning.mode
    tuned: bool = False  # K comes from Auto tuning (tuning/applied.py), not from the spec
    group_size: int = 1  # pods per replica: more than one when an engine spans nodes (a LeaderWorkerSet group)
    image: str = ""  # the runtime image of this configuration
    engine_versions: dict[str, str] | None = None  # its engine releases, as declared or as the policy states them
    schedule: Schedule = ()  # K by batch size, when one is rendered
    adaptivity: str = ""  # what decides the drafts per request (tuning/adaptivity.py)
    tuning_family: str = ""  # the family of the spec as written, which tuning measures (Auto may render more)
    edit: str = ""  # the spec but for what scale events write (children.edit_hash)
    autoscaling: AutoscalingSettings | None = None  # spec.autoscaling
    candidate: str = ""  # the engine-side mechanism Auto may try (status.tuning.adaptivityCandidate)
    requests: dict[str, str] = field(default_factory=dict)  # of each pod's engine container, from its node
    draft: str = ""  # with spec.learning: the draft generation it serves (spec, gen-N; learning/draft.py)

    def unit(self) -> str:
        """What a replica is, in status messages."""
        return "groups" if self.group_size > 1 else "pods"


ROLLED_BACK = "RolledBack"
SLOWER = "SpeedBelowStable"  # the verdict on a canary whose requests decoded slower at comparable load
NOT_FASTER = "GainBelowMinimum"  # on a canary of an engine-side mechanism Auto tries: not minGainPercent faster
CANARY, PROMOTING = "Canary", "Promoting"  # phases of a canary (canary.py), and the Ready reasons then


@dataclass(frozen=True)
class Verdict:
    """Whether the spec may be rolled out, and what to tell the user either way."""

    valid: bool
    reason: str = "Valid"
    message: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Observed:
    deployment: dict[str, Any] | None  # the workload: a Deployment or a LeaderWorkerSet
    pods: list[dict[str, Any]]
    canary: dict[str, Any] | None = None  # the canary's workload, while there is one


def condition(
    kind: str, status: bool, reason: str, message: str, generation: int, previous: list[dict[str, Any]], now: str
) -> dict[str, Any]:
    """A condition whose lastTransitionTime only moves when its status does."""
    value = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == kind), {})
    since = before.get("lastTransitionTime") if before.get("status") == value else now
    return {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since or now,
    }


def compute(
    generation: int,
    verdict: Verdict,
    desired: Desired | None,
    observed: Observed,
    previous: dict[str, Any],
    now: str,
    rollback: dict[str, Any] | None = None,
    canary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole status, within the CRD's limits (status_limits).

    With an invalid spec, it keeps describing what still serves; with `rollback` (the
    spec's configuration failed and was rolled back), it describes the last good one, which serves; with
    `canary` (status.rollout.canary, canary.py), the last good one on the stable pods and the canary."""
    before = previous.get("conditions") or []
    status: dict[str, Any] = {"observedGeneration": generation}
    counts = [workload.counts(d, observed.pods) for d in (observed.deployment, observed.canary)]
    status["replicas"] = sum(c.replicas for c in counts)
    status["readyReplicas"] = sum(c.ready for c in counts)
    in_canary = canary is not None and canary["phase"] == CANARY
    status["updatedReplicas"] = counts[1 if in_canary else 0].updated

    config_message = verdict.message or "; ".join(verdict.warnings) or "the spec is valid"
    config = condition("ConfigValid", verdict.valid, verdict.reason, config_message, generation, before, now)
    if not verdict.valid or desired is None:
        for key in (
            "speculation",
            "endpoint",
            "configHash",
            "selector",
            "rollout",
            "tuning",
            "autoscaling",
            "learning",
        ):
            if key in previous:
                status[key] = previous[key]
        want = int(((observed.deployment or {}).get("spec") or {}).get("replicas") or 0)
        status["ready"] = f"{status['readyReplicas']}/{want}"
        serving = "the last valid configuration keeps serving" if observed.deployment else "nothing was rolled out"
        message = f"{verdict.message}; {serving}"
        status["conditions"] = with_mirrors(
            [
                condition("Ready", False, "InvalidConfig", message, generation, before, now),
                condition("Progressing", False, "InvalidConfig", message, generation, before, now),
                condition("Degraded", True, "InvalidConfig", message, generation, before, now),
                config,
            ],
            generation,
            before,
            now,
        ) + measured_conditions(before)
        return clamp(status)

    good = (previous.get("rollout") or {}).get("lastGood")
    replicas = desired.replicas
    # Auto tuning's K measured slower on its canary: the K before serves, as it should; nothing is degraded.
    asked = desired  # what the spec (and Auto tuning) asks for, before the status turns to what serves
    reverted = rollback is not None and desired.tuned and rollback["reason"] in (SLOWER, NOT_FASTER)
    if in_canary and canary is not None and good is not None:
        desired = replace(serving_last_good(desired, good), replicas=int(canary["stableReplicas"]))
    elif rollback is not None and good is not None:
        desired = serving_last_good(desired, good)  # the status describes what serves: the last good configuration
    state = health(desired, observed)
    if state.rolled_out and canary is not None and not in_canary:
        canary = None  # promoted: the new configuration serves on every replica
    status["ready"] = f"{status['readyReplicas']}/{replicas}"
    rollout = {"lastGood": last_good(good, desired, state, now), "rolledBack": rollback, "canary": canary}
    if any(rollout.values()):
        status["rollout"] = {k: v for k, v in rollout.items() if v is not None}
    measured = (previous.get("speculation") or {}).get("observed")
    if measured is not None and measured.get("configHash") != desired.config_hash:
        measured = None  # figures of the previous configuration: the new one has not been measured yet
    status["speculation"] = {
        "method": desired.method,
        "numSpeculativeTokens": desired.num_speculative_tokens,
        **_schedule(desired),
        **({"captureSizes": desired.capture_sizes} if desired.capture_sizes else {}),
        **({"adaptivity": desired.adaptivity} if desired.adaptivity else {}),
        **_draft(desired),
        **_engine(desired),
        **({"observed": measured} if measured is not None else {}),
    }
    if desired.autoscaling is not None:
        status["autoscaling"] = status_of(desired.autoscaling, measured)
    if desired.draft and "learning" in previous:  # the learning loop's (learning/loop.py); gone with spec.learning
        status["learning"] = previous["learning"]
    status["endpoint"] = desired.endpoint
    status["configHash"] = desired.config_hash
    status["selector"] = desired.selector
    tuned = asked.num_speculative_tokens if asked.tuned else None
    # An engine-side mechanism serving in a configuration other than the family tuning measures: Auto's.
    kept = desired.adaptivity in ENGINE_SIDE and desired.family != asked.tuning_family
    tuning = auto.carry(
        previous.get("tuning"),
        desired.tuning,
        asked.tuning_family,
        desired.requested_k,
        desired.num_speculative_tokens,
        tuned,
        desired.schedule,
        desired.adaptivity if kept else "",
        asked.candidate,
    )
    if tuning is not None:
        status["tuning"] = tuning
    progressing = not state.rolled_out and state.reason != "ProgressDeadlineExceeded"
    if reverted and rollback is not None:
        progress_reason, progress_message = "TuningReverted", f"K reverted: {rollback['message']}"
    elif rollback is not None and good is not None:
        state = rolled_back(state, desired, rollback)
        progress_reason = ROLLED_BACK if state.rolled_out else "RollingBack"
        progress_message = state.message
    elif canary is not None and not state.degraded:
        state = Health(False, False, canary["phase"], canary_message(canary, desired, observed))
        progressing, progress_reason, progress_message = True, state.reason, state.message
    elif state.rolled_out:
        progress_reason, progress_message = "RolloutComplete", "all pods run the current configuration"
    elif progressing:
        progress_reason = "RolloutInProgress"
        progress_message = (
            f"rolling out configuration {desired.config_hash}: {status['updatedReplicas']}/{desired.replicas} "
            f"{desired.unit()} updated, {status['readyReplicas']} ready"
        )
    else:
        progress_reason, progress_message = state.reason, state.message
    status["conditions"] = with_mirrors(
        [
            condition("Ready", state.ready, state.reason, state.message, generation, before, now),
            condition("Progressing", progressing, progress_reason, progress_message, generation, before, now),
            condition(
                "Degraded",
                state.degraded,
                state.reason if state.degraded else "AsExpected",
                state.message if state.degraded else "",
                generation,
                before,
                now,
            ),
            config,
        ],
        generation,
        before,
        now,
    ) + (measured_conditions(before) if measured is not None else [])
    return clamp(status)


def serving_last_good(desired: Desired, good: dict[str, Any]) -> Desired:
    """`desired` with the last good configuration in place of the spec's (rolled back)."""
    return replace(
        desired,
        config_hash=good["configHash"],
        method=good["method"],
        num_speculative_tokens=good["numSpeculativeTokens"],
        schedule=from_ranges(good.get(SCHEDULE_FIELD)),
        adaptivity=good.get("adaptivity", ""),
        capture_sizes=good.get("captureSizes") or [],
        config_map=good["configMap"],
        family=good.get("family", ""),
        image=good.get("image", ""),
        engine_versions=good.get("engineVersions"),
        draft=good.get("draft", ""),
    )


def _schedule(desired: Desired) -> dict[str, Any]:
    return {SCHEDULE_FIELD: as_ranges(desired.schedule)} if desired.schedule else {}


def _draft(desired: Desired) -> dict[str, Any]:
    return {"draft": desired.draft} if desired.draft else {}


def _engine(desired: Desired) -> dict[str, Any]:
    """The image a configuration runs and its engine releases, when known: what serves, in status."""
    return {
        **({"image": desired.image} if desired.image else {}),
        **({"engineVersions": desired.engine_versions} if desired.engine_versions else {}),
    }


def canary_message(canary: dict[str, Any], serving: Desired, observed: Observed) -> str:
    """Where the canary stands, in the words of its record; during its phase `serving` is the last good
    configuration on the stable pods."""
    if canary["phase"] == PROMOTING:
        return f"promoting configuration {canary['configHash']} to every pod: {canary['message']}"
    ready = workload.counts(observed.canary, observed.pods).ready
    return (
        f"canary: configuration {canary['configHash']} on {canary['replicas']} {serving.unit()} ({ready} ready), "
        f"{serving.config_hash} on {canary['stableReplicas']}; {canary['message']}"
    )


def last_good(before: dict[str, Any] | None, desired: Desired, state: Health, now: str) -> dict[str, Any] | None:
    """status.rollout.lastGood: `desired` once it serves on every replica, else what it was."""
    if not (state.rolled_out and state.ready and desired.replicas > 0):
        return before
    if before is not None and before.get("configHash") == desired.config_hash:
        return before
    return {
        "configHash": desired.config_hash,
        "configMap": desired.config_map,
        "method": desired.method,
        "numSpeculativeTokens": desired.num_speculative_tokens,
        **_schedule(desired),
        **({"captureSizes": desired.capture_sizes} if desired.capture_sizes else {}),
        **({"adaptivity": desired.adaptivity} if desired.adaptivity else {}),
        **({"family": desired.family} if desired.family else {}),
        **_draft(desired),
        **_engine(desired),
        "time": now,
    }


def rolled_back(state: Health, good: Desired, rollback: dict[str, Any]) -> Health:
    """Not Ready (the spec is not what serves) and Degraded, with the failure in the pods' own words."""
    restored = f"the last good configuration {good.config_hash} ({good.method}, K={good.num_speculative_tokens})"
    where = f"{restored} serves again" if state.rolled_out else f"restoring {restored}"
    message = (
        f"configuration {rollback['configHash']} failed ({rollback['reason']}: {rollback['message']}); {where}; "
        "the spec is not tried again until it changes"
    )
    return Health(False, state.rolled_out, ROLLED_BACK, message, degraded=True)


def measured_conditions(before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The telemetry loop's condition, kept as it wrote it."""
    return [c for c in before if c.get("type") == MEASURED_CONDITION]


def with_mirrors(
    conditions: list[dict[str, Any]], generation: int, before: list[dict[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Append the kstatus mirrors of Progressing and Degraded."""
    by_type = {c["type"]: c for c in conditions}
    return conditions + [
        condition(
            kind,
            by_type[source]["status"] == "True",
            by_type[source]["reason"],
            by_type[source]["message"],
            generation,
            before,
            now,
        )
        for kind, source in KSTATUS_MIRRORS.items()
    ]


def transitions(previous: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of each change events report: a condition whose status or reason changed,
    except the kstatus mirrors, Degraded clearing (Ready tells it), the InvalidConfig echo of a refused
    spec on Ready, Progressing and Degraded (ConfigValid tells it once, with the specific reason), and a
    rollback's echo on Ready and Progressing (Degraded tells it; Progressing then says when it is done)."""
    before = {c["type"]: c for c in previous.get("conditions") or []}
    changed = []
    for cond in current.get("conditions") or []:
        kind, reason = cond["type"], cond["reason"]
        echo = (
            (kind == "Degraded" and cond["status"] == "False")
            or (reason == "InvalidConfig" and kind != "ConfigValid")
            or (kind == "Ready" and reason == ROLLED_BACK)
            or (kind == "Progressing" and reason == "RollingBack")
            or (kind == "Ready" and reason in (CANARY, PROMOTING))
        )
        if kind in KSTATUS_MIRRORS or echo:
            continue
        old = before.get(kind, {})
        if (old.get("status"), old.get("reason")) != (cond["status"], reason):
            changed.append((kind, reason, cond["message"]))
    return changed
