"""Warning-level rules: accepted configurations that probably do not do what the user expects.

These cannot be CEL rules (a CEL rule refuses); they reach the user as `specinfer validate` warnings,
Kubernetes Events and the ConfigValid condition message.
"""

from __future__ import annotations

from specinfer_runtime import flags, passthrough
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.methods import MTP_ALIASES, PADDED_BATCH_METHODS
from specinfer_runtime.sampling import RejectionSamplerConfig
from specinfer_runtime.validation import Problem

BLOCK_VERIFY_MIN_K = 3


def _tuned(sampler: RejectionSamplerConfig) -> bool:
    defaults = RejectionSamplerConfig()
    return (sampler.posterior_threshold, sampler.posterior_alpha) != (
        defaults.posterior_threshold,
        defaults.posterior_alpha,
    )


def advise(spec: EngineSpec, prefix: str = "spec") -> list[Problem]:
    """Warnings for a valid engine spec, each pointing at the field to reconsider."""
    sc = spec.speculative
    k = spec.effective_k()
    path = f"{prefix}.speculative" if prefix else "speculative"
    found: list[Problem] = []
    if sc.method in MTP_ALIASES:
        found.append(
            Problem(
                f"{path}.method",
                f"{sc.method} is a deprecated vLLM alias of mtp; it is rendered as mtp",
                "R1",
            )
        )
    if sc.num_speculative_tokens is None and sc.method == "suffix":
        found.append(
            Problem(
                f"{path}.numSpeculativeTokens",
                f"not set: rendering {k} = min(suffix.maxTreeDepth, 14); vLLM would default to the tree "
                "depth, which Ascend refuses above 14",
                "R3",
            )
        )
    rs = sc.rejection_sampler
    if rs is not None and rs.block_verify and k < BLOCK_VERIFY_MIN_K:
        found.append(
            Problem(
                f"{path}.rejectionSampler.blockVerify",
                f"Block Verify only has an effect when numSpeculativeTokens >= {BLOCK_VERIFY_MIN_K} (K is {k})",
                "R10",
            )
        )
    # Compared with the defaults, not with "was it set": the API server fills the defaults in.
    if rs is not None and not rs.entropy_verify and _tuned(rs):
        found.append(
            Problem(
                f"{path}.rejectionSampler",
                "posteriorThreshold and posteriorAlpha only apply with entropyVerify: true",
                "R10",
            )
        )
    if sc.disable_padded_drafter_batch and sc.method not in PADDED_BATCH_METHODS:
        found.append(
            Problem(
                f"{path}.disablePaddedDrafterBatch",
                f"has no effect with method {sc.method}; it applies to eagle, eagle3 and mtp",
                "R12",
            )
        )
    if sc.effective_method() == "mtp" and k > 1:
        severity = "are not guaranteed" if k >= 3 else "may suffer"
        found.append(
            Problem(
                f"{path}.numSpeculativeTokens",
                f"mtp with K = {k}: the checkpoint exposes a single MTP layer, so accuracy and speed {severity} "
                "beyond K = 1",
                "R14",
            )
        )
    found += _verification(spec, path)
    found += unknown_flags(spec, prefix)
    found += unknown_additional_keys(spec, prefix)
    return found


def _verification(spec: EngineSpec, path: str) -> list[Problem]:
    """Options vLLM takes that do not do on vLLM-Ascend, or to the output, what they say."""
    sc = spec.speculative
    found = []
    if sc.rejection_sample_method == "block":
        found.append(
            Problem(
                f"{path}.rejectionSampleMethod",
                "vLLM-Ascend ignores vLLM's block verification (its V1 runner builds its own sampler, its V2 runner "
                "verifies as standard); its own is rejectionSampler.blockVerify",
                "R24",
            )
        )
    if sc.rejection_sample_method == "synthetic":
        found.append(
            Problem(
                f"{path}.rejectionSampleMethod",
                "synthetic accepts drafts at the rates given without checking them: the output is not the target "
                "model's; use it to benchmark speed, never to serve",
                "R24",
            )
        )
    if sc.draft_model is not None and sc.draft_model.quantization:
        found.append(
            Problem(
                f"{path}.draftModel.quantization",
                "vLLM-Ascend drafts with the target model's quantization and ignores the draft's (it resets it with "
                "a warning); plain vLLM applies it",
                "R27",
            )
        )
    return found


def unknown_additional_keys(spec: EngineSpec, prefix: str) -> list[Problem]:
    """additionalConfig keys vLLM-Ascend does not read: it ignores them without a word."""
    path = f"{prefix}.additionalConfig" if prefix else "additionalConfig"
    return [
        Problem(
            f"{path}.{key}",
            "not a key vLLM-Ascend reads (v0.25 to v0.27): it ignores it without a warning; check the spelling "
            "against vLLM-Ascend's additional_config documentation",
            "passthrough",
        )
        for key in sorted(spec.additional_config or {})
        if key not in passthrough.ASCEND_ADDITIONAL_KEYS
    ]


def unknown_flags(spec: EngineSpec, prefix: str) -> list[Problem]:
    """engineArgs that no option of the vLLM the table was made from matches: vLLM would stop at start."""
    if not spec.engine_args:
        return []
    path = f"{prefix}.engineArgs" if prefix else "engineArgs"
    return [
        Problem(
            f"{path}[{i}]",
            f"'{arg}' is not an option of vllm serve in vLLM {flags.VLLM_VERSION}, nor a prefix of exactly one: "
            "vLLM stops at start on it unless the runtime image's vLLM is newer and knows it",
            "R15",
        )
        for i, arg in enumerate(spec.engine_args)
        if flags.unknown(arg)
    ]
