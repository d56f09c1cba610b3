"""The documentation site builds in strict mode, and every link of the README and the docs reaches a file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPO = "https://github.com/specinfer/specinfer/"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """MkDocs refuses a broken link or anchor between pages, and a page the navigation leaves out (not with
    --quiet: it hides the warnings strict mode counts)."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "methods" / "dspark" / "index.html").exists()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_to_the_repository_reach_a_file(page: Path) -> None:
    """Links out of the site point at the repository; relative links of the README at its files."""
    missing = []
    for target in LINK.findall(page.read_text()):
        path = target.split("#", 1)[0]
        if target.startswith(REPO):
            path = path.removeprefix(REPO).split("/", 2)[2]  # blob/main/PATH or tree/main/PATH
            base = ROOT
        elif re.match(r"^[a-z]+:", target) or not path:
            continue
        else:
            base = page.parent
        if not (base / path).exists():
            missing.append(target)
    assert missing == []
