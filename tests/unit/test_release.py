"""One version everywhere (hack/release.py), and the SBOM make release writes (hack/sbom.py)."""

import re
import shutil
import tomllib
from pathlib import Path

import pytest

import specinfer_operator
from hack import sbom
from hack.release import PLACES, ROOT, ReleaseError, disagreements, set_version, stated


def test_every_place_states_the_package_version() -> None:
    """The charts' version and appVersion, the images' version labels and default tags, the operator's default
    images and `specinfer --version` are the pyproject's version: a release publishes one version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert disagreements(ROOT, version) == []
    assert specinfer_operator.__version__ == version, "the venv's install is stale: make setup"


def copy_places(tmp_path: Path) -> Path:
    for path in {place.path for place in PLACES}:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return tmp_path


def test_a_place_left_behind_is_named(tmp_path: Path) -> None:
    root = copy_places(tmp_path)
    chart = root / "charts/specinfer-crds/Chart.yaml"
    chart.write_text(re.sub(r'^appVersion: ".*"$', 'appVersion: "9.9.9"', chart.read_text(), flags=re.MULTILINE))
    (wrong,) = disagreements(root)
    assert wrong.startswith("charts/specinfer-crds/Chart.yaml: ^appVersion")
    assert "'9.9.9'" in wrong


def test_set_version_changes_only_the_version_lines(tmp_path: Path) -> None:
    root = copy_places(tmp_path)
    before = {path: (root / path).read_text().splitlines() for path in {p.path for p in PLACES}}
    set_version("1.2.3-rc.1", root)
    assert set(stated(root).values()) == {"1.2.3-rc.1"}
    changed = sum(
        old != new
        for path, lines in before.items()
        for old, new in zip(lines, (root / path).read_text().splitlines(), strict=True)
    )
    assert changed == len(PLACES)


def test_a_place_missing_its_line_fails(tmp_path: Path) -> None:
    root = copy_places(tmp_path)
    (root / "Dockerfile").write_text((root / "Dockerfile").read_text().replace("ARG VERSION=", "ARG RELEASE="))
    with pytest.raises(ReleaseError, match=r"^Dockerfile: 0 lines match"):
        stated(root)


@pytest.mark.parametrize("version", ["v0.3.0", "0.3", "0.3.0 ", "01.2.3"])
def test_set_version_takes_semantic_versions_only(version: str, tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match="is not a semantic version"):
        set_version(version, copy_places(tmp_path))


def test_sbom_names_every_package_by_purl_and_relates_it_to_the_image() -> None:
    found = sbom.packages(
        [["PyYAML", "6.0.2", ""], ["typing_extensions", "4.12.2", "PSF-2.0"]],
        [["libc6", "2.36-9+deb12u10", "amd64", "glibc"], ["bash", "5.2.15-2+b7", "amd64", "bash"]],
    )
    assert [p.purl for p in found] == [
        "pkg:pypi/pyyaml@6.0.2",
        "pkg:pypi/typing-extensions@4.12.2",
        "pkg:deb/debian/libc6@2.36-9+deb12u10?arch=amd64&upstream=glibc",
        "pkg:deb/debian/bash@5.2.15-2+b7?arch=amd64",
    ]
    digest = "sha256:" + "ab" * 32
    doc = sbom.document(
        "127.0.0.1:5000/specinfer-operator:0.2.0", digest, "abc123", "2026-12-07T00:00:00Z", "https://x", found
    )
    packages = doc["packages"]
    assert isinstance(packages, list)
    ids = [p["SPDXID"] for p in packages]
    assert len(set(ids)) == len(ids) == 5
    assert all(re.fullmatch(r"SPDXRef-[A-Za-z0-9.-]+", i) for i in ids)
    assert [p["licenseDeclared"] for p in packages[1:]] == ["NOASSERTION", "PSF-2.0", "NOASSERTION", "NOASSERTION"]
    relationships = doc["relationships"]
    assert isinstance(relationships, list)
    contained = {r["relatedSpdxElement"] for r in relationships if r["relationshipType"] == "CONTAINS"}
    assert contained == set(ids[1:])
    assert doc["documentDescribes"] == ["SPDXRef-image"]
    assert packages[0]["name"] == "specinfer-operator"
    assert packages[0]["versionInfo"] == "0.2.0"
    (image_ref,) = packages[0]["externalRefs"]
    assert image_ref["referenceLocator"] == (
        f"pkg:oci/specinfer-operator@sha256%3A{'ab' * 32}?repository_url=127.0.0.1:5000/specinfer-operator&tag=0.2.0"
    )
