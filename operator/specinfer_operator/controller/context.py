"""What every reconcile and refresh works with: the operator's context, the spec's desired state, and
what runs (the Deployment and its pods)."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from specinfer_operator.api.engine import EngineVersions
from specinfer_operator.api.labels import selector_labels
from specinfer_operator.api.policy import POLICY_PLURAL, SpeculativeInferencePolicy, TenantPolicySpec
from specinfer_operator.api.resource import GROUP, VERSION, SpeculativeInference
from specinfer_operator.api.service import INFERENCE_POOL_API_VERSION, INFERENCE_POOL_PLURAL
from specinfer_operator.api.timestamps import utc_now
from specinfer_operator.controller.conditions import Desired, Observed
from specinfer_operator.controller.writes import Owned
from specinfer_operator.learning.draft import draft_label, generation_of_draft
from specinfer_operator.platform.kube import Kube
from specinfer_operator.platform.ownership import Ownership, controlled_by
from specinfer_operator.render.children import (
    RenderDefaults,
    config_hash,
    edit_hash,
    engine_config_map_name,
    family_hash,
    label_selector,
)
from specinfer_operator.render.pod import engine_requests
from specinfer_operator.render.workload import LEADER_WORKER_SET, LWS_API_VERSION, Kind, object_name
from specinfer_operator.tuning import adaptivity, applied
from specinfer_operator.tuning.applied import Effective

SERVED_RECHECK_SECONDS = 10
POLICY_RECHECK_SECONDS = 10  # the tenant policy is read again after this long: the platform team may change it
log = logging.getLogger(__name__)


class EventSink(Protocol):
    def __call__(self, body: dict[str, Any], type: str, reason: str, message: str) -> None: ...


class ResourceLock:
    """One resource's lock. The table keeps it only while someone holds it, or is about to: a lock nobody
    refers to is held by nobody, so resources created and deleted by the thousand leave none behind."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> ResourceLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


@dataclass
class Context:
    """What every reconcile needs; one per operator process."""

    kube: Kube
    defaults: RenderDefaults
    events: EventSink
    now: Callable[[], str] = lambda: utc_now()
    _locks: weakref.WeakValueDictionary[tuple[str, str], ResourceLock] = field(
        default_factory=weakref.WeakValueDictionary
    )
    _guard: threading.Lock = field(default_factory=threading.Lock)
    # Children are applied concurrently: order is irrelevant (a pod retries mounting its ConfigMap,
    # which exists long before any pod is scheduled) and each apply is a round trip.
    appliers: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8, "apply"))
    # Each resource's pods by (namespace, name), kept by the pod watch (manager/podwatch.py); None: list them.
    pods: Mapping[tuple[str, str], Iterable[dict[str, Any]]] | None = None
    # Whether this operator may run engines over several nodes (its RBAC covers LeaderWorkerSets).
    groups_enabled: bool = True
    # Whether the API serves a kind of child whose CRD may come and go (LeaderWorkerSets, InferencePools), by
    # (apiVersion, plural), and when it was asked.
    _served: dict[tuple[str, str], tuple[bool, float]] = field(default_factory=dict)
    owned: Owned = field(init=False)  # writes to children, only where they are the resource's own
    ownership: Ownership = field(init=False)  # which resource made a pod, by its controller chain
    # The SpeculativeInferencePolicy to enforce (--tenant-policy); its built-in defaults without one.
    policy_name: str = ""
    _policy: tuple[TenantPolicySpec, float] | None = None

    def __post_init__(self) -> None:
        self.owned = Owned(self.kube)
        self.ownership = Ownership(self.kube)

    def tenant_policy(self) -> TenantPolicySpec:
        """The tenant policy in force: the named SpeculativeInferencePolicy as last read (again every
        POLICY_RECHECK_SECONDS), the built-in defaults while there is none to read."""
        with self._guard:
            known = self._policy
        if known is not None and time.monotonic() - known[1] < POLICY_RECHECK_SECONDS:
            return known[0]
        found = known[0] if known is not None else TenantPolicySpec()
        if self.policy_name:
            try:
                body = self.kube.get(f"{GROUP}/{VERSION}", POLICY_PLURAL, None, self.policy_name)
                if body is None:
                    log.warning(
                        "SpeculativeInferencePolicy %s not found: its built-in defaults apply", self.policy_name
                    )
                    found = TenantPolicySpec()
                else:
                    found = SpeculativeInferencePolicy.model_validate(body).spec
            except (ApiException, ValidationError) as error:  # the last policy read stays in force
                log.warning("cannot read SpeculativeInferencePolicy %s: %s", self.policy_name, error)
        with self._guard:
            self._policy = (found, time.monotonic())
        return found

    def serves(self, api_version: str, plural: str) -> bool:
        """Whether the API server serves `plural` in `api_version`: asked again after a while, since its CRD
        may be installed or removed at any time; one discovery request shared by every resource."""
        key = (api_version, plural)
        with self._guard:
            known = self._served.get(key)
        if known is not None and time.monotonic() - known[1] < SERVED_RECHECK_SECONDS:
            return known[0]
        served = self.kube.serves(api_version, plural)
        with self._guard:
            self._served[key] = (served, time.monotonic())
        return served

    def groups_served(self) -> bool:
        return self.serves(LEADER_WORKER_SET.api_version, LEADER_WORKER_SET.plural)

    def pools_served(self) -> bool:
        return self.serves(INFERENCE_POOL_API_VERSION, INFERENCE_POOL_PLURAL)

    def groups_problem(self) -> str | None:
        """Why this operator cannot run an engine over several nodes here, or None."""
        if not self.groups_enabled:
            return (
                "an engine over several nodes runs as a LeaderWorkerSet, which this operator was started without "
                "(--no-leader-worker-set): install LeaderWorkerSet (sigs.k8s.io/lws) and set the chart's "
                "leaderWorkerSet.enabled=true, which grants its RBAC"
            )
        if not self.groups_served():
            return (
                "an engine over several nodes runs as a LeaderWorkerSet, but the API server does not serve "
                f"{LWS_API_VERSION} leaderworkersets: install LeaderWorkerSet (sigs.k8s.io/lws, v0.9 or "
                "later), or set parallelism.nodes 1"
            )
        return None

    def forget(self, namespace: str, uid: str) -> None:
        """The resource of this uid was deleted: what was kept of its children goes with them."""
        self.owned.forget(uid)
        self.ownership.forget(namespace, uid)

    def lock(self, namespace: str, name: str) -> ResourceLock:
        """One resource at a time: its children's events come concurrently, and each publishes status."""
        with self._guard:
            return self._locks.setdefault((namespace, name), ResourceLock())


def desired_of(
    cr: SpeculativeInference,
    defaults: RenderDefaults,
    default_versions: EngineVersions | None = None,
    chosen: Effective | None = None,
) -> Desired:
    """What `cr` asks for. `default_versions`: the default image's engine releases (the tenant policy's), for
    a spec without one. `chosen`: how tuning resolved it (applied.resolve; `cr` is its resource): the spec's K
    when `cr` carries a tuned one, the family tuning measures and what Auto may try."""
    engine = cr.spec.engine()
    name, namespace = cr.metadata.name, cr.metadata.namespace or "default"
    tuning = cr.spec.speculative.tuning
    versions = cr.spec.runtime.engine_versions if cr.spec.runtime.image else default_versions
    npu = cr.spec.resources.npu_resource_name or defaults.npu_resource_name
    return Desired(
        config_hash=config_hash(cr, defaults),
        edit=edit_hash(cr),
        autoscaling=cr.spec.autoscaling,
        replicas=cr.spec.replicas,
        method=engine.speculative.effective_method(),
        num_speculative_tokens=engine.effective_k(),
        capture_sizes=engine.capture_sizes(),
        npus_per_pod=cr.spec.npus_per_pod(),
        npu_resource=npu,
        endpoint=f"http://{name}.{namespace}.svc:{cr.spec.service.port}",
        selector=label_selector(selector_labels(name)),
        config_map=engine_config_map_name(name, config_hash(cr, defaults)),
        family=family_hash(cr, defaults),
        tuning_family=chosen.family if chosen is not None else family_hash(cr, defaults),
        candidate=chosen.candidate if chosen is not None else "",
        adaptivity=adaptivity.serving(engine.speculative),
        requested_k=chosen.requested_k if chosen is not None else engine.effective_k(),
        tuning=tuning.mode if tuning is not None else "Off",
        tuned=chosen is not None and chosen.tuned,
        group_size=engine.parallelism.group_size(),
        image=cr.spec.runtime.image or defaults.runtime_image,
        engine_versions=versions.dump() if versions is not None else None,
        schedule=applied.schedule_of(engine.speculative),
        requests={k: v for k, v in engine_requests(cr.spec, npu).items() if k != npu},
        draft=draft_in(cr),
    )


def draft_in(cr: SpeculativeInference) -> str:
    """With spec.learning, the draft generation `cr` serves (spec or gen-N); empty without."""
    if cr.spec.learning is None:
        return ""
    draft = cr.spec.speculative.draft_model
    return draft_label(generation_of_draft(cr.metadata.name, draft.dump() if draft else None))


def observe(ctx: Context, body: dict[str, Any], kind: Kind, deployment: dict[str, Any] | None = None) -> Observed:
    """The resource's workload of `kind` (read unless given; one of that name it does not control is not
    its own, and counts as none) and its pods: from the pod watch's index when the operator runs one, since
    listing a namespace's pods per refresh costs the API server O(pods) each time. Only pods it made count
    (their controller chain ends at it): a pod labelled as its own by anyone else must not make it Degraded
    or roll it back."""
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid")
    if deployment is None:
        deployment = ctx.kube.get(kind.api_version, kind.plural, namespace, object_name(kind, name))
        deployment = deployment if controlled_by(deployment, uid) else None
    if ctx.pods is not None:
        labelled = list(ctx.pods.get((namespace, name), ()))
    else:
        labelled = ctx.kube.list("v1", "pods", namespace, label_selector(selector_labels(name)))
    pods = [p for p in labelled if ctx.ownership.pod_resource(namespace, p) == uid]
    return Observed(deployment=deployment, pods=pods)
