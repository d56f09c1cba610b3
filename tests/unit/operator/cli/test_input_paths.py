"""`specinfer validate` and `render` on hostile and messy input: one line and exit 2, never a traceback or a hang.

Each case runs the real command in a subprocess, with a time limit: the limit is the hang check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support.builders import EXAMPLES
from tests.support.cli import LIMIT, refused, specinfer

VALID = (EXAMPLES / "ngram.yaml").read_text()


def billion_laughs() -> str:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        previous = chr(ord("a") + i - 1)
        lines.append(f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{', '.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("alias bomb", billion_laughs(), "values once aliases are expanded"),
        (
            "deep nesting",
            "spec:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "x\n",
            "nested deeper than 64 levels",
        ),
        (
            "30,000 brackets",
            "[" * 30000 + "]" * 30000,
            # libyaml 0.2.6 (PyYAML 6.0.4's wheels) stops flow nesting at 1,000 in its scanner, which reads
            # ahead of the events our own 64-level limit counts.
            ("nested deeper than 64 levels", "exceeded maximum nesting depth"),
        ),
        (
            "duplicate keys",
            VALID.replace("numSpeculativeTokens: 4", "numSpeculativeTokens: 4\n    numSpeculativeTokens: 20"),
            'key "numSpeculativeTokens" already set',
        ),
        (
            "NaN",
            VALID.replace("numSpeculativeTokens: 4", "numSpeculativeTokens: .nan"),
            ".nan is not a number JSON can hold",
        ),
        ("a mapping as a key", "? {a: 1}\n: x\n", "cannot be a key of a JSON object"),
        ("broken YAML", "spec: [unclosed\n", "not valid YAML: line 2"),
    ],
)
def test_hostile_yaml_on_stdin(name: str, text: str, fragment: str | tuple[str, ...]) -> None:
    refused(specinfer("validate", "-", stdin=text.encode()), fragment)


def test_binary_and_non_utf8_stdin() -> None:
    refused(specinfer("validate", "-", stdin=bytes(range(256)) * 64), "not UTF-8 text (byte 128 is 0x80)")
    refused(specinfer("validate", "-", stdin=b"apiVersion: v1\x00\x01\n"), "not valid YAML")


def test_closed_stdin_and_stdout() -> None:
    refused(specinfer("validate", "-", shell_redirect="<&-"), "standard input is closed")
    refused(specinfer("render", str(EXAMPLES), shell_redirect=">&-"), "standard output is closed")


def test_render_into_a_pipe_closed_early(tmp_path: Path) -> None:
    many = tmp_path / "many.yaml"
    many.write_text("---\n".join(VALID.replace("name: llama3-ngram", f"name: n{i}") for i in range(300)))
    command = " ".join([sys.executable, "-m", "specinfer_operator.cli.commands", "render", str(many)])
    result = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command} | head -c 100 >/dev/null"],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )
    refused(result, "standard output was closed before everything was written")


def test_oversized_input(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"# " + b"x" * (33 << 20) + b"\n")
    refused(specinfer("validate", str(huge)), "larger than 32 MiB")


def test_yaml_1_1_values_read_as_kubectl_reads_them(tmp_path: Path) -> None:
    """yes/on are true, a date stays a string, 0x3 is 3 and 2.0 is 2: the verdict kubectl apply would get."""
    manifest = (
        VALID.replace("numSpeculativeTokens: 4", "numSpeculativeTokens: 0x3")
        .replace("  replicas: 1", "  replicas: 2.0")
        .replace("    servedModelName: llama3", "    servedModelName: llama3\n    trustRemoteCode: yes")
        .replace(
            "        tokenSecretRef: {name: hf-token}",
            "        tokenSecretRef: {name: hf-token}\n        revision: 2024-01-01",
        )
    )
    path = tmp_path / "yaml11.yaml"
    path.write_text(manifest)
    result = specinfer("validate", str(path))
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    rendered = yaml.safe_load_all(specinfer("render", str(path)).stdout)
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert deployment["spec"]["replicas"] == 2
    assert '"num_speculative_tokens":3' in " ".join(args)
    assert "--trust-remote-code" in args
    assert args[args.index("--revision") + 1] == "2024-01-01"


def test_missing_api_version_and_kind_are_required_values() -> None:
    data = yaml.safe_load(VALID)
    del data["apiVersion"], data["kind"]
    result = specinfer("validate", "-", stdin=yaml.safe_dump(data).encode())
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        '<stdin>: apiVersion: Required value: set apiVersion: "specinfer.io/v1alpha1"',
        '<stdin>: kind: Required value: set kind: "SpeculativeInference"',
    ]


def test_a_gitops_repository_as_it_is(tmp_path: Path, build_tools: dict[str, Path]) -> None:
    repo = tmp_path / "repo"
    (repo / "apps" / "llm").mkdir(parents=True)
    (repo / "apps" / "llm" / "ngram.yaml").write_text(VALID)
    (repo / "apps" / "llm" / "kustomization.yaml").write_text("resources: [ngram.yaml]\n")
    (repo / "apps" / "llm" / "patch.yaml").write_text("- op: replace\n  path: /spec/replicas\n  value: 2\n")
    (repo / "apps" / "values.json").write_text("[1, 2, 3]\n")
    (repo / "apps" / "version.yaml").write_text("1.2.3\n")
    (repo / "apps" / "cfn.yaml").write_text("Resources:\n  Bucket:\n    Type: AWS::S3::Bucket\n    Name: !Ref Name\n")
    (repo / "chart" / "templates").mkdir(parents=True)
    (repo / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 0.1.0\n")
    (repo / "chart" / "templates" / "si.yaml").write_text("spec:\n  replicas: {{ .Values.replicas }}\n")
    (repo / "loose-template.yaml").write_text("{{- if .Values.enabled }}\nkind: x\n{{- end }}\n")
    (repo / "apps" / "back").symlink_to(repo)  # a loop
    (repo / "linked").symlink_to(repo / "apps" / "llm")
    result = specinfer("validate", "-v", "repo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    skipped = sorted(line.split(": skipped: ")[1] for line in result.stderr.splitlines() if ": skipped: " in line)
    assert skipped == sorted(
        [
            "kind (none) of (no apiVersion)",  # cfn.yaml
            "kind (none) of (no apiVersion)",  # what the chart renders: helm template, not the template itself
            "a list, not an object (a kustomize patch?)",  # values.json
            "a str, not an object",
            "in the kustomization repo/apps/llm, checked as it builds",  # ngram.yaml: kubectl kustomize built it
            "in the kustomization repo/apps/llm, checked as it builds",  # patch.yaml
            "a template, not YAML (Helm, Go templates)",
            "a symlink back to a directory already read",
            "a symlink back to a directory already read",  # linked -> apps/llm, read once
        ]
    ), result.stderr
    assert (
        result.stderr.splitlines()[-1] == "1 SpeculativeInference checked: 1 valid, 0 invalid; 9 skipped (-v says why)"
    )


def test_nothing_found_and_unreadable_paths(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = specinfer("validate", str(empty))
    assert (result.returncode, result.stderr) == (
        0,
        "nothing to check: no SpeculativeInference nor specinfer chart values\n",
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    refused(specinfer("validate", str(broken)), "gone.yaml: a broken symlink")
    refused(specinfer("validate", str(tmp_path / "missing")), "missing: no such file or directory")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_unreadable_file_and_directory_as_another_user() -> None:
    with tempfile.TemporaryDirectory() as name:  # pytest's own temporary root is closed to other users
        where = Path(name)
        where.chmod(0o755)
        secret = where / "secret.yaml"
        secret.write_text(VALID)
        secret.chmod(0o000)
        refused(
            specinfer("validate", str(secret), user="65534", cwd=where), "secret.yaml: cannot read: Permission denied"
        )
        (where / "tree").mkdir()
        (where / "tree" / "closed").mkdir(mode=0o000)
        refused(
            specinfer("validate", str(where / "tree"), user="65534", cwd=where), "closed: cannot read the directory"
        )
        refused(specinfer("validate", str(where / "tree" / "closed" / "x.yaml"), user="65534"), "cannot read")


def test_a_fifo_or_device_given_as_a_file_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "manifest.yaml"
    os.mkfifo(fifo)  # nothing ever writes to it: opening it to read would wait forever
    for command in ("validate", "render", "tune"):
        refused(specinfer(command, str(fifo)), "not a regular file")
    refused(specinfer("validate", "/dev/zero"), "not a regular file")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--window", "nan"], "--window: nan is not from 0 to 3600"),
        (["--window", "inf"], "--window: inf is not from 0 to 3600"),
        (["--min-k", "0"], "--min-k: 0 is not from 1 to 64"),
        (["--max-batch", "1e9"], "--max-batch: '1e9' is not an integer"),
        (["--min-k", "5", "--max-k", "3"], "--min-k 5 is above --max-k 3"),
    ],
)
def test_tune_flags_out_of_range_are_one_line(flags: list[str], fragment: str) -> None:
    refused(specinfer("tune", *flags, str(EXAMPLES / "ngram.yaml")), fragment)


def test_a_malformed_url_is_one_line() -> None:
    refused(specinfer("tune", "http://[::1/metrics"), "not a URL")
    refused(specinfer("tune", "http://127.0.0.1:99999/metrics"), "not a URL")
