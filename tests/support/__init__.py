"""What several test suites share: resource builders, the validation case table, Hypothesis strategies,
the tenant policy cases, and where the repository's files are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "unit" / "data"  # captures of real engines' /metrics
EXAMPLES = ROOT / "examples"
