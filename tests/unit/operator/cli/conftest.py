"""The pinned kubectl and helm (tests/unit/conftest.py) as the commands under test find them."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def build_tools(binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """SPECINFER_KUBECTL and SPECINFER_HELM set to the pinned binaries, for this test and the commands it runs."""
    monkeypatch.setenv("SPECINFER_KUBECTL", str(binaries["kubectl"]))
    monkeypatch.setenv("SPECINFER_HELM", str(binaries["helm"]))
    return binaries
