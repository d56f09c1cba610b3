"""The draft generation in force, both ends of its path (pure), as tuning/applied.py does for K.

The learning loop (learning/loop.py) hands a trained generation to the reconcile loop by writing the annotation
`learning.specinfer.io/draft: "N"` on the resource; `learned` gives the resource to render with it: the spec with
speculative.draftModel replaced by generation N's directory on the learning claim. The spec itself is never
edited (GitOps keeps it as written), and the annotation's update reconciles the resource like any other: the
new configuration goes through the canary, which promotes it or rolls it back. Without spec.learning, or with an
annotation that is not a generation number, the spec's draft serves.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from specinfer_operator.api.labels import LEARNED_DRAFT_ANNOTATION
from specinfer_operator.api.resource import SpeculativeInference
from specinfer_operator.render.learning import claim_name, draft_dir
from specinfer_runtime.validation import Report

SPEC_DRAFT = "spec"  # what status calls the spec's own draft
MAX_GENERATION = 1_000_000
_NUMBER = re.compile(r"[0-9]{1,7}")  # ASCII digits only: str.isdigit() takes other scripts' too


def generation_of(body: dict[str, Any]) -> int:
    """The generation the annotation puts in force; 0 for the spec's draft."""
    if (body.get("spec") or {}).get("learning") is None:
        return 0
    raw = ((body.get("metadata") or {}).get("annotations") or {}).get(LEARNED_DRAFT_ANNOTATION, "")
    text = raw if isinstance(raw, str) else ""
    return int(text) if _NUMBER.fullmatch(text) and 0 < int(text) <= MAX_GENERATION else 0


def draft_label(generation: int) -> str:
    """A generation as status names it: spec, or gen-N."""
    return f"gen-{generation}" if generation else SPEC_DRAFT


def generation_of_label(label: str) -> int:
    """gen-N as N; anything else (spec) as 0: draft_label's inverse."""
    number = label.removeprefix("gen-")
    return int(number) if number != label and _NUMBER.fullmatch(number) else 0


def learned(body: dict[str, Any]) -> dict[str, Any]:
    """The resource to render: with the generation in force as its draft (the body itself when none is)."""
    generation = generation_of(body)
    if not generation:
        return body
    name = body["metadata"]["name"]
    out = copy.deepcopy(body)
    source = {"pvc": {"claimName": claim_name(name), "subPath": draft_dir(generation)}}
    out["spec"]["speculative"]["draftModel"] = {"name": f"{claim_name(name)}/{draft_dir(generation)}", "source": source}
    return out


def checked(
    body: dict[str, Any], check: Callable[[dict[str, Any]], Report[SpeculativeInference]]
) -> tuple[dict[str, Any], Report[SpeculativeInference], str | None]:
    """The resource to render, its check, and a warning when the generation in force could not be rendered:
    then the spec's draft serves (the spec itself is fine), as a tuned K the spec does not allow is ignored."""
    chosen = learned(body)
    report = check(chosen)
    if chosen is body or report.value is not None:
        return chosen, report, None
    why = "; ".join(str(p) for p in report.errors)
    said = f"{LEARNED_DRAFT_ANNOTATION} puts gen-{generation_of(body)} in force, which the spec does not allow"
    return body, check(body), f"{said} ({why}): ignored"


def generation_of_draft(name: str, draft: dict[str, Any] | None) -> int:
    """Which generation a rendered draftModel is (0: not one of the claim's)."""
    pvc = ((draft or {}).get("source") or {}).get("pvc") or {}
    directory = draft_dir(0).removesuffix("gen-0")  # drafts/
    sub = str(pvc.get("subPath") or "")
    if pvc.get("claimName") != claim_name(name) or not sub.startswith(directory):
        return 0
    return generation_of_label(sub.removeprefix(directory))
