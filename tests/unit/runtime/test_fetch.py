"""A draft with a Hub token of its own is downloaded by the runtime before vLLM starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specinfer_runtime.fetch import fetch_draft
from tests.support.builders import engine

OWN_TOKEN: dict[str, Any] = {
    "model": {"name": "org/target", "source": {"huggingFace": {"tokenSecretRef": {"name": "target-token"}}}},
    "speculative": {
        "method": "draft_model",
        "numSpeculativeTokens": 3,
        "draftModel": {
            "name": "org/private-draft",
            "source": {"huggingFace": {"tokenSecretRef": {"name": "draft-token"}, "revision": "v2"}},
        },
    },
}


class Hub:
    """Records each download and writes a config.json, as a snapshot download would."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, **kwargs: Any) -> str:
        self.calls.append(kwargs)
        if self.fail:
            raise self.fail
        Path(kwargs["local_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(kwargs["local_dir"]) / "config.json").write_text("{}")
        return str(kwargs["local_dir"])


def test_the_draft_is_fetched_with_its_own_token(tmp_path: Path) -> None:
    hub = Hub()
    env = {"SPECINFER_DRAFT_HF_TOKEN": "hf_draft\n", "HF_TOKEN": "hf_target"}
    assert fetch_draft(engine(OWN_TOKEN), env, str(tmp_path), hub) is None
    assert hub.calls == [
        {"repo_id": "org/private-draft", "revision": "v2", "token": "hf_draft", "local_dir": str(tmp_path / "draft")}
    ]
    # A restarted container finds it there.
    assert fetch_draft(engine(OWN_TOKEN), env, str(tmp_path), hub) is None
    assert len(hub.calls) == 1


def test_drafts_without_a_token_of_their_own_are_left_to_vllm(tmp_path: Path) -> None:
    hub = Hub()
    plain = {**OWN_TOKEN, "speculative": {**OWN_TOKEN["speculative"], "draftModel": {"name": "org/draft"}}}
    assert fetch_draft(engine(plain), {}, str(tmp_path), hub) is None
    assert hub.calls == []


def test_an_empty_token_and_a_refused_download_are_one_line(tmp_path: Path) -> None:
    empty = fetch_draft(engine(OWN_TOKEN), {"SPECINFER_DRAFT_HF_TOKEN": " "}, str(tmp_path), Hub())
    assert empty is not None
    assert empty.startswith("SPECINFER_DRAFT_HF_TOKEN is empty")
    refused = fetch_draft(
        engine(OWN_TOKEN),
        {"SPECINFER_DRAFT_HF_TOKEN": "hf_wrong"},
        str(tmp_path),
        Hub(RuntimeError("401 Client Error.\n\nRepository Not Found for url")),
    )
    assert refused == (
        "cannot download the draft model org/private-draft with its own token: "
        "RuntimeError: 401 Client Error. Repository Not Found for url"
    )
