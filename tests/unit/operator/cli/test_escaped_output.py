"""Values from the input are printed escaped, in every output: no line the command prints holds a line break,
control character or separator of the input, nor reads as a CI command (GitHub Actions `::error ...::` at the start
of a line, `##[error]` anywhere in one).

The repository holds a resource whose name, label, model and graph mode carry a line break followed by a workflow
command, with a carriage return, an escape sequence, NUL, U+2028 and a bidirectional override, in a file whose own
name does too, and a file named as a workflow command at the top.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from specinfer_operator.cli.output import line, write_yaml
from tests.support.builders import EXAMPLES
from tests.support.cli import specinfer

HOSTILE = "x\n::error file=x::pwned\r\x1b[31m\x00\u2028\u202e##[error]y"
SHOWN = "x\\n::error file=x::pwned\\r\\x1b[31m\\x00\\u2028\\u202e\\x23#[error]y"  # as a line shows it
AS_JSON = '"x\\n::error file=x::pwned\\r\\u001b[31m\\u0000\\u2028\\u202e\\x23#[error]y"'  # a message quoting it as JSON
NAMED = "a\n::error file=x::named.yaml"  # a file name
NAMED_SHOWN = "a\\n::error file=x::named.yaml"
MODES = 'supported values: "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"'
LABELS = "label values must be at most 63 characters: alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _manifest(**replace: str) -> str:
    data = yaml.safe_load((EXAMPLES / "ngram.yaml").read_text())
    data["metadata"]["labels"] = {"team": replace.get("label", "a")}
    data["metadata"]["name"] = replace.get("name", data["metadata"]["name"])
    data["spec"]["model"]["name"] = replace.get("model", data["spec"]["model"]["name"])
    data["spec"]["graph"]["mode"] = replace.get("mode", data["spec"]["graph"]["mode"])
    return json.dumps(data)  # JSON: a string may hold any character, NUL too


def _repository(where: Path) -> Path:
    repo = where / "repo"
    repo.mkdir()
    (repo / "invalid.json").write_text(_manifest(name=HOSTILE, label=HOSTILE, mode=HOSTILE))
    (repo / "valid.json").write_text(_manifest(model=HOSTILE))
    (repo / "other.yaml").write_text(f"apiVersion: v1\nkind: {json.dumps(HOSTILE)}\nmetadata: {{name: c}}\n")
    (repo / "broken.yaml").write_text(f"a: 1\n{json.dumps(HOSTILE)}: 2\n{json.dumps(HOSTILE)}: 3\n")
    (repo / NAMED).write_text(_manifest(mode="FULLY"))
    (repo / "::error file=x::top.yaml").write_text("spec: [unclosed\n")
    return repo


def assert_inert(text: str) -> None:
    """Each line (as a CI runner splits them: \\n, \\r) holds no control character nor separator, does not open
    with `::` after blanks, and holds no `##`."""
    for each in text.split("\n"):
        assert not UNSAFE.search(each), repr(each)
        assert not each.lstrip().startswith("::"), repr(each)
        assert "##" not in each, repr(each)


def _run(*args: str, cwd: Path) -> tuple[str, str]:
    result = specinfer(*args, cwd=cwd)
    assert "Traceback" not in result.stderr
    assert_inert(result.stdout)
    assert_inert(result.stderr)
    return result.stdout, result.stderr


def test_text_output_escapes_what_it_echoes(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    out, err = _run("validate", "-v", ".", cwd=repo)
    assert out.splitlines() == [
        f'{NAMED_SHOWN}: spec.graph.mode: Unsupported value: "FULLY": {MODES}',
        f'invalid.json: metadata.labels: Invalid value: "{SHOWN}": {LABELS}',
        f"invalid.json: spec.graph.mode: Unsupported value: {AS_JSON}: {MODES}",
    ]
    assert err.splitlines() == [
        "\\x3a:error file=x::top.yaml: not valid YAML: line 2, column 1: did not find expected ',' or ']'",
        f'broken.yaml: line 3, column 1: key "{SHOWN}" already set in this mapping (kubectl would keep the last value)',
        f"other.yaml: skipped: kind {SHOWN} of v1",
        "3 SpeculativeInference checked: 1 valid, 2 invalid; 2 unreadable; 1 skipped (-v says why)",
    ]


def test_json_output_keeps_the_values_exact_and_inert(tmp_path: Path) -> None:
    _repository(tmp_path)
    out, _ = _run("validate", "-o", "json", "repo", cwd=tmp_path)
    results = {Path(r["file"]).name: r for r in json.loads(out)}
    assert results["invalid.json"]["name"] == HOSTILE
    assert any(HOSTILE in e["message"] for e in results["invalid.json"]["errors"])
    assert NAMED in results
    assert "\\u0023#[error]" in out


def test_render_keeps_the_values_exact_and_inert(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    out, _ = _run("render", str(repo / "valid.json"), cwd=tmp_path)
    deployment = next(o for o in yaml.safe_load_all(out) if o["kind"] == "Deployment")
    assert HOSTILE in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    _, err = _run("render", str(repo / "invalid.json"), cwd=tmp_path)
    assert f'metadata.labels: Invalid value: "{SHOWN}"' in err


def test_tune_escapes_the_source_it_names(tmp_path: Path) -> None:
    _, err = _run("tune", NAMED, cwd=tmp_path)
    assert err == f"specinfer tune: {NAMED_SHOWN}: No such file or directory\n"


@pytest.mark.usefixtures("build_tools")
def test_a_built_object_and_the_tools_message(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "si.json").write_text(_manifest(name=HOSTILE, mode=HOSTILE))
    (repo / "app" / "kustomization.yaml").write_text("resources: [si.json]\n")
    (repo / "gone").mkdir()
    (repo / "gone" / "kustomization.yaml").write_text(f"resources: [{json.dumps(HOSTILE)}]\n")
    out, err = _run("validate", "repo", cwd=tmp_path)
    assert out.splitlines() == [
        f"repo/app: SpeculativeInference/{SHOWN}: spec.graph.mode: Unsupported value: {AS_JSON}: {MODES} "
        "(from repo/app/si.json)"
    ]
    assert "repo/gone: kubectl kustomize failed: " in err  # kubectl's message, quoting the resource named


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("\x1b[0m\x00\x7f\x85", "\\x1b[0m\\x00\\x7f\\x85"),
        ("\u2028\u2029\u202e\u2066", "\\u2028\\u2029\\u202e\\u2066"),
        ("::error::x", "\\x3a:error::x"),
        ("  ::warning::x", "  \\x3a:warning::x"),
        ("a ::error::x", "a ::error::x"),  # only the start of a line is read
        ("##[error]x ###vso[", "\\x23#[error]x \\x23\\x23#vso["),
        ("é ✓ plain", "é ✓ plain"),
    ],
)
def test_line_escapes(text: str, shown: str) -> None:
    assert line(text) == shown


def test_yaml_reads_back_the_same() -> None:
    values = [HOSTILE, "::error::x", "a##b", "plain", "é"]
    out = io.StringIO()
    write_yaml([{v: v for v in values}], out)
    text = out.getvalue()
    assert_inert(text)
    assert yaml.safe_load(text) == {v: v for v in values}
