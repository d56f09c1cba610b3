"""The operator's flags: the metrics port's (HTTPS by default, plain HTTP only where nobody but the pod can reach
it) and the pull Secrets of the pods it renders."""

from __future__ import annotations

import pytest

from specinfer_operator.manager.settings import parse


def test_metrics_are_https_on_every_address_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECINFER_METRICS_BIND_ADDRESS", raising=False)
    monkeypatch.delenv("SPECINFER_METRICS_SECURE", raising=False)
    settings = parse([])
    assert (settings.metrics_bind, settings.metrics_secure, settings.metrics_cert_dir) == (("", 8443), True, "")


@pytest.mark.parametrize("bind", ["127.0.0.1:8080", "[::1]:8080", "localhost:8080", "127.1.2.3:1"])
def test_plain_http_on_loopback_is_accepted(bind: str) -> None:
    settings = parse(["--metrics-bind-address", bind, "--metrics-secure=false"])
    assert not settings.metrics_secure


@pytest.mark.parametrize("bind", [":8080", "0.0.0.0:8080", "10.0.0.5:8080", "[::]:8080"])
def test_plain_http_off_loopback_is_refused(bind: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--metrics-bind-address", bind, "--metrics-secure", "false"])
    assert "bind it to loopback" in capsys.readouterr().err


def test_plain_http_off_loopback_is_refused_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECINFER_METRICS_SECURE", "false")
    with pytest.raises(SystemExit):
        parse(["--metrics-bind-address", ":8080"])


def test_metrics_can_be_turned_off() -> None:
    assert parse(["--metrics-bind-address", "0", "--metrics-secure=false"]).metrics_bind is None


def test_pull_secrets_come_from_the_environment_each_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECINFER_IMAGE_PULL_SECRETS", "regcred, mirror,,regcred")
    assert parse([]).render.image_pull_secrets == ("regcred", "mirror")
    assert parse(["--image-pull-secrets", ""]).render.image_pull_secrets == ()


def test_a_pull_secret_that_is_no_secret_name_is_refused_with_the_form(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--image-pull-secrets", "regcred,Team_Registry"])
    err = capsys.readouterr().err
    assert "--image-pull-secrets" in err
    assert "'Team_Registry': not a Secret name" in err
    assert "e.g. regcred,mirror-credentials" in err
