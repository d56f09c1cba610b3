"""The `specinfer` command run as a user runs it (a process of its own), and what a refusal must look like."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIMIT = 30  # seconds; every case takes well under one


def specinfer(
    *args: str, stdin: bytes | None = None, shell_redirect: str = "", cwd: Path | None = None, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "specinfer_operator.cli.commands", *args]
    if user:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    if shell_redirect:
        command = ["bash", "-c", " ".join(f"'{c}'" for c in command) + " " + shell_redirect]
    result = subprocess.run(command, input=stdin, capture_output=True, timeout=LIMIT, cwd=cwd, check=False)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


def refused(result: subprocess.CompletedProcess[str], fragment: str | tuple[str, ...]) -> None:
    """Exit 2, one line naming what is wrong (one of the fragments), no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "SpeculativeInference" not in line]
    assert len(lines) == 1, result.stderr
    fragments = (fragment,) if isinstance(fragment, str) else fragment
    assert any(f in lines[0] for f in fragments), result.stderr
