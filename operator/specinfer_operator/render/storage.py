"""The volumes the models need (pure): a volume source mounted read-only, or a download directory for the
Hub, and where the hidden states are written. A download directory on node disk (an emptyDir) is lost with
its pod: every pod downloads the model again when it starts, which a group over several nodes does on each of
its nodes (download_warnings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specinfer_operator.api.container import HF_HOME, ResourceSettings
from specinfer_operator.api.resource import SpeculativeInferenceSpec
from specinfer_operator.render.sizing import download_limit
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.parallelism import Parallelism
from specinfer_runtime.sources import (
    DRAFT_TOKEN_ENV,
    HF_HOME_ENV,
    HF_TOKEN_ENV,
    HIDDEN_STATES_PATH,
    MODEL_ROOT,
    HostPathSource,
    PersistentVolumeClaimSource,
    SecretKeyReference,
)
from specinfer_runtime.validation import Problem

# The download directories: the Hub cache (HF_HOME) and a draft's own, downloaded with its own token.
DOWNLOADS = ("hf-cache", "model-draft")

Volume = PersistentVolumeClaimSource | HostPathSource


def _volume(name: str, source: Volume, read_only: bool) -> dict[str, Any]:
    if isinstance(source, PersistentVolumeClaimSource):
        return {
            "name": name,
            "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": read_only},
        }
    kind = "Directory" if read_only else "DirectoryOrCreate"
    return {"name": name, "hostPath": {"path": source.path, "type": kind}}


def _mount(name: str, path: str, source: Volume, read_only: bool) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": name, "mountPath": path, "readOnly": read_only}
    if isinstance(source, PersistentVolumeClaimSource) and source.sub_path:
        mount["subPath"] = source.sub_path
    return mount


@dataclass
class Storage:
    """What the models and the hidden-state output add to the pod."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)

    def downloads(self) -> list[dict[str, Any]]:
        """The emptyDirs models are downloaded into: node disk, which the pod requests."""
        return [v for v in self.volumes if v["name"] in DOWNLOADS and "emptyDir" in v]

    def add(self, name: str, path: str, source: Volume, read_only: bool) -> None:
        self.volumes.append(_volume(name, source, read_only))
        self.mounts.append(_mount(name, path, source, read_only))


def _secret_env(name: str, secret: SecretKeyReference) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}


def _scratch(name: str, resources: ResourceSettings, parallelism: Parallelism) -> dict[str, Any]:
    """A download directory: the cache claim when there is one (for the Hub cache), else an emptyDir of
    resources.modelCache, or of what the weights can take (sizing.download_limit)."""
    if name == "hf-cache" and resources.model_cache_claim:
        return {"name": name, "persistentVolumeClaim": {"claimName": resources.model_cache_claim}}
    return {"name": name, "emptyDir": {"sizeLimit": download_limit(resources, parallelism)}}


def storage(spec: EngineSpec, resources: ResourceSettings) -> Storage:
    """Volume models are mounted under /models/<role>. Hub models share a cache; vLLM downloads them with
    the target's token (HF_TOKEN), and a draft with a token of its own is downloaded into /models/draft
    by specinfer-runtime with that token (SPECINFER_DRAFT_HF_TOKEN)."""
    out = Storage()
    from_hub = False
    for role, ref in (("target", spec.model), ("draft", spec.speculative.draft_model)):
        if ref is None:
            continue
        volume = ref.source.volume() if ref.source else None
        token = ref.hub_token()
        if volume is not None:
            out.add(f"model-{role}", f"{MODEL_ROOT}/{role}", volume, read_only=True)
        elif role == "draft" and token is not None:
            out.volumes.append(_scratch("model-draft", resources, spec.parallelism))
            out.mounts.append({"name": "model-draft", "mountPath": f"{MODEL_ROOT}/draft"})
            out.env.append(_secret_env(DRAFT_TOKEN_ENV, token))
        else:
            from_hub = True
            if token is not None:
                out.env.append(_secret_env(HF_TOKEN_ENV, token))
    if from_hub:
        out.volumes.append(_scratch("hf-cache", resources, spec.parallelism))
        out.mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
        out.env.append({"name": HF_HOME_ENV, "value": HF_HOME})
    hidden = spec.speculative.hidden_states
    if hidden is not None:
        target = hidden.storage.pvc or hidden.storage.host_path
        if target is not None:
            out.add("hidden-states", HIDDEN_STATES_PATH, target, read_only=False)
    return out


def download_warnings(spec: SpeculativeInferenceSpec) -> list[Problem]:
    """Downloads into emptyDirs by an engine over several nodes: each pod of a group downloads the whole model
    onto its own node's disk, and all of them again whenever the group restarts (one pod restarting restarts
    the group), where a claim every node mounts would keep one copy across restarts."""
    nodes = spec.parallelism.group_size()
    if nodes == 1:
        return []
    each = f"each of the {nodes} pods of a group downloads"
    again = "onto its own node, and all of them again whenever the group restarts"
    found = []
    for volume in storage(spec.engine(), spec.resources).downloads():
        size = volume["emptyDir"]["sizeLimit"]
        if volume["name"] == "hf-cache":
            found.append(
                Problem(
                    "spec.resources.modelCacheClaim",
                    f"not set: {each} the Hub models into an emptyDir (up to {size}) {again}: set modelCacheClaim to "
                    "a ReadWriteMany PersistentVolumeClaim that every node can mount, or load the model from a pvc "
                    "source",
                    "pod",
                )
            )
        else:
            found.append(
                Problem(
                    "spec.speculative.draftModel.source",
                    f"{each} the draft (its own Hub token) into an emptyDir (up to {size}) {again}; modelCacheClaim "
                    "holds only the shared Hub cache: load the draft from a pvc source",
                    "pod",
                )
            )
    return found
