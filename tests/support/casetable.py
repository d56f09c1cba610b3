"""The table of valid and invalid resources in tests/cases/, shared by every suite that checks them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CASES_DIR = Path(__file__).resolve().parents[1] / "cases"


@dataclass(frozen=True)
class Case:
    name: str
    about: str
    rule: str
    verdict: str
    resource: dict[str, Any]
    fragment: str | None = None
    path: str | None = None
    api_server: bool | str = True

    @property
    def valid(self) -> bool:
        return self.verdict == "valid"


def load_cases() -> list[Case]:
    cases = []
    for file in sorted(CASES_DIR.glob("*.yaml")):
        raw = yaml.safe_load(file.read_text())
        cases.append(
            Case(
                name=file.stem,
                about=raw["about"],
                rule=raw["rule"],
                verdict=raw["verdict"],
                resource=raw["resource"],
                fragment=raw.get("fragment"),
                path=raw.get("path"),
                api_server=raw.get("apiServer", True),
            )
        )
    return cases
