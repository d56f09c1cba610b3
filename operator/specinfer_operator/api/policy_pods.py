"""The tenant policy's pod and Service rules: sidecars, the ServiceAccount, images, runtime class, grace period,
AppArmor, what holds nodes (disruption budgets, node-pinning annotations), the NPU resource, the Service type and
learning.

Images are compared as references: a reference must follow the grammar of container image references
(`[registry[:port]/]path[:tag][@digest]`, as github.com/distribution/reference parses them: no empty or `..`
component), and a prefix matches whole components, so that `registry.example.com/ml/../../evil`,
`registry.example.com/ml-evil/x` and `registry.example.com.evil.io/x` are not under `registry.example.com/ml`.
"""

from __future__ import annotations

from specinfer_operator.api.policy_cel import OVERLAY, SPEC, WHY, containers, context, forbid, listed, present
from specinfer_runtime.celrules import Rule, along

_PART = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_TAG = "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = f"^(?:{_PART}(?:[.]{_PART})*(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
PREFIXES = "params.spec.allowedImagePrefixes"
APPARMOR = "container.apparmor.security.beta.kubernetes.io/"
# The AppArmor profiles Pod Security `baseline` allows (besides none): the runtime's, and those loaded on the node.
CONFINED = ("runtime/default", "localhost/")


def _under(image: str, prefix: str) -> str:
    """CEL: `image` is under `prefix`, component by component. A prefix ending in / is a registry or a path
    that images continue; without, it is a registry (followed by /) or a repository, which a tag or digest
    may follow. A single component is no registry: Docker reads `registry.example.com:1` as a Docker Hub image."""
    repository = " || ".join(f"{image}.startsWith({prefix} + '{c}')" for c in ":@")
    repository = f"{prefix}.contains('/') && ({image} == {prefix} || {repository})"
    return (
        f"({prefix}.endsWith('/') ? {image}.startsWith({prefix}) : "
        f"({image}.startsWith({prefix} + '/') || ({repository})))"
    )


def _image_allowed(image: str) -> str:
    return f"{image}.matches('{IMAGE_REFERENCE}') && {PREFIXES}.exists(p, {_under(image, 'p')})"


def _refused_images() -> str:
    """CEL: the images of the engine and the containers that are not allowed."""
    engine = f"{SPEC}.runtime.image"
    trainer = f"{SPEC}.learning.training.image"
    sidecars = [
        listed(f"{OVERLAY}.{group}", lambda c: f"{c}.filter(c, !({_image_allowed('c.image')})).map(c, c.image)")
        for group in ("containers", "initContainers")
    ]
    own = [f"({present(image)} && !({_image_allowed(image)}) ? [{image}] : [])" for image in (engine, trainer)]
    return " + ".join([*own, *sidecars])


def _not_root(c: str) -> str:
    pod = f"{OVERLAY}.securityContext"
    pod_has = f"has({pod})"
    pod_user = f"({pod_has} && has({pod}.runAsUser) ? {pod}.runAsUser : -1)"
    user = f"({context(c, 'runAsUser')} ? {c}.securityContext.runAsUser : {pod_user})"
    non_root = (
        f"({context(c, 'runAsNonRoot')} ? {c}.securityContext.runAsNonRoot : "
        f"({pod_has} && has({pod}.runAsNonRoot) && {pod}.runAsNonRoot))"
    )
    return f"({user} > 0 || ({user} == -1 && {non_root}))"


def _listed(path: str, allowed: str, message: str) -> Rule:
    """The value at `path`, where set, is one the policy's list `allowed` holds; `message` has two %s: the
    value and the list."""
    return forbid(
        along(path, lambda v: f"{v} in params.spec.{allowed}"),
        message,
        path.removeprefix("object"),
        (path, f"params.spec.{allowed}"),
    )


_ANNOTATIONS = f"{SPEC}.podTemplate.metadata.annotations"


_BUDGET = f"{SPEC}.disruptionBudget"
# Engine pods: replicas, each a group of parallelism.nodes pods.
_PODS = f"{SPEC}.replicas * ({present(f'{SPEC}.parallelism.nodes')} ? {SPEC}.parallelism.nodes : 1)"


def _evicts(budget: str) -> str:
    """CEL: the disruption budget `budget` lets a drain evict a pod while every pod is up (or is turned off;
    with neither field set it is maxUnavailable 1)."""
    least, most = f"{budget}.minAvailable", f"{budget}.maxUnavailable"
    off = f"(has({budget}.enabled) && !{budget}.enabled)"
    evicts = f"(has({most}) ? {most} >= 1 : (!has({least}) || {least} == 0 || {least} < {_PODS}))"
    return f"({off} || {evicts})"


# Pod annotations that keep a node from being drained or scaled down while the pod runs (Karpenter's, the
# cluster autoscaler's), with the value that does it: they hold a node as a budget that lets no pod go does.
NODE_PINS = {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def _pins(key: str) -> str:
    """CEL: the pod annotation `key` (with its value) keeps the pod's node."""
    value = f"{_ANNOTATIONS}[{key}].lowerAscii()"
    return " || ".join(f"({key} == '{k}' && {value} == '{v}')" for k, v in NODE_PINS.items())


def _confined(key: str) -> str:
    value = f"{_ANNOTATIONS}[{key}]"
    return f"!{key}.startsWith('{APPARMOR}') || {value} == '{CONFINED[0]}' || {value}.startsWith('{CONFINED[1]}')"


POD_RULES: tuple[Rule, ...] = (
    forbid(
        f"params.spec.sidecarsMayRunAsRoot || ({containers(_not_root)})",
        f"{WHY} runs sidecars and init containers only as a user other than root: set runAsUser (not 0) or "
        "runAsNonRoot: true in their securityContext, or in spec.podTemplate.spec.securityContext",
        ".spec.podTemplate.spec.containers",
    ),
    forbid(
        "params.spec.sidecarsMayEscalate || ("
        + containers(
            lambda c: f"!({context(c, 'allowPrivilegeEscalation')}) || !{c}.securityContext.allowPrivilegeEscalation"
        )
        + ")",
        f"{WHY} does not allow sidecars and init containers allowPrivilegeEscalation true: remove it",
        ".spec.podTemplate.spec.containers",
    ),
    forbid(
        f"params.spec.serviceAccountNameAllowed || !({present(f'{OVERLAY}.serviceAccountName')})",
        f"{WHY} does not allow choosing the pods' ServiceAccount (it would run them as any ServiceAccount "
        "of the namespace, with its token): remove serviceAccountName",
        ".spec.podTemplate.spec.serviceAccountName",
    ),
    forbid(
        f"size({PREFIXES}) == 0 || ((!has({SPEC}.runtime.image) || {_image_allowed(f'{SPEC}.runtime.image')}) "
        f"&& (!({present(f'{SPEC}.learning.training.image')}) || {_image_allowed(f'{SPEC}.learning.training.image')}) "
        f"&& ({containers(lambda c: _image_allowed(f'{c}.image'))}))",
        f"images %s are not allowed by {WHY}, which allows image references ([registry/]path[:tag][@digest], "
        "every component a name: no empty or '..' one) under %s, component by component: use an image from an "
        "allowed registry",
        ".spec.runtime.image",
        (_refused_images(), PREFIXES),
    ),
    _listed(
        f"{OVERLAY}.runtimeClassName",
        "allowedRuntimeClasses",
        f"runtimeClassName %s is not allowed by {WHY}, which allows %s: remove it (the nodes' default runtime), "
        "or ask the platform team to allow the RuntimeClass",
    ),
    forbid(
        along(
            f"{OVERLAY}.terminationGracePeriodSeconds",
            lambda g: f"{g} <= params.spec.maxTerminationGracePeriodSeconds",
        ),
        f"terminationGracePeriodSeconds %d is above the %d seconds {WHY} allows: lower it",
        ".spec.podTemplate.spec.terminationGracePeriodSeconds",
        (f"{OVERLAY}.terminationGracePeriodSeconds", "params.spec.maxTerminationGracePeriodSeconds"),
    ),
    forbid(
        "params.spec.appArmorUnconfinedAllowed || " + along(_ANNOTATIONS, lambda m: f"{m}.all(k, {_confined('k')})"),
        f"AppArmor annotations %s are not allowed by {WHY}: a container runs under {CONFINED[0]} or a "
        f"{CONFINED[1]} profile, as Pod Security baseline requires: use one of those, or remove the annotation",
        ".spec.podTemplate.metadata.annotations",
        (f"{_ANNOTATIONS}.filter(k, !({_confined('k')})).map(k, k + '=' + {_ANNOTATIONS}[k])",),
    ),
    forbid(
        f"params.spec.drainBlockingBudgetsAllowed || {along(_BUDGET, _evicts)}",
        f"disruptionBudget lets none of the %d pods be evicted (maxUnavailable 0, or minAvailable as many as the "
        f"pods), which holds every drain of their nodes until the budget goes, and {WHY} does not allow it: set "
        "maxUnavailable: 1",
        ".spec.disruptionBudget",
        (_PODS,),
    ),
    forbid(
        "params.spec.drainBlockingBudgetsAllowed || " + along(_ANNOTATIONS, lambda m: f"!{m}.exists(k, {_pins('k')})"),
        "pod annotations %s keep the pods' nodes from being drained or scaled down while they run, as a "
        f"disruption budget that lets no pod go does, and {WHY} does not allow it (drainBlockingBudgetsAllowed): "
        "remove them",
        ".spec.podTemplate.metadata.annotations",
        (f"{_ANNOTATIONS}.filter(k, {_pins('k')}).map(k, k + '=' + {_ANNOTATIONS}[k])",),
    ),
    forbid(
        f"!has({SPEC}.learning) || (params.spec.learningAllowed "
        "&& params.spec.allowedVolumeTypes.exists(t, t == 'persistentVolumeClaim'))",
        f"{WHY} does not allow learning (engines recording the prompts they serve on a persistentVolumeClaim, Jobs "
        "training drafts on them): remove spec.learning, or ask the platform team to allow it",
        ".spec.learning",
    ),
    _listed(
        f"{SPEC}.resources.npuResourceName",
        "allowedNpuResourceNames",
        f"npuResourceName %s is not allowed by {WHY}, which allows %s: remove it (the operator's default), or use "
        "an allowed one",
    ),
    _listed(
        f"{SPEC}.service.type",
        "allowedServiceTypes",
        f"Service type %s is not allowed by {WHY}, which allows %s: use ClusterIP, and a Gateway or an Ingress to "
        "reach it from outside the cluster",
    ),
)
