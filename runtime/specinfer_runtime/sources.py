"""Where model files come from: Hugging Face repositories or volumes, and the models that use them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def exactly_one(fields: tuple[str, ...], what: str) -> Rule:
    """One of several alternative sub-objects must be set."""
    flags = ", ".join(f"has(self.{f})" for f in fields)
    names = ", ".join(fields)
    return Rule(
        id="one-of",
        rule=f"[{flags}].filter(x, x).size() == 1",
        message=f"set exactly one of {names} for the {what}",
    )


class PersistentVolumeClaimSource(Section):
    """A PersistentVolumeClaim holding the model files."""

    claim_name: str = Field(
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Name of the PersistentVolumeClaim in the namespace.",
    )
    sub_path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^[^/]",
        description="Relative directory inside the claim that holds this model; the claim's root when unset.",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="volume",
            rule="!has(self.subPath) || !self.subPath.split('/').exists(p, p == '..')",
            message="subPath may not contain '..': give a directory inside the claim",
            field_path=".subPath",
        ),
    )


class HostPathSource(Section):
    """A directory on the node (models pre-staged on every NPU node)."""

    path: str = Field(
        max_length=1024,
        pattern=r"^/[^\x00]*$",
        description="Absolute path of the model directory on the node.",
    )


class SecretKeyReference(Section):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="Name of the Secret.")
    key: str = Field(default="token", max_length=253, description="Key inside the Secret.")


class HuggingFaceSource(Section):
    """Download the model from the Hugging Face Hub at start-up."""

    token_secret_ref: SecretKeyReference | None = Field(
        default=None, description="Secret key holding a Hub token, exported as HF_TOKEN (gated models)."
    )
    revision: str | None = Field(
        default=None,
        max_length=128,
        description="Branch, tag or commit of the repository (vLLM: `revision`).",
    )


class ModelSource(Section):
    """Where the model files are. Without a source, `name` is fetched from the Hugging Face Hub."""

    pvc: PersistentVolumeClaimSource | None = Field(default=None, description="Load from a PVC.")
    host_path: HostPathSource | None = Field(default=None, description="Load from a node directory.")
    hugging_face: HuggingFaceSource | None = Field(
        default=None, description="Download `name` from the Hugging Face Hub."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (exactly_one(("pvc", "hostPath", "huggingFace"), "model source"),)

    def volume(self) -> PersistentVolumeClaimSource | HostPathSource | None:
        return self.pvc or self.host_path


class StorageVolume(Section):
    """A writable volume."""

    pvc: PersistentVolumeClaimSource | None = Field(default=None, description="A PersistentVolumeClaim.")
    host_path: HostPathSource | None = Field(default=None, description="A directory on the node.")

    cel_rules: ClassVar[tuple[Rule, ...]] = (exactly_one(("pvc", "hostPath"), "storage"),)


MODEL_ROOT = "/models"
HIDDEN_STATES_PATH = "/hidden-states"


class ModelReference(Section):
    """A model checkpoint: a Hugging Face repository id, or files on a volume."""

    name: str = Field(
        min_length=1,
        max_length=256,
        description=(
            "Hugging Face repository id (e.g. `meta-llama/Meta-Llama-3.1-8B-Instruct`). With a PVC or "
            "hostPath source it names the model and the volume directory is loaded instead."
        ),
    )
    source: ModelSource | None = Field(
        default=None, description="Where the files are; the Hugging Face Hub when unset."
    )

    def load_path(self, role: str) -> str:
        """What vLLM is given: the mount point of a volume source, else the repository id."""
        if self.source and self.source.volume():
            return f"{MODEL_ROOT}/{role}"
        return self.name


class TargetModel(ModelReference):
    """The model being served (the verifier)."""

    served_model_name: str | None = Field(
        default=None,
        max_length=256,
        description="Model name clients use in API requests (vLLM: `--served-model-name`); defaults to `name`.",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, le=10_485_760, description="Context length (vLLM: `--max-model-len`)."
    )
    quantization: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9_-]+$",
        description="Weight quantization method (vLLM: `--quantization`), e.g. `ascend` for W8A8 checkpoints.",
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow model code from the checkpoint (vLLM: `--trust-remote-code`)."
    )

    def served_name(self) -> str:
        return self.served_model_name or self.name
