"""The learning loop: one step for each resource with spec.learning, every INTERVAL seconds (a kopf timer).

A step reads what it needs (the Job of a generation in training, and its pod), decides (`advance`, pure) and
writes what changed: status.learning, the draft annotation that hands a trained generation to the reconcile
loop, a new training Job, and an event for each transition. A generation goes Training (its Job runs), then
Canary (its annotation is set: the reconcile loop renders it and the canary judges it on speed), then
Promoted or RolledBack (the annotation goes back to the draft it replaced; its directory stays on the claim
for inspection until the next run starts, and the samples it trained on are quarantined); a run that fails is
Failed, and the next one waits for new prompts.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api.labels import LEARNED_DRAFT_ANNOTATION
from specinfer_operator.api.learning import MAX_GENERATIONS
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.api.service import TelemetrySettings
from specinfer_operator.api.timestamps import parse
from specinfer_operator.learning.draft import SPEC_DRAFT, draft_label, generation_of_label
from specinfer_operator.learning.outcome import CONTROLLER_UID_LABEL, canary_end, figures_of, job_pod, run_end
from specinfer_operator.learning.plan import Moment, expire, kept, next_generation, quarantine, trigger
from specinfer_operator.platform.kube import Conflict, Kube
from specinfer_operator.platform.ownership import clash_message, controlled_by
from specinfer_operator.render.children import RenderDefaults
from specinfer_operator.render.learning import draft_dir
from specinfer_operator.render.training import job_name, training_job

log = logging.getLogger(__name__)

INTERVAL = 30  # seconds between steps: a run takes minutes to hours, a canary minutes
Event = tuple[str, str, str]  # type, reason, message


@dataclass(frozen=True)
class Seen:
    """What a step read: the Job of the generation in training and its pod, and the requests the engines
    served since the last step (the telemetry loop counts them)."""

    job: dict[str, Any] | None = None
    pod: dict[str, Any] | None = None
    requests: int = 0


@dataclass
class Step:
    """What a step writes: status.learning, the draft annotation (None: as it is; "": the spec's draft), the
    generation whose Job to create (0: none), and events."""

    status: dict[str, Any]
    annotation: str | None = None
    start: int = 0
    events: list[Event] = field(default_factory=list)


def _quiet(status: dict[str, Any]) -> bool:
    rollout = status.get("rollout") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ready and not rollout.get("canary") and not rollout.get("rolledBack")


def _in_force(status: dict[str, Any]) -> str:
    """The draft that serves on every pod: the last good configuration's."""
    good = (status.get("rollout") or {}).get("lastGood") or {}
    return str(good.get("draft") or (status.get("speculation") or {}).get("draft") or SPEC_DRAFT)


def _run_ended(last: dict[str, Any], seen: Seen, now: str, step: Step) -> None:
    ended = run_end(seen.job, seen.pod)
    if ended is None:
        return
    label = draft_label(int(last["generation"]))
    if ended.phase == "Succeeded":
        last.update(ended.figures, phase="Canary", draftPath=draft_dir(int(last["generation"])))
        step.annotation = str(last["generation"])
        said = (
            f"{label} trained on {ended.figures['samples']} prompts ({ended.figures['tokens']} tokens) in "
            f"{ended.figures['trainingSeconds']:.0f} s: its canary decides"
        )
        step.events.append(("Normal", "DraftTrained", said))
        return
    last.update(phase="Failed", finishedAt=now, reason=ended.reason)
    step.events.append(("Warning", "DraftTrainingFailed", f"{label} was not trained: {ended.reason}"))


def _canary_ended(last: dict[str, Any], status: dict[str, Any], learning: dict[str, Any], now: str, step: Step) -> None:
    canary = (status.get("rollout") or {}).get("canary")
    if canary:  # what each side gets, while they are measured side by side
        after = figures_of(canary.get("observed"))
        before = figures_of(canary.get("baseline") or (status.get("speculation") or {}).get("observed"))
        if after:
            last["after"] = after
        if before:
            last["before"] = before
    generation = int(last["generation"])
    ended = canary_end(generation, status)
    if ended is None:
        return
    phase, reason = ended
    label = draft_label(generation)
    last.update(phase=phase, finishedAt=now, **({"reason": reason} if reason else {}))
    if phase == "Promoted":
        # The canary's figures as last read (every step, 30 s): a canary judged sooner leaves a first glimpse of
        # its traffic. The generation's own figures are taken once it serves everywhere (_measured_after).
        step.events.append(("Normal", "DraftPromoted", f"{label} serves on every pod: {_compared(last)} on its canary"))
        last.pop("after", None)
        return
    replaced = str(last.get("replaces") or SPEC_DRAFT)
    step.annotation = str(generation_of_label(replaced) or "")
    quarantine(learning, last)
    said = (
        f"{label} was rolled back ({reason}); {replaced} serves, {label} stays on the claim for inspection until the "
        f"next run, and no later run trains on the {last.get('samples', 0)} prompts it learned from"
    )
    step.events.append(("Warning", "DraftRolledBack", said))


def _evidence(status: dict[str, Any], settings: TelemetrySettings) -> dict[str, Any]:
    """The serving configuration's figures (status.speculation.observed) when every pod is measured and they are
    evidence (telemetry.minDrafts drafts, as LowAcceptance requires); else {}."""
    observed = (status.get("speculation") or {}).get("observed") or {}
    pods = observed.get("pods") or 0
    if observed.get("configHash") != status.get("configHash") or not pods or observed.get("podsMeasured") != pods:
        return {}
    return observed if settings.evidence(observed) else {}


def _measured_after(
    generations: list[dict[str, Any]], status: dict[str, Any], learning: dict[str, Any], telemetry: TelemetrySettings
) -> None:
    """A promoted generation's own figures, once it serves everywhere and they are evidence (a first reading
    holds a prompt or two): what drift is judged against and what status.learning shows as its `after`."""
    last = next((g for g in reversed(generations) if g.get("phase") == "Promoted"), None)
    good = (status.get("rollout") or {}).get("lastGood") or {}
    observed = _evidence(status, telemetry)
    if last is None or "after" in last:
        return
    if good.get("draft") != draft_label(int(last["generation"])) or observed.get("configHash") != good.get(
        "configHash"
    ):
        return
    after = figures_of(observed)
    if "meanAcceptanceLength" in after:
        last["after"] = after
        learning["promotedAcceptanceLength"] = after["meanAcceptanceLength"]


def _compared(last: dict[str, Any]) -> str:
    before, after = last.get("before") or {}, last.get("after") or {}
    parts = [
        f"{name} {before[key]:.2f} -> {after[key]:.2f}"
        for key, name in (("meanAcceptanceLength", "mean acceptance length"), ("decodeTokensPerSecond", "decode tok/s"))
        if key in before and key in after
    ]
    return ", ".join(parts) or "no figures measured"


def advance(cr: SpeculativeInference, status: dict[str, Any], seen: Seen, now: str) -> Step:
    """The step for `cr` (its spec as written) and its status, given what was read."""
    settings = cr.spec.learning
    assert settings is not None
    learning = copy.deepcopy(status.get("learning") or {"since": now})
    learning.setdefault("draft", SPEC_DRAFT)
    step = Step(learning)
    learning["requestsSinceTraining"] = int(learning.get("requestsSinceTraining") or 0) + seen.requests
    generations = learning.setdefault("generations", [])
    last = generations[-1] if generations else None
    if last is not None and last.get("phase") == "Training":
        _run_ended(last, seen, now, step)
    elif last is not None and last.get("phase") == "Canary":
        _canary_ended(last, status, learning, now, step)
    _measured_after(generations, status, learning, cr.spec.telemetry)
    expire(learning, settings, now)
    learning["draft"] = _in_force(status)
    # No run while one trains or is judged, nor before the generation last promoted was measured on every pod:
    # its figures are what drift is judged against.
    busy = last is not None and (
        last.get("phase") in ("Training", "Canary") or (last.get("phase") == "Promoted" and "after" not in last)
    )
    length = _evidence(status, cr.spec.telemetry).get("meanAcceptanceLength")
    moment = Moment(now, learning["requestsSinceTraining"], length, _quiet(status), busy)
    why = None if busy or step.annotation is not None else trigger(settings, learning, moment)
    if why is not None:
        generation = next_generation(learning)
        generations.append(
            {
                "generation": generation,
                "phase": "Training",
                "job": job_name(cr.metadata.name, generation),
                "replaces": learning["draft"],
                "startedAt": now,
                "trigger": why,
            }
        )
        learning["requestsSinceTraining"] = 0
        step.start = generation
        step.events.append(("Normal", "DraftTraining", f"training {draft_label(generation)}: {why}"))
    del generations[:-MAX_GENERATIONS]
    learning["message"] = _message(learning)
    return step


def _message(learning: dict[str, Any]) -> str:
    generations = learning.get("generations") or []
    last = generations[-1] if generations else None
    if last is not None and last["phase"] == "Training":
        return f"training {draft_label(last['generation'])} (Job {last['job']})"
    if last is not None and last["phase"] == "Canary":
        return f"{draft_label(last['generation'])} on its canary"
    served = learning["requestsSinceTraining"]
    return f"{learning['draft']} serves; recording prompts ({served} requests since the last run)"


def not_started(step: Step, reason: str, now: str) -> None:
    """The run `step` starts could not be created: its generation Failed, and said so."""
    last = step.status["generations"][-1]
    last.update(phase="Failed", finishedAt=now, reason=reason)
    said = f"{draft_label(int(last['generation']))} was not trained: {reason}"
    step.events.append(("Warning", "DraftTrainingFailed", said))
    step.status["message"] = _message(step.status)


def _create(kube: Kube, job: dict[str, Any], owner: str) -> str | None:
    """Create a run's Job, a child of the resource with uid `owner`: None once it exists, or why not. Created,
    never applied over: a Job of its name that is not the resource's own (a tenant may create any Job) is left
    untouched, as the other children are."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    try:
        kube.create("batch/v1", "jobs", namespace, job)
    except Conflict:  # the name is held: by this run, created by a step whose status write failed, or not
        live = kube.get("batch/v1", "jobs", namespace, name)
        if live is not None and not controlled_by(live, owner):
            return clash_message("Job", namespace, name, live)
    return None


def _read_run(kube: Kube, namespace: str, job_name: str, owner: str, requests: int) -> Seen:
    """The run's Job, when it is the resource's own (another of its name is not the run), and its own pod."""
    job = kube.get("batch/v1", "jobs", namespace, job_name)
    if job is None or not controlled_by(job, owner):
        return Seen(requests=requests)
    pods = kube.list("v1", "pods", namespace, f"{CONTROLLER_UID_LABEL}={job['metadata']['uid']}")
    return Seen(job, job_pod(job, pods), requests)


def since(learning: dict[str, Any], generation: int) -> float:
    """When the run before `generation` began (Unix time; 0 before the first): the new one needs newer prompts."""
    earlier = [g for g in learning.get("generations") or [] if int(g["generation"]) < generation]
    if not earlier:
        return 0.0
    try:
        return parse(str(earlier[-1].get("startedAt"))).timestamp()
    except ValueError:
        return 0.0


def tick(
    body: dict[str, Any], cr: SpeculativeInference, kube: Kube, defaults: RenderDefaults, requests: int, now: str
) -> None:
    """One step for a valid resource with spec.learning: read, advance, write."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = body.get("status") or {}
    generations = (status.get("learning") or {}).get("generations") or []
    last = generations[-1] if generations else None
    seen = Seen(requests=requests)
    if last is not None and last.get("phase") == "Training":
        seen = _read_run(kube, namespace, str(last["job"]), meta["uid"], requests)
    step = advance(cr, status, seen, now)
    if step.start:
        in_force = generation_of_label(step.status["draft"])
        assert cr.spec.learning is not None
        retained = kept(cr.spec.learning, step.status, in_force)
        job = training_job(cr, step.start, in_force, since(step.status, step.start), defaults, retained)
        clash = _create(kube, job, meta["uid"])
        if clash is not None:
            not_started(step, clash, now)
    if step.annotation is not None:
        kube.patch_metadata(namespace, name, {"annotations": {LEARNED_DRAFT_ANNOTATION: step.annotation or None}})
    if step.status != status.get("learning"):
        kube.patch_status(namespace, name, {"learning": step.status})
    for kind, reason, message in step.events:
        log.info("%s/%s: %s: %s", namespace, name, reason, message)
        kube.event(body, kind, reason, message, now)
