"""Prompt lookup (n-gram): drafts by matching the latest tokens against the prompt and the output so far,
on the host (ngram) or on the device (ngram_gpu; vLLM-Ascend's NPU kernel)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.celrules import Rule
from specinfer_runtime.methods import section_only_for


class NgramConfig(Section):
    """Prompt-lookup (n-gram) proposer settings."""

    prompt_lookup_min: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Shortest n-gram to match in the prompt (vLLM: `prompt_lookup_min`).",
    )
    prompt_lookup_max: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Longest n-gram to match in the prompt (vLLM: `prompt_lookup_max`).",
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            id="R7",
            rule="!has(self.promptLookupMin) || !has(self.promptLookupMax) "
            "|| self.promptLookupMin <= self.promptLookupMax",
            message="promptLookupMin %d exceeds promptLookupMax %d; set promptLookupMin <= promptLookupMax",
            args=("self.promptLookupMin", "self.promptLookupMax"),
            field_path=".promptLookupMin",
        ),
    )


SPECULATIVE_RULES = (section_only_for("ngram", ("ngram", "ngram_gpu"), "ngram or ngram_gpu"),)
