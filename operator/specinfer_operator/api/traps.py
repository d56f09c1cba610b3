"""Known traps of vLLM and vLLM-Ascend: configurations both accept that run far worse than they should. Each
is a warning (never a refusal) naming the field, the fix and the upstream issue it comes from; `kubectl apply`
prints it (the warnings admission policy), and `specinfer validate` and the operator say the same words.

The rules are CEL on the engine spec as `self`, as the CRD's rules are; admission sees it as `object.spec`."""

from __future__ import annotations

from typing import Any

from specinfer_runtime.celrules import Rule, cel_list
from specinfer_runtime.graph import FULL_MODE
from specinfer_runtime.methods import DRAFTER_METHODS
from specinfer_runtime.tokens import K
from specinfer_runtime.validation import Problem, rule_violations

TRAP_RULE = "trap"
DEFAULT_CAPTURE_TOKENS = 512  # vLLM-Ascend's cap on graph capture sizes when none are given
LARGE_K = 10  # from here on a draft's memory at run time strays far from what profiling warmed up


def _trap(rule: str, message: str, field: str, args: tuple[str, ...] = ()) -> Rule:
    return Rule(id=TRAP_RULE, rule=rule, message=message, args=args, field_path=field)


_SEQS = "has(self.scheduling.maxNumSeqs)"
_DECODE_TOKENS = f"self.scheduling.maxNumSeqs * ({K} + 1)"

TRAPS: tuple[Rule, ...] = (
    _trap(
        "!(has(self.speculative.numSpeculativeTokensPerBatchSize) && has(self.graph.mode) "
        "&& self.graph.mode == 'FULL_DECODE_ONLY')",
        "a per-batch-size schedule turns off decode padding in FULL_DECODE_ONLY, which cut throughput about 3x "
        "(vllm-ascend#16637): measure it against a single K before serving it, or use graph mode FULL",
        ".speculative.numSpeculativeTokensPerBatchSize",
    ),
    _trap(
        f"!({FULL_MODE}) || !{_SEQS} || !has(self.graph.maxBatchSize) "
        "|| self.scheduling.maxNumSeqs <= self.graph.maxBatchSize",
        "decode batches of more than graph.maxBatchSize (%d) requests, up to scheduling.maxNumSeqs (%d), run "
        "without a graph (vllm-ascend#16716): raise maxBatchSize, or lower maxNumSeqs",
        ".graph.maxBatchSize",
        ("self.graph.maxBatchSize", "self.scheduling.maxNumSeqs"),
    ),
    _trap(
        f"!({FULL_MODE}) || !{_SEQS} || has(self.graph.maxBatchSize) || has(self.graph.captureSizes) "
        f"|| {_DECODE_TOKENS} <= {DEFAULT_CAPTURE_TOKENS}",
        f"without graph.captureSizes or maxBatchSize, graphs are captured up to {DEFAULT_CAPTURE_TOKENS} tokens, "
        f"so decode steps of more than {DEFAULT_CAPTURE_TOKENS} / (K+1) requests (scheduling.maxNumSeqs %d x "
        "(K+1) = %d tokens) run without a graph (vllm-ascend#16716): set graph.maxBatchSize",
        ".graph",
        ("self.scheduling.maxNumSeqs", _DECODE_TOKENS),
    ),
    _trap(
        f"!(self.speculative.method in {cel_list(DRAFTER_METHODS)}) || {K} < {LARGE_K}",
        "memory profiling warms up one draft token, so with K = %d the drafter can run out of NPU memory once "
        "the KV cache has taken the rest (vllm#37521): leave headroom (a lower --gpu-memory-utilization in "
        "engineArgs) and load-test before serving",
        ".speculative.numSpeculativeTokens",
        (K,),
    ),
    _trap(
        "self.speculative.method != 'dspark' || has(self.speculative.draftModel) "
        "|| self.model.name.lowerAscii().contains('deepseek-v4')",
        "dspark without a draftModel drafts with a DSpark head inside the target, which only DeepSeek-V4 "
        "checkpoints carry: name the draft (e.g. a Qwen3 DSpark draft) unless %s has one",
        ".speculative.draftModel",
        ("self.model.name",),
    ),
)

# The same rules over the whole resource, as the warnings admission policy sees it.
ADMISSION_TRAPS: tuple[Rule, ...] = tuple(
    Rule(
        id=r.id,
        rule=r.rule.replace("self.", "object.spec."),
        message=r.message,
        args=tuple(a.replace("self.", "object.spec.") for a in r.args),
        field_path=f".spec{r.field_path}",
    )
    for r in TRAPS
)


def traps(resource: dict[str, Any]) -> list[Problem]:
    """The traps a valid resource (as stored: camelCase, defaults applied) walks into."""
    return rule_violations(ADMISSION_TRAPS, resource, variable="object")
