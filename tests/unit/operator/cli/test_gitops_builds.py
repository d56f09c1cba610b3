"""`specinfer validate` checks what Argo CD or Flux would apply: kustomizations built with the real `kubectl
kustomize`, charts rendered with the real `helm template` (the pinned binaries, conftest.py), each problem named
by the directory built, the object, and the file to fix.

The repository is tests/fixtures/gitops: a valid base, a valid overlay (production), an overlay whose patch
raises numSpeculativeTokens past 14 (too-many-tokens), and a chart with a values file that breaks it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cli import refused, specinfer

ROOT = Path(__file__).resolve().parents[4]
REPO = "tests/fixtures/gitops"  # relative, as CI gives a repository: the lines name files the same way
BAD = f"{REPO}/overlays/too-many-tokens"
TOO_MANY_TOKENS = (
    f"{BAD}: SpeculativeInference/staging-llama3-ngram: spec.speculative.numSpeculativeTokens: Invalid value: 16: "
    f"should be less than or equal to 14; allowed: [1, 14] (set in {BAD}/tokens.yaml)"
)
pytestmark = pytest.mark.usefixtures("build_tools")


def validate(*args: str) -> tuple[int, list[str], str]:
    result = specinfer("validate", *args, cwd=ROOT)
    assert "Traceback" not in result.stderr
    return result.returncode, result.stdout.splitlines(), result.stderr


def test_the_repository_the_way_ci_checks_it_before_merge() -> None:
    code, lines, err = validate(REPO)
    assert (code, lines) == (1, [TOO_MANY_TOKENS]), err
    # base, both overlays and the chart; the patches and the kustomizations' own files are not resources
    assert err.splitlines()[-1] == "4 SpeculativeInference checked: 3 valid, 1 invalid; 5 skipped (-v says why)"


def test_the_gitops_page_shows_the_output_as_it_is() -> None:
    """The page's transcript of `specinfer validate tests/fixtures/gitops`, which the test above runs."""
    summary = "4 SpeculativeInference checked: 3 valid, 1 invalid; 5 skipped (-v says why)"
    assert f"$ specinfer validate {REPO}\n{TOO_MANY_TOKENS}\n{summary}\n" in (ROOT / "docs" / "gitops.md").read_text()


def test_the_valid_overlay_passes_as_built() -> None:
    code, lines, err = validate(f"{REPO}/overlays/production")
    assert (code, lines) == (0, []), err
    assert err.startswith("1 SpeculativeInference checked: 1 valid, 0 invalid")


def test_the_bad_overlay_names_the_field_the_value_the_overlay_and_the_patch() -> None:
    code, lines, _ = validate(BAD)
    assert (code, lines) == (1, [TOO_MANY_TOKENS])
    code, lines, _ = validate(f"{BAD}/kustomization.yaml")  # the kustomization file stands for its directory
    assert (code, lines) == (1, [TOO_MANY_TOKENS])


def test_json_output_names_the_build_and_the_source() -> None:
    result = specinfer("validate", "-o", "json", BAD, cwd=ROOT)
    checked = [r for r in json.loads(result.stdout) if "valid" in r]
    assert checked == [
        {
            "file": BAD,
            "document": 1,
            "name": "staging-llama3-ngram",
            "built_with": "kustomize",
            "from": f"{REPO}/base/speculativeinference.yaml",
            "valid": False,
            "errors": [
                {
                    "path": "spec.speculative.numSpeculativeTokens",
                    "message": "Invalid value: 16: should be less than or equal to 14; allowed: [1, 14]",
                    "rule": "schema",
                    "source": f"{BAD}/tokens.yaml",
                }
            ],
            "warnings": [],
        }
    ]


@pytest.mark.parametrize("patch", ["tokens.yaml", "replicas.yaml"])
def test_a_patch_alone_is_not_an_incomplete_resource(patch: str) -> None:
    """tokens.yaml has no spec.model nor spec.speculative.method: a patch, not a resource missing them."""
    code, lines, err = validate("-v", f"{BAD}/{patch}")
    assert (code, lines) == (0, []), err
    assert err.splitlines() == [
        f"{BAD}/{patch}: skipped: a patch of the kustomization {BAD}/kustomization.yaml, checked as that builds",
        "nothing to check: no SpeculativeInference nor specinfer chart values; 1 skipped (-v says why)",
    ]


def test_the_chart_renders_and_validates_and_a_values_file_that_breaks_it_names_the_template() -> None:
    chart = f"{REPO}/charts/llm"
    code, lines, err = validate("-v", chart)
    assert (code, lines) == (0, []), err
    assert f"{chart}: Service/release-name-llm-gateway: skipped: kind Service of v1" in err
    code, lines, _ = validate("-f", f"{chart}/ci/too-many-tokens-values.yaml", chart)
    assert (code, lines) == (
        1,
        [
            f"{chart}: SpeculativeInference/release-name-llm: spec.speculative.numSpeculativeTokens: Invalid value: "
            f"15: should be less than or equal to 14; allowed: [1, 14] "
            f"(from {chart}/templates/speculativeinference.yaml)"
        ],
    )


def test_a_problem_no_patch_set_names_the_file_the_resource_came_from(tmp_path: Path) -> None:
    shutil.copytree(ROOT / REPO / "base", tmp_path / "base")
    resource = tmp_path / "base" / "speculativeinference.yaml"
    resource.write_text(resource.read_text().replace("numSpeculativeTokens: 4", "numSpeculativeTokens: 20"))
    shutil.copytree(ROOT / BAD, tmp_path / "overlay")
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        "resources: [../base]\npatches:\n- path: replicas.yaml\n  target: {kind: SpeculativeInference}\n"
    )
    result = specinfer("validate", "overlay", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "overlay: SpeculativeInference/llama3-ngram: spec.speculative.numSpeculativeTokens: Invalid value: 20: "
        "should be less than or equal to 14; allowed: [1, 14] (from base/speculativeinference.yaml)"
    ]


@pytest.mark.parametrize(
    ("patches", "named"),
    [
        (
            "- path: tokens.json\n  target: {kind: SpeculativeInference}\n",
            "overlay/tokens.json",
        ),
        (
            "- patch: |\n    - {op: replace, path: /spec/speculative/numSpeculativeTokens, value: 16}\n"
            "  target: {kind: SpeculativeInference}\n",
            "an inline patch of overlay/kustomization.yaml",
        ),
        (
            "- patch: |\n    apiVersion: specinfer.io/v1alpha1\n    kind: SpeculativeInference\n"
            "    metadata: {name: llama3-ngram}\n    spec: {speculative: {numSpeculativeTokens: 16}}\n",
            "an inline patch of overlay/kustomization.yaml",
        ),
    ],
    ids=["json6902 file", "json6902 inline", "strategic merge inline"],
)
def test_json_and_inline_patches_are_named_too(tmp_path: Path, patches: str, named: str) -> None:
    shutil.copytree(ROOT / REPO / "base", tmp_path / "base")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "tokens.json").write_text(
        '[{"op": "replace", "path": "/spec/speculative/numSpeculativeTokens", "value": 16}]'
    )
    (tmp_path / "overlay" / "kustomization.yaml").write_text(f"resources: [../base]\npatches:\n{patches}")
    result = specinfer("validate", "overlay", cwd=tmp_path)
    assert result.stdout.splitlines() == [
        "overlay: SpeculativeInference/llama3-ngram: spec.speculative.numSpeculativeTokens: Invalid value: 16: "
        f"should be less than or equal to 14; allowed: [1, 14] (set in {named})"
    ], result.stderr


def test_render_prints_what_the_overlay_builds() -> None:
    result = specinfer("render", f"{REPO}/overlays/production", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    deployment = next(o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "Deployment")
    assert (deployment["metadata"]["namespace"], deployment["spec"]["replicas"]) == ("production", 2)


def test_a_component_is_built_by_its_users_not_alone(tmp_path: Path) -> None:
    (tmp_path / "component").mkdir()
    (tmp_path / "component" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n- path: tokens.yaml\n"
    )
    (tmp_path / "component" / "tokens.yaml").write_text((ROOT / BAD / "tokens.yaml").read_text())
    result = specinfer("validate", "-v", "component", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "component: skipped: a kustomize Component, checked in the kustomizations that use it" in result.stderr


def test_a_kustomization_or_chart_that_does_not_build_is_one_line_in_the_repositorys_own_paths(
    tmp_path: Path,
) -> None:
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text("resources: [../base]\npatches:\n- path: gone.yaml\n")
    shutil.copytree(ROOT / REPO / "base", tmp_path / "base")
    refused(
        specinfer("validate", "overlay", cwd=tmp_path),
        f"overlay: kubectl kustomize failed: error: trouble configuring builtin PatchTransformer with config: "
        f"` path: gone.yaml `: failed to get the patch file from path(gone.yaml): evalsymlink failure on "
        f"'{tmp_path.resolve()}/overlay/gone.yaml'",
    )
    shutil.copytree(ROOT / REPO / "charts" / "llm", tmp_path / "chart")
    (tmp_path / "chart" / "templates" / "broken.yaml").write_text("metadata: {{ .Values.name\n")
    refused(specinfer("validate", "chart", cwd=tmp_path), "chart: helm template failed: Error: parse error at")
    refused(specinfer("validate", "-f", "missing.yaml", str(ROOT / REPO / "charts" / "llm")), "missing.yaml")


def test_without_kubectl_or_helm_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECINFER_KUBECTL")
    monkeypatch.delenv("SPECINFER_HELM")
    monkeypatch.setenv("PATH", str(tmp_path))  # neither is there; python itself is run by its full path
    refused(
        specinfer("validate", f"{REPO}/overlays/production", cwd=ROOT),
        f"{REPO}/overlays/production: kubectl not found: put it on PATH or set SPECINFER_KUBECTL",
    )
    refused(
        specinfer("validate", f"{REPO}/charts/llm", cwd=ROOT),
        f"{REPO}/charts/llm: helm not found: put it on PATH or set SPECINFER_HELM, or leave charts out with "
        "--skip-charts",
    )
    monkeypatch.setenv("SPECINFER_HELM", str(ROOT / "README.md"))
    refused(specinfer("validate", f"{REPO}/charts/llm", cwd=ROOT), "README.md is not an executable file")


def _repository_with_charts_that_do_not_build(where: Path, broken: bool = True) -> Path:
    """The fixture repository, and a chart whose dependency is not built (and one with a template error)."""
    repo = where / "repo"
    shutil.copytree(ROOT / REPO, repo)
    needs = repo / "charts" / "needs-a-dependency"
    shutil.copytree(repo / "charts" / "llm", needs)
    with (needs / "Chart.yaml").open("a") as chart:
        chart.write("dependencies:\n- {name: redis, version: 1.0.0, repository: https://charts.example.com}\n")
    if broken:
        shutil.copytree(repo / "charts" / "llm", repo / "charts" / "broken")
        (repo / "charts" / "broken" / "templates" / "broken.yaml").write_text("metadata: {{ .Values.name\n")
    return repo


@pytest.mark.parametrize("helm", ["runs", "missing"])
def test_a_chart_that_does_not_build_is_one_line_and_every_other_result_is_still_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, helm: str
) -> None:
    _repository_with_charts_that_do_not_build(tmp_path)
    if helm == "missing":
        monkeypatch.delenv("SPECINFER_HELM")
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        missing = "helm not found: put it on PATH or set SPECINFER_HELM, or leave charts out with --skip-charts"
        why = dict.fromkeys(("broken", "llm", "needs-a-dependency"), missing)
        summary = "3 SpeculativeInference checked: 2 valid, 1 invalid; 3 unreadable; 4 skipped (-v says why)"
    else:
        why = {
            "broken": "helm template failed: Error: parse error at (llm/templates/broken.yaml:2): unclosed action",
            "needs-a-dependency": "helm template failed: Error: An error occurred while checking for chart "
            "dependencies. You may need to run `helm dependency build` to fetch missing dependencies: found in "
            "Chart.yaml, but missing in charts/ directory: redis",
        }
        summary = "4 SpeculativeInference checked: 3 valid, 1 invalid; 2 unreadable; 5 skipped (-v says why)"
    result = specinfer("validate", "repo", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout.splitlines() == [TOO_MANY_TOKENS.replace(REPO, "repo")]  # still checked and reported
    *lines, last = result.stderr.splitlines()
    assert last == summary
    assert len(lines) == len(why), result.stderr  # one line per chart
    for chart, reason in why.items():
        assert any(line.startswith(f"repo/charts/{chart}: {reason}") for line in lines), (chart, result.stderr)
    reported = json.loads(specinfer("validate", "-o", "json", "repo", cwd=tmp_path).stdout)
    assert sorted(r["file"] for r in reported if "error" in r) == sorted(f"repo/charts/{c}" for c in why)


def test_the_docs_show_a_chart_that_does_not_build_as_it_is(tmp_path: Path) -> None:
    _repository_with_charts_that_do_not_build(tmp_path, broken=False)
    docs = (ROOT / "docs" / "gitops.md").read_text()
    for args in (["repo/"], ["--skip-charts", "repo/"]):
        result = specinfer("validate", *args, cwd=tmp_path)
        assert result.returncode == (2 if len(args) == 1 else 1)
        for line in result.stderr.splitlines() + result.stdout.splitlines():
            assert f"\n{line}\n" in docs, line
        assert f"\n$ specinfer validate {' '.join(args)}" in docs


def test_without_kubectl_the_files_outside_kustomizations_are_still_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SPECINFER_KUBECTL")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    shutil.copytree(ROOT / REPO / "base", tmp_path / "base")
    shutil.copy(ROOT / "examples" / "ngram.yaml", tmp_path / "ngram.yaml")
    result = specinfer("validate", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "base: kubectl not found: put it on PATH or set SPECINFER_KUBECTL",
        "1 SpeculativeInference checked: 1 valid, 0 invalid; 1 unreadable; 1 skipped (-v says why)",
    ]


def test_skip_charts_leaves_every_chart_out_and_needs_no_helm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _repository_with_charts_that_do_not_build(tmp_path)
    monkeypatch.delenv("SPECINFER_HELM")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = specinfer("validate", "-v", "--skip-charts", "repo", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the invalid overlay; no chart is a failure
    assert result.stdout.splitlines() == [TOO_MANY_TOKENS.replace(REPO, "repo")]
    skipped = [line for line in result.stderr.splitlines() if "--skip-charts" in line]
    assert skipped == [
        f"repo/charts/{chart}: skipped: a Helm chart, not rendered (--skip-charts)"
        for chart in ("broken", "llm", "needs-a-dependency")
    ]
    assert (
        result.stderr.splitlines()[-1] == "3 SpeculativeInference checked: 2 valid, 1 invalid; 7 skipped (-v says why)"
    )
    assert "--skip-charts" in specinfer("validate", "--help").stdout


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _tool(where: Path, script: str) -> str:
    path = where / "tool"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_a_build_that_hangs_is_stopped_with_everything_it_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A stray child keeps standard output open after the tool: the whole process group is killed.
    monkeypatch.setenv("SPECINFER_KUBECTL", _tool(tmp_path, f"sleep 60 &\necho $! > {tmp_path}/child\nexec sleep 60"))
    started = time.monotonic()
    result = specinfer("validate", "--build-timeout", "1", f"{REPO}/overlays/production", cwd=ROOT)
    refused(result, f"{REPO}/overlays/production: kubectl kustomize did not finish within 1 s (--build-timeout)")
    assert time.monotonic() - started < 10
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 5  # killed at once; gone once its new parent has reaped it
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child)


def test_a_build_that_prints_without_end_is_cut_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECINFER_HELM", _tool(tmp_path, 'exec yes "a: b"'))
    refused(
        specinfer("validate", f"{REPO}/charts/llm", cwd=ROOT),
        f"{REPO}/charts/llm: helm template printed more than 32 MiB",
    )


@pytest.mark.parametrize("value", ["0", "nan", "99999"])
def test_build_timeout_is_range_checked(value: str) -> None:
    refused(specinfer("validate", "--build-timeout", value, REPO), f"--build-timeout: {value} is not from 1 to 3600")
