"""The flags of what the operator renders where a resource says nothing: the default images' pull policies and the
engine pods' tolerations and nodeSelector, from the flags or the chart's environment, refused by flag and path."""

from __future__ import annotations

import pytest

from specinfer_operator.manager.settings import parse

ASCEND = '[{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}]'


def test_nothing_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RUNTIME_PULL_POLICY", "TRAINER_PULL_POLICY", "ENGINE_TOLERATIONS", "ENGINE_NODE_SELECTOR"):
        monkeypatch.delenv(f"SPECINFER_{name}", raising=False)
    settings = parse([])
    assert (settings.render.runtime_pull_policy, settings.render.trainer_pull_policy) == (
        "IfNotPresent",
        "IfNotPresent",
    )
    assert (settings.render.tolerations, settings.render.node_selector) == ((), {})


def test_the_chart_sets_them_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECINFER_RUNTIME_PULL_POLICY", "Always")
    monkeypatch.setenv("SPECINFER_TRAINER_PULL_POLICY", "Never")
    monkeypatch.setenv("SPECINFER_ENGINE_TOLERATIONS", ASCEND)
    monkeypatch.setenv("SPECINFER_ENGINE_NODE_SELECTOR", '{"accelerator": "huawei-Ascend910"}')
    settings = parse([])
    assert (settings.render.runtime_pull_policy, settings.render.trainer_pull_policy) == ("Always", "Never")
    assert [t.dump() for t in settings.render.tolerations] == [
        {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert settings.render.node_selector == {"accelerator": "huawei-Ascend910"}


def test_a_flag_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECINFER_ENGINE_TOLERATIONS", ASCEND)
    assert parse(["--engine-tolerations", "[]"]).render.tolerations == ()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--engine-tolerations", '[{"key": "a", "effect": "Sometimes"}]'], "--engine-tolerations"),
        (["--engine-tolerations", '[{"key": "a", "effect": "Sometimes"}]'], "[0][effect]"),
        (["--engine-tolerations", '{"key": "a"}'], "valid list"),
        (["--engine-node-selector", '{"pool": 1}'], "[pool]: Input should be a valid string"),
        (["--engine-node-selector", "pool=a"], "--engine-node-selector 'pool=a' is not JSON"),
        (["--runtime-pull-policy", "Sometimes"], "invalid choice"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_flag_and_the_path(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(args)
    assert says in capsys.readouterr().err
