"""The e2e suite's kubectl sends a command again when the connection failed, never when the server refused it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.kubeclient import ATTEMPTS, Cluster


def kubectl(tmp_path: Path, failures: int, message: str) -> tuple[Cluster, Path]:
    """A kubectl that fails `failures` times with `message`, then prints what it was asked; counts its calls."""
    calls = tmp_path / "calls"
    script = tmp_path / "kubectl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -le {failures} ]; then echo "{message}" >&2; exit 1; fi\n'
        'echo "$@"\n'
    )
    script.chmod(0o755)
    return Cluster("kubeconfig", str(script), api=None), calls  # type: ignore[arg-type]


def test_a_lost_connection_is_sent_again(tmp_path: Path) -> None:
    lost = 'error when patching "STDIN": Patch "https://127.0.0.1:1/apis": http2: client connection lost'
    cluster, calls = kubectl(tmp_path, 1, lost)
    assert cluster.kubectl("apply", "-f", "-").stdout.strip() == "--kubeconfig kubeconfig apply -f -"
    assert len(calls.read_text().splitlines()) == 2


def test_a_refusal_is_not_sent_again(tmp_path: Path) -> None:
    cluster, calls = kubectl(tmp_path, 1, 'The SpeculativeInference "x" is invalid: spec.replicas: Invalid value')
    with pytest.raises(AssertionError, match="is invalid"):
        cluster.kubectl("apply", "-f", "-")
    assert len(calls.read_text().splitlines()) == 1


def test_a_server_that_stays_away_fails_after_the_last_attempt(tmp_path: Path) -> None:
    cluster, calls = kubectl(tmp_path, ATTEMPTS, "dial tcp 127.0.0.1:1: connect: connection refused")
    with pytest.raises(AssertionError, match="connection refused"):
        cluster.kubectl("get", "pods")
    assert len(calls.read_text().splitlines()) == ATTEMPTS
