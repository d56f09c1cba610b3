"""The operator chart's pull Secrets, as `helm template` renders them: global.imagePullSecrets (names or objects,
as parent charts write them) and imagePullSecrets reach the operator pods, and the operator (--image-pull-secrets)
for the pods it makes; the schema refuses what is no Secret name."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer_operator.manager.settings import parse
from specinfer_operator.render.children import render
from tests.support.builders import cr

CHART = Path(__file__).resolve().parents[2] / "charts" / "specinfer-operator"
ENV = "SPECINFER_IMAGE_PULL_SECRETS"


def helm(binaries: dict[str, Path], *values: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(binaries["helm"]),
            "template",
            "specinfer-operator",
            str(CHART),
            "--show-only",
            "templates/deployment.yaml",
        ]
        + [arg for value in values for arg in ("--set-json", value)],
        capture_output=True,
        text=True,
        check=False,
    )


def operator_pod(binaries: dict[str, Path], *values: str) -> dict[str, Any]:
    done = helm(binaries, *values)
    assert done.returncode == 0, done.stderr
    pod: dict[str, Any] = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]
    return pod


def env_of(pod: dict[str, Any]) -> str:
    (container,) = pod["containers"]
    return next(str(e["value"]) for e in container["env"] if e["name"] == ENV)


def test_by_default_no_pull_secret_anywhere(binaries: dict[str, Path]) -> None:
    pod = operator_pod(binaries)
    assert "imagePullSecrets" not in pod
    assert env_of(pod) == ""


def test_global_and_own_pull_secrets_reach_the_operator_and_the_pods_it_makes(
    binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = operator_pod(
        binaries,
        'global.imagePullSecrets=["mirror", {"name": "platform-registry"}]',
        'imagePullSecrets=[{"name": "operator-registry"}, {"name": "mirror"}]',
    )
    expected = ["mirror", "platform-registry", "operator-registry"]
    assert pod["imagePullSecrets"] == [{"name": name} for name in expected]
    assert env_of(pod) == ",".join(expected)
    # What the operator makes of the variable: every engine pod pulls with them, after its resource's own.
    monkeypatch.setenv(ENV, env_of(pod))
    settings = parse([])
    spec = {
        "model": {"name": "org/target"},
        "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
        "runtime": {"imagePullSecrets": [{"name": "team-registry"}]},
    }
    deployment = next(o for o in render(cr(spec), settings.render) if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": name} for name in ["team-registry", *expected]
    ]


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ('imagePullSecrets=["regcred"]', "at '/imagePullSecrets/0': got string, want object"),  # objects, as a Pod's
        ('imagePullSecrets=[{"name": "Reg_Cred"}]', "at '/imagePullSecrets/0/name': 'Reg_Cred' does not match"),
        ('global.imagePullSecrets=["Reg_Cred"]', "at '/global/imagePullSecrets/0': 'Reg_Cred' does not match"),
        ('imagePullSecrets=[{"secret": "regcred"}]', "at '/imagePullSecrets/0': missing property 'name'"),
    ],
)
def test_what_is_no_pull_secret_is_refused_by_the_schema(binaries: dict[str, Path], value: str, refused: str) -> None:
    done = helm(binaries, value)
    assert done.returncode != 0
    assert refused in done.stderr, done.stderr
