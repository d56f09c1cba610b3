"""The specinfer command: exit codes, output formats, inputs."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from specinfer_operator.api.crd import crd_yaml
from specinfer_operator.cli.commands import main
from tests.support.builders import EXAMPLES

INVALID = """\
apiVersion: specinfer.io/v1alpha1
kind: SpeculativeInference
metadata: {name: bad}
spec:
  model: {name: m}
  speculative: {method: eagle3, numSpeculativeTokens: 4}
  graph: {mode: FULL, captureSizes: [4, 8]}
"""


def run(*argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_valid_directory_exits_0() -> None:
    code, out, err = run("validate", str(EXAMPLES))
    assert code == 0
    assert out == ""
    every = len(list(EXAMPLES.rglob("*.yaml")))
    assert f"{every} SpeculativeInference checked: {every} valid, 0 invalid" in err


def test_invalid_file_exits_1_with_one_line_per_problem(tmp_path: Path) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(INVALID)
    code, out, _ = run("validate", str(file))
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{file}: spec.graph.captureSizes: every capture size must be a multiple of K+1 = 5")
    assert lines[1] == (
        f"{file}: spec.speculative.draftModel: method eagle3 needs a draft model: set draftModel.name "
        "to the draft checkpoint (vLLM speculative_config.model)"
    )


def test_unreadable_or_not_yaml_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    code, _, err = run("validate", str(broken))
    assert code == 2
    assert "not valid YAML: line 2, column 1" in err
    code, _, err = run("validate", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert "no such file or directory" in err


def test_stdin_and_multi_document_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    good = (EXAMPLES / "ngram.yaml").read_text()
    code, out, _ = run("validate", "-", stdin=f"{good}---\n{INVALID}", monkeypatch=monkeypatch)
    assert code == 1
    assert all(line.startswith("<stdin>#2: spec.") for line in out.splitlines())


def test_other_kinds_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    (tmp_path / "notes.txt").write_text("not a manifest")
    code, out, err = run("validate", str(tmp_path))
    assert (code, out) == (0, "")
    assert err == "nothing to check: no SpeculativeInference nor specinfer chart values; 1 skipped (-v says why)\n"


def test_kind_list_is_expanded(tmp_path: Path) -> None:
    items = [yaml.safe_load(INVALID), yaml.safe_load((EXAMPLES / "mtp.yaml").read_text())]
    (tmp_path / "list.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, _ = run("validate", "-o", "json", str(tmp_path / "list.yaml"))
    assert code == 1
    results = json.loads(out)
    assert [r["valid"] for r in results] == [False, True]
    assert results[0]["name"] == "bad"
    assert {e["rule"] for e in results[0]["errors"]} == {"R4", "R6"}


def test_json_output_includes_warnings_and_load_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: specinfer.io/v1alpha1\nkind: SpeculativeInference\nmetadata: {name: a}\n"
        "spec: {model: {name: m}, speculative: {method: mtp, numSpeculativeTokens: 3}}\n"
    )
    (tmp_path / "b.yaml").write_text("a: [")
    code, out, _ = run("validate", "--output", "json", str(tmp_path))
    assert code == 2
    first, second = json.loads(out)
    assert first["valid"] is True
    assert first["warnings"][0]["rule"] == "R14"
    assert "not valid YAML" in second["error"]


def test_render_prints_children_as_a_yaml_stream() -> None:
    code, out, _ = run("render", str(EXAMPLES / "eagle3.yaml"), "--runtime-image", "reg/rt:1")
    assert code == 0
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out)]
    name = "llama3-eagle3"  # two replicas: a disruption budget too
    assert kinds[1:] == [("Deployment", name), ("Service", name), ("PodDisruptionBudget", name)]
    assert kinds[0][1].startswith("llama3-eagle3-engine-")
    assert run("render", str(EXAMPLES / "eagle3.yaml"), "--runtime-image", "reg/rt:1")[1] == out


def test_render_takes_the_operators_defaults_as_the_operator_does() -> None:
    """The chart's engineDefaults and pull Secrets reach `specinfer render` through the operator's own flags."""
    toleration = {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}
    code, out, _ = run(
        "render",
        str(EXAMPLES / "eagle3.yaml"),
        *("--engine-tolerations", json.dumps([toleration]), "--engine-node-selector", '{"npu": "yes"}'),
        *("--image-pull-secrets", "mirror", "--runtime-pull-policy", "Always"),
    )
    assert code == 0
    (deployment,) = [d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert (pod["tolerations"], pod["nodeSelector"]) == ([toleration], {"npu": "yes"})
    assert pod["imagePullSecrets"] == [{"name": "mirror"}]
    assert pod["containers"][0]["imagePullPolicy"] == "Always"


def test_render_refuses_a_wrong_default_in_one_line() -> None:
    code, out, err = run("render", str(EXAMPLES / "eagle3.yaml"), "--engine-node-selector", "[1]")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("specinfer render: --engine-node-selector '[1]': ")


def test_render_refuses_invalid_input(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(INVALID)
    code, out, err = run("render", str(tmp_path / "bad.yaml"))
    assert code == 1
    assert out == ""
    assert "needs a draft model" in err


def test_crd_command_prints_the_generated_crd() -> None:
    code, out, _ = run("crd")
    assert code == 0
    assert out == crd_yaml()
