"""Where model files come from: Hugging Face repositories or volumes, and the models that use them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.names import DNS_SUBDOMAIN


def not_a_flag(field: str, what: str) -> Rule:
    """A string that lands in the `vllm serve` command line as a value may not look like a flag."""
    return Rule(
        id="R17",
        rule=f"!has(self.{field}) || !self.{field}.startsWith('-')",
        message=f"%s starts with '-', so vLLM would read it as a flag, not as the {what}: remove the leading '-'",
        args=(f"self.{field}",),
        field_path=f".{field}",
    )


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

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="volume",
            rule="!self.path.split('/').exists(p, p == '..')",
            message="path may not contain '..' (Kubernetes refuses it): give the directory itself",
            field_path=".path",
        ),
    )


class SecretKeyReference(Section):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="Name of the Secret.")
    key: str = Field(default="token", max_length=253, description="Key inside the Secret.")


class HuggingFaceSource(Section):
    """Download the model from the Hugging Face Hub at start-up."""

    token_secret_ref: SecretKeyReference | None = Field(
        default=None,
        description="Secret key holding a Hub token (gated or private models). The target's is exported as "
        "HF_TOKEN for vLLM; a draft's own token is used by specinfer-runtime to download the draft before vLLM "
        "starts, so target and draft may come from different Secrets.",
    )
    revision: str | None = Field(
        default=None,
        max_length=128,
        description="Branch, tag or commit of the repository (vLLM: `revision`).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (not_a_flag("revision", "revision"),)


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
# The environment of Hub downloads: vLLM reads the first two, specinfer-runtime the draft's own token.
HF_TOKEN_ENV = "HF_TOKEN"
HF_HOME_ENV = "HF_HOME"
DRAFT_TOKEN_ENV = "SPECINFER_DRAFT_HF_TOKEN"
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

    def hub_token(self) -> SecretKeyReference | None:
        hub = self.source.hugging_face if self.source else None
        return hub.token_secret_ref if hub else None

    def load_path(self, role: str) -> str:
        """What vLLM is given: the model's directory in the pod when it has one, else the repository id.
        A volume is mounted there; a draft with a Hub token of its own is downloaded there by
        specinfer-runtime (vLLM has one token, HF_TOKEN, which is the target's)."""
        if (self.source and self.source.volume()) or (role == "draft" and self.hub_token()):
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
        pattern=r"^[a-z0-9_][a-z0-9_-]*$",
        description="Weight quantization method (vLLM: `--quantization`), e.g. `ascend` for W8A8 checkpoints.",
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow model code from the checkpoint (vLLM: `--trust-remote-code`)."
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        not_a_flag("name", "model"),
        not_a_flag("servedModelName", "served model name"),
    )

    def served_name(self) -> str:
        return self.served_model_name or self.name
