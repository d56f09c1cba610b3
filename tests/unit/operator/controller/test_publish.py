"""The status patch publish() writes: only what changed, and keys that went away set to null."""

from __future__ import annotations

from typing import Any

from specinfer_operator.controller.publish import status_patch


def test_status_patch_removes_keys_that_went_away() -> None:
    assert status_patch({"a": 1, "b": 2}, {"a": 1}) == {"b": None}
    nested = status_patch({"s": {"k": 3, "observed": {"x": 1}}}, {"s": {"k": 4}})
    assert nested == {"s": {"k": 4, "observed": None}}


def test_status_patch_names_only_what_changed() -> None:
    # The reconcile's copy of tuning.lastChange may be older than the status: it must not be written back.
    trying: dict[str, Any] = {"effectiveNumSpeculativeTokens": 2, "lastChange": {"result": "Trying"}}
    before: dict[str, Any] = {"ready": "1/1", "tuning": trying}
    assert status_patch(before, {"ready": "2/2", "tuning": dict(trying)}) == {"ready": "2/2"}
    moved = {"ready": "2/2", "tuning": {**trying, "effectiveNumSpeculativeTokens": 1}}
    assert status_patch(before, moved) == {"ready": "2/2", "tuning": {"effectiveNumSpeculativeTokens": 1}}
