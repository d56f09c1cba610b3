"""`specinfer validate` on a repository it does not trust fetches nothing unless given --allow-remote.

kustomize GETs a file named by an HTTP(S) URL and clones a base named by a git URL while it builds. Each case
below names a loopback listener (standing for the remote host) in one of the fields kustomize fetches from, directly
or through a local kustomization; the build must be refused in one line naming the file, the field and the
reference, with not one connection made, and every other result still reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import pytest

from specinfer_operator.cli.builds import BuildError, run, tool
from specinfer_operator.cli.remote import offline, remote
from tests.support.builders import EXAMPLES
from tests.support.cli import refused, specinfer
from tests.support.listener import Listener

pytestmark = pytest.mark.usefixtures("build_tools")
ROOT = Path(__file__).resolve().parents[4]
SUMMARY = "1 SpeculativeInference checked: 1 valid, 0 invalid; 1 unreadable"
PLUGIN = "apiVersion: builtin\nkind: {kind}\nmetadata:\n  name: p\n{field}\n"

K = "repo/app/kustomization.yaml"


class Case(NamedTuple):
    """The kustomization of repo/app and other files ({url}: the listener's), and what the refusal names: the
    file, the field and the reference."""

    kustomization: str
    file: str
    field: str
    reference: str
    files: Mapping[str, str] = MappingProxyType({})


CASES = {
    "resources: a file": Case("resources:\n- {url}/base.yaml\n", K, "resources[0]", "{url}/base.yaml"),
    "resources: a git base": Case(
        "resources:\n- {url}/org/repo.git//base?ref=main\n", K, "resources[0]", "{url}/org/repo.git//base?ref=main"
    ),
    "resources: git:: form": Case(
        "resources:\n- git::{url}/org/repo//base\n", K, "resources[0]", "git::{url}/org/repo//base"
    ),
    "bases": Case("bases:\n- {url}/org/repo.git\n", K, "bases[0]", "{url}/org/repo.git"),
    "components": Case("components:\n- {url}/org/component.git\n", K, "components[0]", "{url}/org/component.git"),
    "patches": Case("patches:\n- path: {url}/patch.yaml\n", K, "patches[0].path", "{url}/patch.yaml"),
    "patchesStrategicMerge": Case(
        "patchesStrategicMerge:\n- {url}/patch.yaml\n", K, "patchesStrategicMerge[0]", "{url}/patch.yaml"
    ),
    "patchesJson6902": Case(
        "patchesJson6902:\n- path: {url}/patch.json\n  target: {{version: v1, kind: ConfigMap, name: c}}\n",
        K,
        "patchesJson6902[0].path",
        "{url}/patch.json",
    ),
    "configMapGenerator files": Case(
        "configMapGenerator:\n- name: c\n  files:\n  - key={url}/file\n",
        K,
        "configMapGenerator[0].files[0]",
        "{url}/file",
    ),
    "secretGenerator envs": Case(
        "secretGenerator:\n- name: s\n  envs:\n  - {url}/env\n", K, "secretGenerator[0].envs[0]", "{url}/env"
    ),
    "crds": Case("crds:\n- {url}/crd.json\n", K, "crds[0]", "{url}/crd.json"),
    "configurations": Case("configurations:\n- {url}/config.yaml\n", K, "configurations[0]", "{url}/config.yaml"),
    "openapi": Case("openapi:\n  path: {url}/schema.json\n", K, "openapi.path", "{url}/schema.json"),
    "replacements": Case("replacements:\n- path: {url}/r.yaml\n", K, "replacements[0].path", "{url}/r.yaml"),
    "helmCharts": Case("helmCharts:\n- name: chart\n  repo: {url}/charts\n", K, "helmCharts[0].repo", "{url}/charts"),
    "an inline transformer": Case(
        "transformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata: {{name: p}}\n"
        "  path: {url}/patch.yaml\n",
        K,
        "transformers[0] (inline): path",
        "{url}/patch.yaml",
    ),
    "a transformer's file": Case(
        "transformers:\n- patcher.yaml\n",
        "repo/app/patcher.yaml",
        "path",
        "{url}/patch.yaml",
        {"repo/app/patcher.yaml": PLUGIN.format(kind="PatchTransformer", field="path: {url}/patch.yaml")},
    ),
    "a validator": Case("validators:\n- {url}/validator.yaml\n", K, "validators[0]", "{url}/validator.yaml"),
    "a generator kustomization's resource": Case(
        "generators:\n- ../../shared/generators\n",
        "shared/generators/generator.yaml",
        "files[0]",
        "{url}/f",
        {
            "shared/generators/kustomization.yaml": "resources:\n- generator.yaml\n",
            "shared/generators/generator.yaml": PLUGIN.format(kind="ConfigMapGenerator", field="files: [{url}/f]"),
        },
    ),
    "a local base's remote base": Case(
        "resources:\n- ../../shared/base\n",
        "shared/base/kustomization.yaml",
        "resources[0]",
        "{url}/org/repo.git",
        {"shared/base/kustomization.yaml": "resources:\n- {url}/org/repo.git\n"},
    ),
    "a local base's component's patch": Case(
        "resources:\n- ../../shared/base\n",
        "shared/component/kustomization.yaml",
        "patches[0].path",
        "{url}/patch.yaml",
        {
            "shared/base/kustomization.yaml": "components:\n- ../component\n",
            "shared/component/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
            "patches:\n- path: {url}/patch.yaml\n",
        },
    ),
}


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as server:
        yield server


def _repository(where: Path, kustomization: str, files: Mapping[str, str], url: str) -> None:
    """repo/: the kustomization app/ and a valid SpeculativeInference beside it; shared/: outside what is checked."""
    (where / "repo" / "app").mkdir(parents=True)
    (where / "repo" / "ngram.yaml").write_text((EXAMPLES / "ngram.yaml").read_text())
    for name, text in {"repo/app/kustomization.yaml": kustomization, **files}.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text.format(url=url))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_remote_reference_is_refused_without_a_connection(tmp_path: Path, listener: Listener, case: Case) -> None:
    _repository(tmp_path, case.kustomization, case.files, listener.url)
    result = specinfer("validate", "--build-timeout", "10", "repo", cwd=tmp_path)
    assert listener.received() == []
    refused(
        result,
        f"repo/app: {case.file}: {case.field}: {case.reference.format(url=listener.url)} is remote: kustomize would "
        "fetch it, and nothing is fetched from the network without --allow-remote",
    )
    assert result.stderr.splitlines()[-1].startswith(SUMMARY)


def test_render_refuses_it_too(tmp_path: Path, listener: Listener) -> None:
    _repository(tmp_path, "resources:\n- {url}/base.yaml\n", {}, listener.url)
    refused(specinfer("render", "repo/app", cwd=tmp_path), f"resources[0]: {listener.url}/base.yaml is remote")
    assert listener.received() == []


def test_allow_remote_builds_as_before(tmp_path: Path, listener: Listener) -> None:
    _repository(tmp_path, "resources:\n- {url}/base.yaml\n", {}, listener.url)
    result = specinfer("validate", "--allow-remote", "--build-timeout", "20", "repo", cwd=tmp_path)
    assert b"GET /base.yaml HTTP/1.1" in b" ".join(listener.received())
    refused(result, "repo/app: kubectl kustomize failed: ")
    assert "status code 404" in result.stderr


@pytest.mark.parametrize(
    "reference",
    [
        "https://github.com/org/repo//deploy?ref=v1",
        "HTTP://example.com/x.yaml",
        "http:example.com/x.yaml",
        "git::https://example.com/org/repo",
        "ssh://git@example.com/org/repo.git",
        "git@github.com:org/repo.git",
        "github.com/org/repo/deploy",
        "GitHub.com:org/repo",
        "file:///srv/git/repo.git",
        "oci://registry.example.com/charts",
        " https://example.com/x.yaml",
    ],
)
def test_what_kustomize_fetches_is_remote(reference: str) -> None:
    assert remote(reference)


@pytest.mark.parametrize(
    "reference", ["../base", "base.yaml", "./overlays/prod", "/srv/base", "github.com.yaml", "a=b"]
)
def test_local_paths_are_not(reference: str) -> None:
    assert not remote(reference)


def test_offline_git_is_allowed_no_transport(tmp_path: Path, listener: Listener) -> None:
    """What the search would miss still fetches nothing: git, started by kubectl for a base, is refused every
    transport (here a component, which kustomize only ever clones) and never connects."""
    (tmp_path / "kustomization.yaml").write_text(f"components:\n- {listener.url}/org/repo.git//c\n")
    kubectl = tool("kubectl", "SPECINFER_KUBECTL")
    with offline(allow_remote=False) as env, pytest.raises(BuildError, match="transport 'http' not allowed"):
        run([kubectl, "kustomize", str(tmp_path)], 20, "kubectl kustomize", env)
    assert listener.received() == []
    with offline(allow_remote=True) as env, pytest.raises(BuildError):  # as it was: the clone is attempted
        run([kubectl, "kustomize", str(tmp_path)], 20, "kubectl kustomize", env)
    assert b"GET /org/repo.git/info/refs?service=git-upload-pack" in b" ".join(listener.received())


def test_offline_http_goes_through_a_proxy_that_refuses(tmp_path: Path) -> None:
    """An HTTP(S) GET by kubectl goes to the refusing proxy, not to the host (nor its name to DNS)."""
    (tmp_path / "kustomization.yaml").write_text("resources:\n- https://example.invalid/x.yaml\n")
    kubectl = tool("kubectl", "SPECINFER_KUBECTL")
    with (
        offline(allow_remote=False) as env,
        pytest.raises(BuildError, match=re.escape("proxyconnect tcp: dial tcp 127.0.0.1:0")),
    ):
        run([kubectl, "kustomize", str(tmp_path)], 20, "kubectl kustomize", env)


def test_the_cli_page_shows_the_refusal_as_it_is(tmp_path: Path) -> None:
    _repository(tmp_path, "resources:\n- https://github.com/org/base//deploy?ref=v1\n", {}, "")
    result = specinfer("validate", "repo", cwd=tmp_path)
    line = result.stderr.splitlines()[0]
    assert line.startswith("repo/app: repo/app/kustomization.yaml: resources[0]: https://github.com/org/base//deploy")
    assert f"\n{line}\n" in (ROOT / "docs" / "cli.md").read_text()


def test_a_charts_dependencies_are_not_fetched(tmp_path: Path, listener: Listener) -> None:
    """helm template renders what the chart holds: a dependency it lacks is one line, not a download."""
    (tmp_path / "chart" / "templates").mkdir(parents=True)
    (tmp_path / "chart" / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies:\n- name: d\n  version: 1.0.0\n"
        f"  repository: {listener.url}/charts\n"
    )
    refused(specinfer("validate", "chart", cwd=tmp_path), "chart: helm template failed: ")
    assert listener.received() == []
