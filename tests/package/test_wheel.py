"""The built wheel, installed into a fresh virtual environment as an image would install it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work / "dist"), str(ROOT)], check=True
    )
    (wheel,) = (work / "dist").glob("specinfer-*.whl")
    venv.create(work / "venv", with_pip=True)
    bin_dir = work / "venv" / "bin"
    subprocess.run([str(bin_dir / "pip"), "install", "--quiet", str(wheel)], check=True)
    return bin_dir


def run(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], capture_output=True, text=True, check=True, cwd="/")


@pytest.mark.parametrize("command", ["specinfer", "specinfer-operator", "specinfer-runtime"])
def test_entry_points_start(bin_dir: Path, command: str) -> None:
    assert "usage:" in run(bin_dir, command, "--help").stdout


def test_installed_cli_knows_its_version_and_crd(bin_dir: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert run(bin_dir, "specinfer", "--version").stdout.strip() == f"specinfer {version}"
    assert run(bin_dir, "specinfer", "crd").stdout == (ROOT / "crds" / "speculativeinference.yaml").read_text()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_runtime_dry_run_prints_the_rendered_command(bin_dir: Path, example: Path, tmp_path: Path) -> None:
    children = list(yaml.safe_load_all(run(bin_dir, "specinfer", "render", str(example)).stdout))
    config = next(c for c in children if c["kind"] == "ConfigMap")
    container = next(c for c in children if c["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    (tmp_path / "engine.json").write_text(config["data"]["engine.json"])
    printed = run(
        bin_dir, "specinfer-runtime", "--config", str(tmp_path / "engine.json"), "--dry-run", "--", *container["args"]
    )
    assert printed.stdout.split() == " ".join(container["args"]).split()
