"""One idempotent reconcile: validate, check the cluster can run it, apply the children, report status.

A spec that cannot run is never applied: the Deployment keeps serving the last valid configuration
and the status says why (ConfigValid=False). Child events go to refresh.py.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from specinfer_operator.api.labels import selector_labels
from specinfer_operator.api.policy import TenantPolicySpec
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.api.service import INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND
from specinfer_operator.controller.arrangement import arrange, carry_out, starts_rollout
from specinfer_operator.controller.conditions import (
    APPLY_REJECTED,
    GROUPS_MISSING,
    INSUFFICIENT_NPUS,
    INVALID_SPEC,
    NAME_CONFLICT,
    REFUSED,
    RULE_REASONS,
    Desired,
    Verdict,
)
from specinfer_operator.controller.context import Context, desired_of, observe
from specinfer_operator.controller.pool import (
    APPLIED,
    CRD_MISSING,
    NOT_ASKED,
    PoolReport,
    applied_message,
    missing_message,
)
from specinfer_operator.controller.publish import publish
from specinfer_operator.controller.writes import Clash, Owned, own_history
from specinfer_operator.learning.draft import checked
from specinfer_operator.platform import metrics
from specinfer_operator.render import workload
from specinfer_operator.render.admission import check
from specinfer_operator.render.autoscaler import KEDA_API_VERSION, SCALED_OBJECT
from specinfer_operator.render.children import (
    RenderDefaults,
    disruption_budget,
    family_hash,
    is_pool,
    label_selector,
    placement,
    render,
)
from specinfer_operator.render.learning import claim_name
from specinfer_operator.render.sizing import CPU_PER_NPU, NPU_MEMORY, amount, size
from specinfer_operator.tuning import applied
from specinfer_runtime import quantity

log = logging.getLogger(__name__)


# Where each request the operator makes for the engine container is set, and what it is when unset.
SET_BY = {
    "cpu": f"resources.cpu ({CPU_PER_NPU} per NPU when unset)",
    "memory": f"resources.memory ({size(NPU_MEMORY)} per NPU and sharedMemory when unset)",
    "ephemeral-storage": f"resources.modelCache ({size(NPU_MEMORY)} per NPU of the weights when unset) or set "
    "modelCacheClaim",
}


def _amount(value: Any) -> float | None:
    """A node's figure as a number; None where it is missing or not a quantity."""
    parsed = quantity.parse(str(value)) if value is not None else None
    return None if parsed is None else float(parsed)


def _short(requests: dict[str, str], allocatable: dict[str, Any]) -> list[str]:
    """The requests a node cannot hold; what it does not advertise (or not as a quantity) is not judged."""
    return [
        name
        for name, wanted in requests.items()
        if name in SET_BY and (has := _amount(allocatable.get(name))) is not None and amount(wanted) > has
    ]


def capacity_problem(desired: Desired, node_selector: dict[str, str], nodes: list[dict[str, Any]]) -> str | None:
    """A pod that no node could ever hold, or a group with more pods than nodes that could hold one each,
    or None: NPUs first, then the engine container's other requests on the nodes with enough NPUs. Without
    any node advertising the resource (device plugin not ready, autoscaling) nothing is refused: the pods
    report Unschedulable instead."""
    resource = desired.npu_resource
    offers = [
        (int(str(allocatable.get(resource, "0"))), allocatable)
        for node in nodes
        if all(node.get("metadata", {}).get("labels", {}).get(k) == v for k, v in node_selector.items())
        for allocatable in [node.get("status", {}).get("allocatable", {})]
    ]
    offering = [(npus, allocatable) for npus, allocatable in offers if npus > 0]
    if not offering:
        return None
    where = " matching the pods' nodeSelector (spec.placement's, else the operator's)" if node_selector else ""
    need, group = desired.npus_per_pod, desired.group_size
    most = max(npus for npus, _ in offering)
    if need > most:
        spread = " or spread it over more parallelism.nodes" if group > 1 else ""
        return (
            f"each pod needs {need} {resource}, but the largest node{where} has {most}: lower parallelism "
            f"(tensor x pipeline x data){spread}, or add larger nodes"
        )
    holding = [allocatable for npus, allocatable in offering if npus >= need]
    if len(holding) < group:
        fit = len(holding)
        return (
            f"each replica is a group of {group} pods on {group} nodes with {need} {resource} each, but only {fit} "
            f"node{'s' if fit != 1 else ''}{where} {'have' if fit != 1 else 'has'} that many: add nodes, or "
            "lower parallelism.nodes"
        )
    room = sum(not _short(desired.requests, allocatable) for allocatable in holding)
    if room >= group:
        return None
    short = sorted({name for allocatable in holding for name in _short(desired.requests, allocatable)})
    who = "each pod" if group == 1 else f"each of the {group} pods of a group"
    have = "no node" if room == 0 else f"only {room} node{'s' if room != 1 else ''}"
    asks = ", ".join(f"{desired.requests[name]} {name}" for name in short)
    most_of = ", ".join(
        f"{max((a[name] for a in holding if _amount(a.get(name)) is not None), key=lambda v: _amount(v) or 0)} {name}"
        for name in short
    )
    return (
        f"{who} requests {asks} besides {need} {resource}, but {have}{where} with that many {resource} "
        f"{'has' if room < 2 else 'have'} that much allocatable (at most {most_of}): lower "
        f"{'; '.join(SET_BY[name] for name in short)}; or add larger nodes"
    )


def verdict_of(
    cr_body: dict[str, Any],
    nodes: list[dict[str, Any]],
    defaults: RenderDefaults,
    groups: Callable[[], str | None] = lambda: None,
    policy: TenantPolicySpec | None = None,
) -> tuple[Verdict, SpeculativeInference | None, Desired | None]:
    """Whether the spec may roll out (valid, and within the tenant `policy`); the resource and its desired
    state when it may. `groups` says why an engine over several nodes cannot run (asked only for such a spec)."""
    checker = functools.partial(check, policy=policy, stored=True)
    cr_body, report, unlearned = checked(cr_body, checker)  # the draft generation in force, with spec.learning
    chosen = applied.resolve(cr_body, report, lambda c: family_hash(c, defaults), checker)
    if chosen is None:
        message = "; ".join(str(p) for p in report.errors)
        rules = {p.rule for p in report.errors}
        return Verdict(False, RULE_REASONS.get(frozenset(rules), INVALID_SPEC), message), None, None
    cr = chosen.resource
    warnings = [str(p) for p in report.warnings] + [w for w in (chosen.warning, unlearned) if w]
    stated = policy.default_engine_versions if policy is not None else None
    desired = desired_of(cr, defaults, stated, chosen)
    missing = groups() if desired.group_size > 1 else None
    if missing:
        return Verdict(False, GROUPS_MISSING, missing, warnings), cr, None
    problem = capacity_problem(desired, placement(cr.spec, defaults).node_selector or {}, nodes)
    if problem:
        return Verdict(False, INSUFFICIENT_NPUS, problem, warnings), cr, None
    return Verdict(True, "ValidWithWarnings" if warnings else "Valid", "", warnings), cr, desired


def reconcile(body: dict[str, Any], ctx: Context, nodes: list[dict[str, Any]]) -> None:
    """Bring the children in line with the spec (if it can run on these nodes) and report."""
    started = time.perf_counter()
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    result = "error"
    try:
        with ctx.lock(namespace, name):
            result = _reconcile(body, ctx, nodes, namespace, name)
    finally:
        metrics.RECONCILES.labels(result=result).inc()
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)


# What the API server says when it refuses an object (invalid, forbidden by admission), as opposed to
# conditions worth retrying: not found, conflicts, throttling.
RETRIED = (404, 409, 429)
MESSAGE_LIMIT = 1000


@dataclass(frozen=True)
class Refusal:
    reason: str  # APPLY_REJECTED or NAME_CONFLICT
    message: str


def apply_children(
    owned: Owned, children: list[dict[str, Any]], appliers: ThreadPoolExecutor, dry_run: bool, owner: str
) -> tuple[list[dict[str, Any]], Refusal | None]:
    """Apply every child of the resource with uid `owner` concurrently; what the API server returned, or why
    any of them was refused (by the API server or an admission policy, or for a name another object holds:
    then none is applied). Conditions worth retrying (not found, conflicts, throttling) raise."""

    def claim(obj: dict[str, Any]) -> dict[str, Any] | Refusal:
        try:
            return owned.claim(obj, owner)
        except Clash as clash:
            return Refusal(NAME_CONFLICT, str(clash))

    claimed = list(appliers.map(claim, children))
    clashes = [c.message for c in claimed if isinstance(c, Refusal)]
    if clashes:
        return [], Refusal(NAME_CONFLICT, "; ".join(clashes))

    def attempt(obj: dict[str, Any]) -> dict[str, Any] | Refusal:
        try:
            return owned.apply(obj, owner, dry_run=dry_run)
        except ApiException as error:
            if not 400 <= (error.status or 0) < 500 or error.status in RETRIED:
                raise
            try:
                said = str(json.loads(error.body or "{}").get("message") or error.body)
            except ValueError:
                said = str(error.body)
            message = f"the API server refused the {obj['kind']} {obj['metadata']['name']}: {said}"[:MESSAGE_LIMIT]
            return Refusal(APPLY_REJECTED, message)

    results = list(appliers.map(attempt, [c for c in claimed if isinstance(c, dict)]))
    refused = [r.message for r in results if isinstance(r, Refusal)]
    applied = [r for r in results if isinstance(r, dict)]
    return applied, Refusal(APPLY_REJECTED, "; ".join(refused)) if refused else None


def apply_pool(ctx: Context, pool: dict[str, Any], owner: str) -> PoolReport:
    """Apply the InferencePool of the resource with uid `owner`, once its CRD is installed: how it went. Never
    in the way of the other children, which are applied already."""
    name = pool["metadata"]["name"]
    if not ctx.pools_served():
        return PoolReport(name, False, CRD_MISSING, missing_message())
    applied, refused = apply_children(ctx.owned, [pool], ctx.appliers, False, owner)
    if refused is not None:
        return PoolReport(name, False, refused.reason, refused.message)
    return PoolReport(name, True, APPLIED, applied_message(applied[0]))


def _reconcile(body: dict[str, Any], ctx: Context, nodes: list[dict[str, Any]], namespace: str, name: str) -> str:
    meta = body["metadata"]
    verdict, cr, desired = verdict_of(body, nodes, ctx.defaults, ctx.groups_problem, ctx.tenant_policy())
    children = render(cr, ctx.defaults) if desired is not None and cr is not None else []
    pool = next((o for o in children if is_pool(o)), None)
    children = [o for o in children if not is_pool(o)]
    previous = body.get("status") or {}
    arrangement, observed = None, None
    kind = workload.kind_of_spec(body.get("spec"))
    if desired is not None and cr is not None:  # which workloads run what: rollbacks and canaries
        wanted = next(o for o in children if workload.is_workload(o))
        arrangement, observed = arrange(ctx, body, cr, desired, wanted)
        children = [arrangement.deployment if o is wanted else o for o in children]
        children += [arrangement.canary] if arrangement.canary is not None else []
        if arrangement.decided and observed is not None:  # recorded before it is carried out
            publish(body, ctx, verdict, desired, observed, arrangement)
    # A configuration already serves: a dry run of every child first, so that a refusal of any leaves
    # all of them as they are. Before the first apply nothing serves, and the round trip is saved.
    serving = bool(previous.get("configHash"))
    owner = str(meta.get("uid") or "")
    refused = None
    if children and serving:
        refused = apply_children(ctx.owned, children, ctx.appliers, True, owner)[1]
    applied: list[dict[str, Any]] = []
    if desired is not None and refused is None:
        applied, refused = apply_children(ctx.owned, children, ctx.appliers, False, owner)
    if refused is not None:
        verdict, desired = Verdict(False, refused.reason, refused.message, verdict.warnings), None
    report = None  # the pool as it was: nothing rolled out
    if desired is not None:
        report = apply_pool(ctx, pool, owner) if pool is not None else NOT_ASKED
    deployments = [o for o in applied if workload.is_workload(o)]
    stable = workload.object_name(kind, name)
    deployment = next((o for o in deployments if o["metadata"]["name"] == stable), None)
    canary = next((o for o in deployments if o["metadata"]["name"] != stable), None)
    if arrangement is not None and desired is not None:
        carry_out(ctx, body, arrangement, observed)
    if desired is not None and deployment is not None and starts_rollout(previous, desired):
        metrics.ROLLOUTS_STARTED.inc()
        # ConfigMaps of older configurations exist once one served, or a first apply was partly refused.
        rejected = any(c.get("reason") in REFUSED for c in previous.get("conditions") or [])
        if serving or rejected:
            prune_config_maps(ctx, body, deployments)
    seen = replace(observe(ctx, body, kind, deployment), canary=canary)
    if cr is not None and desired is not None:
        drop_unwanted(ctx.owned, body, previous, cr, kind, seen.pods, keda=bool(ctx.defaults.keda_prometheus))
    publish(body, ctx, verdict, desired, seen, arrangement, report)
    return "applied" if verdict.valid else "refused"


def drop_unwanted(
    owned: Owned,
    body: dict[str, Any],
    previous: dict[str, Any],
    cr: SpeculativeInference,
    kind: workload.Kind,
    pods: list[dict[str, Any]],
    keda: bool,
) -> None:
    """Delete what a spec no longer asks for: the PodDisruptionBudget, the autoscaler, the learning claim, the
    InferencePool (when the status says one was applied: only then are its CRD and the operator's rights on it
    known to be there), and the
    workload of the other kind (whose pods still run) when parallelism.nodes went from one to several or back:
    those pods are replaced at once, not rolled. Only a spec change takes them away, so only a new generation
    costs the requests (a missing one is no error). Only the resource's own are deleted (writes.py). With KEDA
    (`keda`), a HorizontalPodAutoscaler of the resource's own goes at once: it was made before the operator was
    given KEDA, and two autoscalers would fight over spec.replicas."""
    meta = body["metadata"]
    namespace, name, owner = meta["namespace"], meta["name"], str(meta.get("uid") or "")
    if keda and cr.spec.autoscaling is not None:
        owned.delete("autoscaling/v2", "HorizontalPodAutoscaler", namespace, name, owner)
    if previous.get("observedGeneration") == meta.get("generation"):
        return
    if disruption_budget(cr) is None:
        owned.delete("policy/v1", "PodDisruptionBudget", namespace, name, owner)
    if cr.spec.autoscaling is None:  # spec.replicas stays where the autoscaler left it
        owned.delete("autoscaling/v2", "HorizontalPodAutoscaler", namespace, name, owner)
        if keda:
            owned.delete(KEDA_API_VERSION, SCALED_OBJECT, namespace, name, owner)
    if cr.spec.learning is None:  # the recorded prompts and the drafts go with learning
        owned.delete("v1", "PersistentVolumeClaim", namespace, claim_name(name), owner)
    if cr.spec.inference_pool is None and previous.get("inferencePool"):
        owned.delete(INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND, namespace, name, owner)
    other = next(k for k in workload.KINDS if k != kind)
    if any(workload.kind_of_pod(pod) == other for pod in pods):
        stable = workload.object_name(other, name)
        for each in (stable, f"{stable}-canary"):
            owned.delete(other.api_version, other.kind, namespace, each, owner)


def prune_config_maps(ctx: Context, body: dict[str, Any], deployments: list[dict[str, Any]]) -> None:
    """Delete the resource's own engine ConfigMaps that neither the workloads (stable, canary) nor their
    history (ReplicaSets, a LeaderWorkerSet's revisions) mount (rollbacks keep theirs)."""
    meta = body["metadata"]
    namespace, name, owner = meta["namespace"], meta["name"], str(meta.get("uid") or "")
    selector = label_selector(selector_labels(name))
    history = [entry for d in deployments for entry in own_history(ctx.kube, d)]
    in_use = {
        volume["configMap"]["name"]
        for owner in [*history, *deployments]
        for template in workload.pod_templates(owner)
        for volume in (template.get("spec") or {}).get("volumes", [])
        if "configMap" in volume
    }
    for config_map in ctx.kube.list("v1", "configmaps", namespace, selector):
        config_name = config_map["metadata"]["name"]
        if config_name.startswith(f"{name}-engine-") and config_name not in in_use:
            ctx.owned.delete("v1", "ConfigMap", namespace, config_name, owner, live=config_map)
