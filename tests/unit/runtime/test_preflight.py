"""Runtime preflight checks (R8, R16) on engine specs and model configs."""

from __future__ import annotations

import json
from pathlib import Path

from specinfer_runtime.preflight import arctic_inference, read_model_config, shared_vocabulary, vocab_size
from tests.support.builders import engine

SUFFIX = engine({"model": {"name": "m"}, "speculative": {"method": "suffix"}})
DRAFT = engine(
    {
        "model": {"name": "m"},
        "speculative": {"method": "draft_model", "numSpeculativeTokens": 3, "draftModel": {"name": "d"}},
    }
)


def test_suffix_needs_arctic_inference() -> None:
    missing = arctic_inference(SUFFIX, find_module=lambda name: None)
    assert missing is not None
    assert "arctic-inference" in missing
    assert arctic_inference(SUFFIX, find_module=lambda name: object()) is None
    assert arctic_inference(DRAFT, find_module=lambda name: None) is None


def test_draft_vocabulary_must_match_the_target() -> None:
    problem = shared_vocabulary(DRAFT, {"vocab_size": 151936}, {"vocab_size": 32000})
    assert problem is not None
    assert "32000 tokens, the target's 151936" in problem
    assert shared_vocabulary(DRAFT, {"vocab_size": 151936}, {"vocab_size": 151936}) is None
    assert shared_vocabulary(SUFFIX, {"vocab_size": 1}, {"vocab_size": 2}) is None


def test_unknown_vocabulary_is_not_a_failure() -> None:
    assert shared_vocabulary(DRAFT, {}, {"vocab_size": 32000}) is None
    assert vocab_size({"text_config": {"vocab_size": 262144}}) == 262144


def test_read_model_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 512}))
    assert vocab_size(read_model_config(str(tmp_path))) == 512
    assert read_model_config(str(tmp_path / "absent")) == {}
