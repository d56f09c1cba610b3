"""Download a draft model that has a Hub token of its own, before vLLM starts.

vLLM takes one Hub token, HF_TOKEN, which is the target's. A draft in another private or gated
repository is fetched here with its own token (SPECINFER_DRAFT_HF_TOKEN, from the draft's
tokenSecretRef) into /models/draft, which the rendered command line gives vLLM as a local directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.redaction import redact, token_problem
from specinfer_runtime.sources import DRAFT_TOKEN_ENV, MODEL_ROOT

Download = Callable[..., Any]


def _snapshot_download(**kwargs: Any) -> Any:
    from huggingface_hub import snapshot_download  # in the runtime image, not in the operator's

    return snapshot_download(**kwargs)


def fetch_draft(
    spec: EngineSpec, env: Mapping[str, str], root: str = MODEL_ROOT, download: Download = _snapshot_download
) -> str | None:
    """Fetch the draft when it has its own token and is not there yet; a one-line reason on failure."""
    draft = spec.speculative.draft_model
    if draft is None or draft.hub_token() is None:
        return None
    directory = Path(root) / "draft"
    if (directory / "config.json").is_file():
        return None  # fetched before this container restarted: the volume outlives it
    raw = env.get(DRAFT_TOKEN_ENV, "")
    problem = token_problem(DRAFT_TOKEN_ENV, raw)
    if problem:
        return f"{problem}: the Secret key in spec.speculative.draftModel.source.huggingFace.tokenSecretRef"
    token = raw.strip()
    source = draft.source.hugging_face if draft.source else None
    try:
        download(
            repo_id=draft.name,
            revision=source.revision if source else None,
            token=token,
            local_dir=str(directory),
        )
    except Exception as error:  # the Hub client raises many kinds; each becomes the reason, never with the token
        said = " ".join(redact(str(error), (raw, token)).split())[:300]
        return f"cannot download the draft model {draft.name} with its own token: {type(error).__name__}: {said}"
    if not (directory / "config.json").is_file():
        return f"the draft model {draft.name} was downloaded but holds no config.json: is it a checkpoint?"
    return None
