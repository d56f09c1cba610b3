"""Checks that need the image or the model files, so only the pod can run them (R8, R16).

Each check returns a one-line reason on failure: the runtime writes it to the termination log, where
the operator picks it up for the resource's status.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from specinfer_runtime.engine import EngineSpec

ModuleFinder = Callable[[str], object | None]


def arctic_inference(spec: EngineSpec, find_module: ModuleFinder = importlib.util.find_spec) -> str | None:
    """R8: suffix decoding is implemented by the arctic-inference package."""
    if spec.speculative.effective_method() != "suffix" or find_module("arctic_inference") is not None:
        return None
    return "method suffix needs arctic-inference, which this image lacks: use the specinfer runtime image"


def vocab_size(config: Mapping[str, Any]) -> int | None:
    """vocab_size of a Hugging Face config.json, looking into text_config for multimodal models."""
    size = config.get("vocab_size")
    if size is None and isinstance(config.get("text_config"), Mapping):
        size = config["text_config"].get("vocab_size")
    return size if isinstance(size, int) else None


def shared_vocabulary(spec: EngineSpec, target: Mapping[str, Any], draft: Mapping[str, Any]) -> str | None:
    """R16: draft_model proposes token ids of the target, so both must share the vocabulary."""
    if spec.speculative.effective_method() != "draft_model":
        return None
    target_size, draft_size = vocab_size(target), vocab_size(draft)
    if target_size is None or draft_size is None or target_size == draft_size:
        return None
    return (
        f"draft model vocabulary has {draft_size} tokens, the target's {target_size}: draft_model needs a draft "
        "that shares the target's tokenizer (a smaller model of the same family)"
    )


def read_model_config(directory: str) -> dict[str, Any]:
    """config.json of a local checkpoint; empty for a Hub id not downloaded yet."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return {}
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded
