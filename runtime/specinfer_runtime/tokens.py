"""K, the tokens drafted per step: the Ascend limit, the methods whose K vLLM fills in, and K as rendered."""

from __future__ import annotations

from specinfer_runtime.celrules import Rule, cel_in
from specinfer_runtime.methods import MTP_NAMES

# vLLM-Ascend's attention backends assert decode_threshold = 1 + num_speculative_tokens <= 16 (attention_v1,
# mla_v1, sfa_v1, dsa_v1), and its guides said K + 1 <= 15 up to v0.24.0rc1: 14 runs on every release.
ASCEND_MAX_SPECULATIVE_TOKENS = 14
SUFFIX_DEFAULT_TREE_DEPTH = 24

# Methods whose K vLLM would otherwise fill in by itself; the operator always renders it (R3).
DEFAULT_K_METHODS = ("suffix", *MTP_NAMES, "extract_hidden_states")

_DEPTH = f"(has(self.speculative.suffix) ? self.speculative.suffix.maxTreeDepth : {SUFFIX_DEFAULT_TREE_DEPTH})"
_CAP = ASCEND_MAX_SPECULATIVE_TOKENS
# K as rendered (R3), on the engine spec: given, else min(suffix depth, 14) for suffix, else 1. The CRD rules
# inline this expression and the renderer evaluates it, so the default lives in one place.
K = (
    "(has(self.speculative.numSpeculativeTokens) ? self.speculative.numSpeculativeTokens : "
    f"self.speculative.method == 'suffix' ? ({_DEPTH} < {_CAP} ? {_DEPTH} : {_CAP}) : 1)"
)

# The per-batch-size schedule of K, as the speculative section and the engine spec reach it.
SCHEDULE_FIELD = "numSpeculativeTokensPerBatchSize"
SCHEDULE = f"self.speculative.{SCHEDULE_FIELD}"
OWN_SCHEDULE = f"self.{SCHEDULE_FIELD}"  # seen from the speculative section

SPECULATIVE_RULES = (
    Rule(
        id="R3",
        rule=f"has(self.numSpeculativeTokens) || {cel_in('self.method', DEFAULT_K_METHODS)}",
        message="method %s needs an explicit numSpeculativeTokens (vLLM num_speculative_tokens): "
        f"set a value from 1 to {ASCEND_MAX_SPECULATIVE_TOKENS}",
        args=("self.method",),
        field_path=".numSpeculativeTokens",
        reason="FieldValueRequired",
    ),
)
