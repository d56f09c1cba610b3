"""The rollout decision: which workloads run which configuration now. The spec's, the last good one (rolled
back), or a canary beside the stable pods (judged by canary.py's rules). Shared by reconcile (spec changes)
and refresh (child events), so both converge on the same arrangement whichever runs first, and after a
restart.

Rollouts replace NPU pods in place, so a configuration whose pods cannot serve takes replicas down with it.
When the pods of a new configuration fail (crash-loop, refused by the runtime's preflight or by admission,
image or config errors) or its rollout misses the deadline, the last configuration that served
(status.rollout.lastGood) goes back on every replica, and the failure is recorded (status.rollout.rolledBack)
with the spec's generation: the same spec is not tried again, an edited one is. The last good pod template
comes from the workload's history (ReplicaSets, a LeaderWorkerSet's revisions), along with the ConfigMap it
mounts.

Decisions are written to the status before they are carried out (see refresh.py): a rollback or a
promotion that the operator decided on is not decided again differently after a restart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from specinfer_operator.api.labels import CANARY_ACTION_ANNOTATION, CANARY_ACTIONS, CONFIG_HASH_ANNOTATION
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.controller import canary, verdict
from specinfer_operator.controller.conditions import CANARY, PROMOTING, Desired, Observed
from specinfer_operator.controller.context import Context, observe
from specinfer_operator.controller.health import FAILED_CREATE, Health, health, pod_problem
from specinfer_operator.controller.writes import own_history
from specinfer_operator.platform import metrics
from specinfer_operator.platform.ownership import controlled_by
from specinfer_operator.render import workload
from specinfer_operator.tuning import adaptivity

log = logging.getLogger(__name__)
# Pod states that a configuration, not the cluster, is to blame for, once the kubelet has retried:
# ErrImagePull (a first failed pull, perhaps a registry hiccup) and Unschedulable (capacity may come) are not
# among them; a rollout that never gets past them misses the deadline instead.
FAILURES = ("CrashLoopBackOff", "ImagePullBackOff", "CreateContainerConfigError", "ProgressDeadlineExceeded")
# A refusal of the pods that the configuration is to blame for: the namespace's Pod Security level or an
# admission policy refusing its pod template (a quota refusing it is the cluster's state: it may pass).
REFUSED_BY_ADMISSION = ("violates PodSecurity", "denied")


@dataclass(frozen=True)
class Arrangement:
    """What to apply, and what the status says about it."""

    deployment: dict[str, Any]  # the (stable) workload: a Deployment or a LeaderWorkerSet
    canary: dict[str, Any] | None  # the canary's workload; None: there must be none
    rollback: dict[str, Any] | None  # the rollback in force, if any
    record: dict[str, Any] | None  # status.rollout.canary
    decided: str | None = None  # the reason of a rollback or promotion decided just now
    action: str | None = None  # the manual action (annotation) this arrangement carried out


def pending_action(body: dict[str, Any]) -> str | None:
    """The manual action set on the resource (annotation specinfer.io/canary), if any."""
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(CANARY_ACTION_ANNOTATION)
    return str(value).strip().lower() if value is not None else None


def involved(cr: SpeculativeInference, desired: Desired, previous: dict[str, Any], generation: int) -> bool:
    """Whether the arrangement depends on the live objects: a rollback (in force, or to decide while the
    last good configuration is not the spec's), a canary, or one to clean up."""
    good = ((previous.get("rollout") or {}).get("lastGood") or {}).get("configHash")
    return (
        rollback_in_force(previous, generation, desired) is not None
        or (good is not None and good != desired.config_hash and cr.spec.rollout.on_failure == "Rollback")
        or cr.spec.rollout.strategy == "Canary"
        or bool((previous.get("rollout") or {}).get("canary"))
    )


def arrange(
    ctx: Context,
    body: dict[str, Any],
    cr: SpeculativeInference,
    desired: Desired,
    wanted: dict[str, Any],
    observed: Observed | None = None,
) -> tuple[Arrangement, Observed | None]:
    """The arrangement for the spec `cr` (valid), its rendered Deployment `wanted` and what runs (read
    here when not given and needed), with the canary's workload read into it."""
    previous = body.get("status") or {}
    generation = int(body["metadata"].get("generation") or 0)
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if not involved(cr, desired, previous, generation):
        return Arrangement(wanted, None, None, None), observed
    kind = workload.kind_of(wanted)
    if observed is None:
        observed = observe(ctx, body, kind)
    live = ctx.kube.get(kind.api_version, kind.plural, namespace, canary.name_of(workload.object_name(kind, name)))
    observed = replace(observed, canary=live if controlled_by(live, body["metadata"].get("uid")) else None)
    rollback, decided, action = rollback_in_force(previous, generation, desired), None, None
    if rollback is None and canary.wanted(cr, desired.config_hash, previous):
        result = _canary(ctx, body, cr, desired, wanted, observed, previous)
        if result is not None and result.rollback is None:
            return result, observed
        if result is not None:
            rollback, decided, action = result.rollback, result.decided, result.action
    if rollback is None and cr.spec.rollout.on_failure == "Rollback":
        rollback = decide_rollback(previous, desired, observed, health(desired, observed), generation, ctx.now())
        decided = rollback["reason"] if rollback else None
    if rollback is not None:
        back = restore(ctx, wanted, previous, namespace, name, observed.deployment)
        if back is not None:
            return Arrangement(back, None, rollback, None, decided, action), observed
    return Arrangement(wanted, None, None, None), observed


def _canary(
    ctx: Context,
    body: dict[str, Any],
    cr: SpeculativeInference,
    desired: Desired,
    wanted: dict[str, Any],
    observed: Observed,
    previous: dict[str, Any],
) -> Arrangement | None:
    """The canary's arrangement, with its verdict carried out; None when the last good configuration cannot
    be restored on the stable pods (its ReplicaSet is gone), and the spec then rolls out directly."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    settings = cr.spec.rollout.canary
    size = settings.size(cr.spec.replicas)
    stable_size = canary.stable_replicas(cr, size)
    good = previous["rollout"]["lastGood"]
    before = (previous.get("rollout") or {}).get("canary") or {}
    before = before if before.get("configHash") == desired.config_hash else {}
    phase = canary.phase_of(workload.template_hash(observed.deployment), desired.config_hash, before.get("phase"))
    action = pending_action(body)
    state = canary.CanaryState(
        desired.config_hash, phase, size, stable_size, before.get("message") or "starting", desired.family
    )
    if phase == PROMOTING:  # every pod rolls to the new configuration; the canary goes
        return Arrangement(wanted, None, None, canary.record(previous, state, good["configHash"], ctx.now()))
    stable = restore(ctx, wanted, previous, namespace, name, observed.deployment)
    if stable is None:
        return None
    stable["spec"]["replicas"] = stable_size
    trial = canary.trial(wanted, size)
    record = canary.record(previous, state, good["configHash"], ctx.now())
    if before and (before.get("replicas"), before.get("stableReplicas")) != (size, stable_size):
        record = canary.rescaled(record, size, stable_size, ctx.now())
    live = observed.canary
    counts = workload.counts(live, observed.pods)
    own = replace(desired, replicas=size)
    generation = int(body["metadata"].get("generation") or 0)
    state_of_canary = health(own, Observed(live, observed.pods))
    failed = decide_rollback(previous, own, observed, state_of_canary, generation, ctx.now())
    if failed is not None and cr.spec.rollout.on_failure == "Rollback":
        return Arrangement(stable, None, failed, None, failed["reason"])
    healthy = workload.template_hash(live) == desired.config_hash and counts.ready == counts.updated == size
    floor = cr.spec.telemetry.min_mean_acceptance_length
    stable_figures = (previous.get("speculation") or {}).get("observed")
    cost = verdict.stable_cost(previous, good.get("family"))
    said = verdict.judge(
        record, stable_figures, stable_size, healthy, settings, floor, action, cost, _gain(cr, previous)
    )
    acted = action if action in CANARY_ACTIONS else None
    judged = {
        **record,
        "message": said.message,
        **({"comparisons": list(said.comparisons)} if said.comparisons else {}),
    }
    if said.action == "wait":
        return Arrangement(stable, trial, None, judged, action=None)
    if said.action == "promote":
        promoted = replace(state, phase=PROMOTING, message=said.message)
        log.info("promoting the canary of %s/%s: %s", namespace, name, said.message)
        metrics.CANARIES.labels(result="promoted").inc()
        record = canary.record(
            {**previous, "rollout": {**previous["rollout"], "canary": judged}}, promoted, good["configHash"], ctx.now()
        )
        return Arrangement(wanted, None, None, record, said.reason, acted)
    log.info("rolling the canary of %s/%s back: %s", namespace, name, said.message)
    metrics.CANARIES.labels(result="rolled_back").inc()
    rollback = {
        "configHash": desired.config_hash,
        "generation": generation,
        "edit": desired.edit,
        **({"draft": desired.draft} if desired.draft else {}),
        "reason": said.reason,
        "message": said.message,
        "time": ctx.now(),
    }
    return Arrangement(stable, None, rollback, None, said.reason, acted)


def _gain(cr: SpeculativeInference, previous: dict[str, Any]) -> int | None:
    """minGainPercent when the canary is an engine-side mechanism Auto is trying, which must be that much
    faster to be kept; else None."""
    change = (previous.get("tuning") or {}).get("lastChange") or {}
    tuning = cr.spec.speculative.tuning
    trying = change.get("result") == "Trying" and change.get("toAdaptivity")
    if not trying or tuning is None or adaptivity.serving(cr.spec.speculative) != change["toAdaptivity"]:
        return None
    return tuning.min_gain_percent


def restore(
    ctx: Context,
    wanted: dict[str, Any],
    previous: dict[str, Any],
    namespace: str,
    name: str,
    live: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """`wanted` with the last good configuration's pod templates: from the live workload when it runs them
    already (no read), else from its own history (ReplicaSets, or a LeaderWorkerSet's revisions); None
    without."""
    good = ((previous.get("rollout") or {}).get("lastGood") or {}).get("configHash")
    if not good:
        return None
    back = with_templates_of(wanted, [live] if live is not None else [], str(good))
    if back is not None:
        return back
    history = own_history(ctx.kube, live) if live is not None else []
    back = with_templates_of(wanted, history, str(good))
    if back is None:
        log.warning("cannot roll %s/%s back: no earlier pod template keeps configuration %s", namespace, name, good)
    return back


def carry_out(ctx: Context, body: dict[str, Any], arrangement: Arrangement, observed: Observed | None) -> None:
    """What applying the arrangement does not do: delete a canary workload that must go, count a
    rollback decided just now, and consume the manual action (annotation), saying why when it did nothing."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    live = observed.canary if observed is not None else None
    if arrangement.canary is None and live is not None and not live["metadata"].get("deletionTimestamp"):
        kind = workload.kind_of(live)
        ctx.owned.delete(kind.api_version, kind.kind, namespace, live["metadata"]["name"], meta.get("uid", ""), live)
    if arrangement.decided and arrangement.rollback is not None:
        metrics.ROLLBACKS.labels(reason=arrangement.decided).inc()
    action = pending_action(body)
    if action is None or (
        arrangement.record is not None
        and arrangement.record["phase"] == CANARY
        and not arrangement.action
        and action in CANARY_ACTIONS
    ):
        return  # no action, or one the canary will act on once it is judged
    ctx.kube.patch_metadata(namespace, name, {"annotations": {CANARY_ACTION_ANNOTATION: None}})
    if arrangement.action != action:
        why = (
            "no canary is in progress" if action in CANARY_ACTIONS else f"it is not one of {', '.join(CANARY_ACTIONS)}"
        )
        ctx.events(body, "Warning", "CanaryActionIgnored", f"{CANARY_ACTION_ANNOTATION}={action} was ignored: {why}")


def starts_rollout(previous: dict[str, Any], desired: Desired) -> bool:
    """Whether applying `desired` starts a rollout: a configuration that neither serves nor is in a canary."""
    in_canary = ((previous.get("rollout") or {}).get("canary") or {}).get("configHash")
    return desired.config_hash not in (previous.get("configHash"), in_canary)


# Rollback on failure (pure): whether the spec's configuration failed, and the pod templates that restore
# the last good one.


def rollback_in_force(previous: dict[str, Any], generation: int, desired: Desired) -> dict[str, Any] | None:
    """The rollback recorded for this spec and this configuration, if any: an edited spec tries again, and so
    does a configuration that changed without an edit (Auto tuning moved K). A new generation that only
    scaled (the autoscaler wrote replicas) is no edit; a record without the edit's hash goes by generation."""
    record: dict[str, Any] | None = (previous.get("rollout") or {}).get("rolledBack")
    if record is None or record.get("configHash") != desired.config_hash:
        return None
    same = record.get("edit") == desired.edit if record.get("edit") else record.get("generation") == generation
    return record if same else None


def failure(desired: Desired, observed: Observed, state: Health) -> tuple[str, str] | None:
    """(reason, message) when the configuration's own pods failed or its rollout missed the deadline; the
    pods of the previous configuration are not its doing."""
    if state.reason == "ProgressDeadlineExceeded":
        return state.reason, state.message or "the rollout made no progress within progressDeadlineSeconds"
    if state.reason == FAILED_CREATE and any(words in state.message for words in REFUSED_BY_ADMISSION):
        return state.reason, state.message
    own = [p for p in observed.pods if _hash(p.get("metadata")) == desired.config_hash]
    problem = pod_problem(own, desired)
    return problem if problem is not None and problem[0] in FAILURES else None


def decide_rollback(
    previous: dict[str, Any], desired: Desired, observed: Observed, state: Health, generation: int, now: str
) -> dict[str, Any] | None:
    """The rollback record to write, when the spec's configuration failed and a different one served
    everywhere before it; None to leave things as they are (the failure then shows as Degraded)."""
    good = (previous.get("rollout") or {}).get("lastGood")
    if good is None or good.get("configHash") == desired.config_hash:
        return None
    failed = failure(desired, observed, state)
    if failed is None:
        return None
    reason, message = failed
    return {
        "configHash": desired.config_hash,
        "generation": generation,
        "edit": desired.edit,
        **({"draft": desired.draft} if desired.draft else {}),
        "reason": reason,
        "message": message,
        "time": now,
    }


def with_templates_of(wanted: dict[str, Any], owners: list[dict[str, Any]], config_hash: str) -> dict[str, Any] | None:
    """`wanted` (the rendered workload) with the pod templates of the first of `owners` (the live workload,
    or its history: ReplicaSets, a LeaderWorkerSet's revisions) whose templates ran `config_hash`, or None
    when none has them."""
    for owner in owners:
        if workload.template_hash(owner) == config_hash:
            return workload.with_templates_of(wanted, owner)
    return None


def _hash(metadata: dict[str, Any] | None) -> str | None:
    value = ((metadata or {}).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
    return None if value is None else str(value)
