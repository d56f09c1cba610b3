"""What decides how many drafts a request verifies, and the engine-side mechanism Auto may try (pure).

Auto tunes one K, or a schedule of K by batch size, from the profiles it measured. Some engines adapt on
their own, per request and step: vLLM's adaptive verification for dspark (`enable_adaptive_verification`) and
vLLM-Ascend's dynamic verification for dspark and dflash (`dynamic_spec_config`). Neither can be predicted
from the profiles, so Auto tries one on a canary once K has settled, and keeps it only when the canary's
requests decode at least minGainPercent faster than the stable pods (controller/verdict.py). While it
serves, Auto holds: the engine chooses.
"""

from __future__ import annotations

import copy
from typing import Any

from specinfer_operator.api.status import Adaptivity
from specinfer_runtime.speculative import SpeculativeConfig

STATIC_K: Adaptivity = "StaticK"
BY_BATCH_SIZE: Adaptivity = "KByBatchSize"
ADAPTIVE: Adaptivity = "AdaptiveVerification"
DYNAMIC: Adaptivity = "DynamicVerification"
ENGINE_SIDE = (ADAPTIVE, DYNAMIC)  # in the order worth trying: vLLM's own first, vLLM-Ascend's on older images
INITIAL_BUDGET = 5  # vLLM-Ascend's default initial_verify_budget_per_req, at most K


def serving(speculative: SpeculativeConfig) -> str:
    """The mechanism a configuration runs."""
    if speculative.dspark is not None and speculative.dspark.adaptive_verification:
        return ADAPTIVE
    if speculative.dynamic_verification is not None:
        return DYNAMIC
    return BY_BATCH_SIZE if speculative.num_speculative_tokens_per_batch_size else STATIC_K


def offered(speculative: SpeculativeConfig) -> tuple[str, ...]:
    """The engine-side mechanisms of this method that the spec does not run already, in the order worth trying
    (whether the image and graph mode allow them is for the spec's rules to say)."""
    if serving(speculative) in ENGINE_SIDE:
        return ()
    method = speculative.effective_method()
    return ((ADAPTIVE,) if method == "dspark" else ()) + ((DYNAMIC,) if method in ("dspark", "dflash") else ())


def switched_on(body: dict[str, Any], mechanism: str) -> dict[str, Any]:
    """A copy of the resource `body` with `mechanism` on, at the body's K."""
    out = copy.deepcopy(body)
    speculative = out["spec"]["speculative"]
    if mechanism == ADAPTIVE:
        speculative["dspark"] = {**(speculative.get("dspark") or {}), "adaptiveVerification": True}
    elif mechanism == DYNAMIC:
        k = int(speculative.get("numSpeculativeTokens") or 1)
        speculative["dynamicVerification"] = {"initialVerifyBudgetPerRequest": min(INITIAL_BUDGET, k)}
    return out
