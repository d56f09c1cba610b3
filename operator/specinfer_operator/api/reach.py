"""Where each field of the spec goes, and what governs it: the table of docs/security.md.

Every leaf of the CRD's spec schema matches exactly one row (a test walks the generated schema): a field
added to the spec fails that test until a row says which child object it reaches (the engine pods, the
Service, the engine ConfigMap, ...) and which rules of the tenant policy govern it, or why none is needed.
A row's `fields` is a path of the schema: `[]` marks a list, `{a,b}` one of several names, `*` any one
field and `**` everything below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

POD = "pod"
CONTAINER = "pod (engine container)"
SIDECAR = "pod (sidecars)"
SERVICE = "Service"
CONFIG = "engine ConfigMap"
WORKLOAD = "Deployment or LeaderWorkerSet"
BUDGET = "PodDisruptionBudget"
AUTOSCALER = "HorizontalPodAutoscaler"
POOL = "InferencePool"
LEARNING = "PersistentVolumeClaim, training Job"
NONE = "none (the operator's own)"

_QUOTA = "the pods' requests and limits, which the namespace's ResourceQuota and LimitRange bound as for any pod"
_ENGINE = "vLLM's configuration, inside the engine container the tenant already runs (its own image, its own pod)"
_NOT_SECRET = "ConfigMaps, which Kubernetes does not keep confidential (Secrets are governed)"
_CONTAINERS = "spec.podTemplate.spec.{containers,initContainers}[]"
_AFFINITY = "spec.placement.affinity.nodeAffinity"
_SOURCES = ("spec.model.source", "spec.speculative.draftModel.source")


@dataclass(frozen=True)
class Reach:
    """Fields of the spec (a pattern), the child object they reach, and the policy fields that govern them
    (camelCase) with how, or why no rule is needed."""

    fields: str
    reaches: str
    policy: tuple[str, ...]
    why: str

    def pattern(self) -> re.Pattern[str]:
        out = re.escape(self.fields).replace(r"\*\*", ".+").replace(r"\*", "[^.]+")
        out = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(?:" + m.group(1).replace(",", "|") + ")", out)
        return re.compile(out + r"\Z")


FIELDS: tuple[Reach, ...] = (
    # The engine container.
    Reach(
        "spec.runtime.image",
        CONTAINER,
        ("allowedImagePrefixes",),
        "parsed as an image reference, then compared with the prefixes component by component",
    ),
    Reach("spec.runtime.engineVersions.*", NONE, (), "what the image runs, for the checks at kubectl apply"),
    Reach(
        "spec.runtime.imagePullPolicy",
        CONTAINER,
        (),
        "when the node pulls the image again; the image is governed. "
        "Whether a cached private image needs its pull Secret again is the kubelet's and the AlwaysPullImages "
        "admission plugin's matter, as for any pod",
    ),
    Reach(
        "spec.runtime.imagePullSecrets[].name",
        POD,
        ("allowedImagePullSecrets",),
        "registry credentials by name, which the kubelet uses to pull the pods' images",
    ),
    Reach(
        "spec.runtime.env[].{name,value}",
        CONTAINER,
        (),
        "the engine's environment; the variables the operator sets (HF_TOKEN, HF_HOME, ...) are refused (R18)",
    ),
    Reach("spec.runtime.env[].valueFrom.secretKeyRef.*", CONTAINER, ("allowedSecrets",), "Secrets by name"),
    Reach("spec.runtime.env[].valueFrom.configMapKeyRef.*", CONTAINER, (), _NOT_SECRET),
    Reach("spec.runtime.env[].valueFrom.fieldRef.fieldPath", CONTAINER, (), "the pod's own fields (downward API)"),
    Reach("spec.runtime.envFrom[].secretRef.*", CONTAINER, ("allowedSecrets",), "Secrets by name"),
    Reach("spec.runtime.envFrom[].{prefix,configMapRef.name,configMapRef.optional}", CONTAINER, (), _NOT_SECRET),
    Reach(
        "spec.runtime.volumeMounts[].*",
        CONTAINER,
        ("allowedHostPaths",),
        "a host path mounted without readOnly "
        "needs a writable prefix; no mount on, in or above the operator's paths (CRD)",
    ),
    Reach("spec.probes.*.*", CONTAINER, (), "timings of the kubelet's probes of the engine's /health"),
    Reach(
        "spec.resources.npuResourceName",
        CONTAINER,
        ("allowedNpuResourceNames",),
        "an extended resource a ResourceQuota counts apart from the others",
    ),
    Reach(
        "spec.resources.{npusPerPod,cpu,memory,cpuLimit,memoryLimit}",
        CONTAINER,
        (),
        f"{_QUOTA}; unset, a share of a node per NPU, which counts against a ResourceQuota as set ones do",
    ),
    Reach(
        "spec.resources.{sharedMemory,modelCache}",
        POD,
        (),
        "sizes of the pod's emptyDirs (memory, node disk), requested from the node (memory, ephemeral-storage) "
        "and evicted beyond them",
    ),
    Reach("spec.resources.modelCacheClaim", POD, ("allowedVolumeTypes",), "a persistentVolumeClaim volume, written"),
    # Where the pods run.
    Reach("spec.placement.nodeSelector", POD, ("controlPlaneAllowed",), "no control-plane node label"),
    Reach(
        "spec.placement.tolerations[].*",
        POD,
        ("tolerateAllTaintsAllowed", "controlPlaneAllowed"),
        "a toleration names its taint's key, and not the control plane's",
    ),
    *(
        Reach(
            f"{_AFFINITY}.{terms}.matchExpressions[].*",
            POD,
            ("controlPlaneAllowed",),
            "no control-plane node label with In or Exists (NotIn and DoesNotExist keep away)",
        )
        for terms in (
            "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[]",
            "preferredDuringSchedulingIgnoredDuringExecution[].preference",
        )
    ),
    Reach(
        f"{_AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchFields[].*",
        POD,
        (),
        "a node by name: its taints still apply, and the control plane's taint cannot be tolerated",
    ),
    Reach(
        f"{_AFFINITY}.preferredDuringSchedulingIgnoredDuringExecution[].{{weight,preference.matchFields[].*}}",
        POD,
        (),
        "a preference among the nodes the pods may use: taints still apply",
    ),
    Reach(
        "spec.placement.affinity.{podAffinity,podAntiAffinity}.**",
        POD,
        (),
        "where the pods go relative to other pods: it limits their own placement only, and no taint is passed",
    ),
    Reach("spec.placement.topologySpreadConstraints[].**", POD, (), "how the pods spread: their own placement only"),
    Reach("spec.placement.spreadAcrossNodes", POD, (), "a preferred spread of the pods over nodes: their own only"),
    Reach("spec.placement.schedulerName", POD, ("allowedSchedulers",), "default-scheduler, or one listed"),
    Reach("spec.placement.priorityClassName", POD, ("allowedPriorityClasses",), "none listed: any but system-*"),
    # The pod template overlay.
    Reach(
        "spec.podTemplate.metadata.labels",
        POD,
        (),
        "labels of the tenant's own pods (the operator's selector "
        "labels win); what a selector elsewhere does with them is up to whoever wrote it, as for any pod",
    ),
    Reach(
        "spec.podTemplate.metadata.annotations",
        POD,
        ("appArmorUnconfinedAllowed", "drainBlockingBudgetsAllowed"),
        "AppArmor annotations: runtime/default or localhost/* only, as Pod Security baseline; "
        "karpenter.sh/do-not-disrupt: true and cluster-autoscaler.kubernetes.io/safe-to-evict: false hold the "
        "pods' nodes, as a budget that lets no pod go; the others annotate the tenant's own pods",
    ),
    Reach(
        "spec.podTemplate.spec.serviceAccountName", POD, ("serviceAccountNameAllowed",), "unset, the pods get no token"
    ),
    Reach("spec.podTemplate.spec.runtimeClassName", POD, ("allowedRuntimeClasses",), "one listed"),
    Reach(
        "spec.podTemplate.spec.terminationGracePeriodSeconds",
        POD,
        ("maxTerminationGracePeriodSeconds",),
        "how long a stopping pod holds its NPUs and a node drain",
    ),
    Reach(
        "spec.podTemplate.spec.securityContext.{runAsUser,runAsNonRoot}",
        POD,
        ("sidecarsMayRunAsRoot",),
        "the user of sidecars; the engine has no capabilities, no escalation and seccomp RuntimeDefault whatever "
        "its user",
    ),
    Reach(
        "spec.podTemplate.spec.securityContext.{runAsGroup,fsGroup,fsGroupChangePolicy,supplementalGroups[]}",
        POD,
        (),
        "groups of the pod's processes and of its volumes' files: only volumes the policy allows",
    ),
    Reach("spec.podTemplate.spec.volumes[].name", POD, (), "what mounts refer to; the operator's names are refused"),
    Reach("spec.podTemplate.spec.volumes[].emptyDir.*", POD, ("allowedVolumeTypes",), "scratch space of the pod"),
    Reach(
        "spec.podTemplate.spec.volumes[].hostPath.*",
        POD,
        ("allowedVolumeTypes", "allowedHostPaths"),
        "under an "
        "allowed prefix; a writable one when mounted without readOnly or of type DirectoryOrCreate or FileOrCreate",
    ),
    Reach("spec.podTemplate.spec.volumes[].configMap.**", POD, ("allowedVolumeTypes",), _NOT_SECRET),
    Reach(
        "spec.podTemplate.spec.volumes[].secret.**", POD, ("allowedVolumeTypes", "allowedSecrets"), "Secrets by name"
    ),
    Reach(
        "spec.podTemplate.spec.volumes[].persistentVolumeClaim.*",
        POD,
        ("allowedVolumeTypes",),
        "claims of the namespace, made within its StorageClasses and quotas",
    ),
    Reach("spec.podTemplate.spec.volumes[].nfs.*", POD, ("allowedVolumeTypes", "allowedNfsServers"), "servers listed"),
    Reach(
        "spec.podTemplate.spec.volumes[].csi.**",
        POD,
        ("allowedVolumeTypes", "allowedCsiDrivers", "allowedSecrets"),
        "drivers listed; nodePublishSecretRef a Secret allowed",
    ),
    Reach(f"{_CONTAINERS}.image", SIDECAR, ("allowedImagePrefixes",), "as spec.runtime.image"),
    Reach(
        f"{_CONTAINERS}.{{name,imagePullPolicy,command[],args[],workingDir,restartPolicy}}",
        SIDECAR,
        (),
        "the sidecar's own process, in an allowed image; `engine` is refused as a name",
    ),
    Reach(
        f"{_CONTAINERS}.env[].{{name,value,valueFrom.fieldRef.fieldPath}}",
        SIDECAR,
        (),
        "the sidecar's environment, the pod's own fields",
    ),
    Reach(f"{_CONTAINERS}.env[].valueFrom.configMapKeyRef.*", SIDECAR, (), _NOT_SECRET),
    Reach(
        f"{_CONTAINERS}.{{env[].valueFrom.secretKeyRef,envFrom[].secretRef}}.*",
        SIDECAR,
        ("allowedSecrets",),
        "Secrets by name",
    ),
    Reach(f"{_CONTAINERS}.envFrom[].{{prefix,configMapRef.name,configMapRef.optional}}", SIDECAR, (), _NOT_SECRET),
    Reach(f"{_CONTAINERS}.ports[].*", SIDECAR, (), "ports of the pod's own IP; the engine's (8000, http) are refused"),
    Reach(f"{_CONTAINERS}.resources.**", SIDECAR, (), _QUOTA),
    Reach(
        f"{_CONTAINERS}.securityContext.{{runAsUser,runAsNonRoot}}",
        SIDECAR,
        ("sidecarsMayRunAsRoot",),
        "not root unless allowed",
    ),
    Reach(
        f"{_CONTAINERS}.securityContext.allowPrivilegeEscalation",
        SIDECAR,
        ("sidecarsMayEscalate",),
        "false unless allowed (the operator sets it, and drops every capability)",
    ),
    Reach(
        f"{_CONTAINERS}.securityContext.{{runAsGroup,readOnlyRootFilesystem}}",
        SIDECAR,
        (),
        "a group, a read-only root: no privilege",
    ),
    Reach(f"{_CONTAINERS}.volumeMounts[].*", SIDECAR, ("allowedHostPaths",), "as spec.runtime.volumeMounts"),
    # The models and what vLLM is told: the engine ConfigMap, and the volumes sources become.
    *(
        row
        for source in _SOURCES
        for row in (
            Reach(f"{source}.pvc.*", POD, ("allowedVolumeTypes",), "a persistentVolumeClaim volume, read-only"),
            Reach(
                f"{source}.hostPath.path",
                POD,
                ("allowedVolumeTypes", "allowedHostPaths"),
                "a hostPath volume, read-only (type Directory)",
            ),
            Reach(f"{source}.huggingFace.tokenSecretRef.*", CONTAINER, ("allowedSecrets",), "a Secret by name"),
            Reach(f"{source}.huggingFace.revision", CONFIG, (), _ENGINE),
        )
    ),
    Reach(
        "spec.speculative.hiddenStates.storage.pvc.*",
        POD,
        ("allowedVolumeTypes",),
        "a persistentVolumeClaim volume, written",
    ),
    Reach(
        "spec.speculative.hiddenStates.storage.hostPath.path",
        POD,
        ("allowedVolumeTypes", "allowedHostPaths"),
        "a hostPath volume, written (type DirectoryOrCreate): a writable prefix",
    ),
    Reach("spec.model.{name,servedModelName,maxModelLen,quantization,trustRemoteCode}", CONFIG, (), _ENGINE),
    Reach("spec.speculative.draftModel.{name,maxModelLen,quantization}", CONFIG, (), _ENGINE),
    Reach("spec.speculative.*", CONFIG, (), _ENGINE),
    Reach("spec.speculative.{ngram,suffix,dspark,dynamicVerification,rejectionSampler}.*", CONFIG, (), _ENGINE),
    Reach("spec.speculative.{numSpeculativeTokensPerBatchSize[].*,hiddenStates.layerIds[]}", CONFIG, (), _ENGINE),
    Reach("spec.{graph,scheduling}.*", CONFIG, (), _ENGINE),
    Reach(
        "spec.{engineArgs[],compilationConfig,additionalConfig}",
        CONFIG,
        (),
        f"{_ENGINE}; the options the spec models, and those that would change how the engine is reached, are refused",
    ),
    Reach(
        "spec.parallelism.*",
        f"{CONFIG}, {POD}, {WORKLOAD}",
        (),
        "how many NPUs each pod requests and how many pods an engine spans: requests the ResourceQuota bounds",
    ),
    Reach("spec.speculative.tuning.*", NONE, (), "the operator's tuning of numSpeculativeTokens, within minK to maxK"),
    # The other children.
    Reach("spec.replicas", WORKLOAD, (), "how many engines: pods the ResourceQuota bounds"),
    Reach(
        "spec.autoscaling.*",
        AUTOSCALER,
        (),
        "an autoscaler of the resource itself, writing spec.replicas up to maxReplicas: pods the ResourceQuota "
        "bounds, as for spec.replicas",
    ),
    Reach(
        "spec.rollout.{maxSurge,maxUnavailable,progressDeadlineSeconds}", WORKLOAD, (), "how the tenant's own pods roll"
    ),
    Reach(
        "spec.rollout.{strategy,onFailure,canary.*}",
        f"{WORKLOAD} (the canary's)",
        (),
        "a canary is the same pods under another name, within the same quota",
    ),
    Reach(
        "spec.service.type",
        SERVICE,
        ("allowedServiceTypes",),
        "ClusterIP by default; NodePort and LoadBalancer reach beyond the cluster network",
    ),
    Reach("spec.service.port", SERVICE, (), "a port of the Service's own cluster IP"),
    Reach(
        "spec.service.annotations",
        SERVICE,
        (),
        "annotations of the tenant's own Service: the controllers that act "
        "on them (load balancers, external-dns) are the platform's to restrict, as for any Service",
    ),
    Reach(
        "spec.disruptionBudget.*",
        BUDGET,
        ("drainBlockingBudgetsAllowed",),
        "over the resource's own pods (the operator sets the selector); it must let a pod be evicted, or it would "
        "hold every drain of their nodes",
    ),
    Reach(
        "spec.inferencePool.endpointPickerRef.*",
        POOL,
        (),
        "the resource's own pods, and an Endpoint Picker in its own namespace (the reference has none)",
    ),
    Reach(
        "spec.telemetry.*", NONE, (), "the operator's scrape of the resource's own pods, bounded (see Untrusted pods)"
    ),
    Reach(
        "spec.learning.kind",
        f"{LEARNING}, {POD}",
        ("learningAllowed",),
        "the engines record a share of the prompts they serve on a claim of the namespace the resource owns, and "
        "Jobs of the namespace train on them: whether any of it may happen (off by default: a platform opts in)",
    ),
    Reach(
        "spec.learning.{storage.*,sampling.*,triggers.*}",
        f"{LEARNING}, {CONTAINER}",
        (),
        "the claim's size and class (the namespace's storage quota bounds it), and what the engines record on it: "
        "each engine only into its own directory, the roles asked for (users' turns by default), masked by the "
        "redact patterns (RE2 syntax, at most 16 of 256 characters), kept for the retention age",
    ),
    Reach(
        "spec.learning.training.image",
        LEARNING,
        ("allowedImagePrefixes",),
        "parsed as an image reference, then compared with the prefixes component by component, as spec.runtime.image",
    ),
    Reach(
        "spec.learning.training.{npus,cpu,memory,deadlineSeconds,epochs,learningRate,maxOutputTokens}",
        LEARNING,
        (),
        f"the Job's pod gets {_QUOTA}; it runs under the engine pods' security context, for a bounded time",
    ),
)


def row_of(leaf: str) -> list[Reach]:
    """The rows whose fields match the schema path `leaf` (exactly one, for a complete table)."""
    return [row for row in FIELDS if row.pattern().match(leaf)]


def field_table() -> str:
    """The Markdown table of docs/security.md."""
    lines = ["| fields | reach | governed by |", "|---|---|---|"]
    for row in FIELDS:
        policy = ", ".join(f"`{p}`" for p in row.policy)
        lines.append(f"| `{row.fields}` | {row.reaches} | {policy + ': ' if policy else 'no rule: '}{row.why} |")
    return "\n".join(lines) + "\n"
