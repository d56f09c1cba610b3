"""Resource quantities as Kubernetes takes them: an integer or a string ParseQuantity accepts, with its words when
it does not, through `specinfer validate` as through the check the operator runs."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from specinfer_operator.render.admission import check
from specinfer_runtime.quantity import FORM, parse
from tests.support.builders import cr, resource
from tests.support.cli import specinfer

NGRAM = {"model": {"name": "m"}, "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}


def errors(resources: dict[str, Any]) -> list[str]:
    return [str(p) for p in check(resource({**NGRAM, "resources": resources})).errors]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16", Decimal(16)),
        ("500m", Decimal("0.5")),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("1.", Decimal(1)),
        ("+1", Decimal(1)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("64G", Decimal(64 * 10**9)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("100u", Decimal("0.0001")),
        ("-1", Decimal(-1)),
    ],
)
def test_the_strings_kubernetes_takes(text: str, value: Decimal) -> None:
    assert parse(text) == value


@pytest.mark.parametrize("text", ["", "64GB", "256 GB", "1K", "1gi", "1e", "1.5.5", "1Gi1", "0x10"])
def test_the_strings_kubernetes_refuses(text: str) -> None:
    assert parse(text) is None


def test_integers_are_quantities_as_in_a_pod() -> None:
    assert errors({"cpu": 16, "cpuLimit": 32, "memory": 68719476736}) == []
    resources = cr({**NGRAM, "resources": {"cpu": 16}}).spec.resources
    assert resources.cpu == "16"  # rendered as the API server writes it, however the manifest spelt it
    assert errors({"cpu": "16", "memory": "64Gi", "sharedMemory": "16Gi", "modelCache": 1000}) == []


def test_a_suffix_kubernetes_does_not_know_is_refused_in_its_words() -> None:
    (error,) = errors({"memory": "64GB"})
    assert error.startswith(f'spec.resources.memory: "64GB" is not a size Kubernetes takes: quantities must match '
                            f"the regular expression '{FORM}'")  # fmt: skip
    assert "write e.g. 64Gi (64 x 2^30 bytes) or 64G (64 x 10^9 bytes), without a B" in error


def test_a_fraction_must_be_a_string_and_a_quantity_not_negative() -> None:
    (fraction,) = errors({"cpu": 0.5})
    assert fraction.startswith("spec.resources.cpu: Invalid value: 0.5: must be of type integer or string")
    assert 'write a quantity with a fraction as a string, e.g. "0.5"' in fraction
    (huge,) = errors({"memory": 2**63})
    assert huge.startswith(
        "spec.resources.memory: Invalid value: 9223372036854775808: must be of type integer or string"
    )
    (negative,) = errors({"cpu": -2})
    assert negative.startswith('spec.resources.cpu: "-2" is not a CPU quantity Kubernetes takes')
    assert "may not be negative" in negative


def test_a_limit_below_its_request_is_refused_whichever_is_an_integer() -> None:
    assert errors({"cpu": "16", "cpuLimit": 8}) == [
        "spec.resources.cpuLimit: cpuLimit 8 is below the request cpu 16, which Kubernetes refuses: raise cpuLimit"
    ]
    assert errors({"cpu": 2, "cpuLimit": "2000m"}) == []


def test_validate_says_the_same(tmp_path: Path) -> None:
    manifest = tmp_path / "demo.yaml"
    manifest.write_text(yaml.safe_dump(resource({**NGRAM, "resources": {"cpu": 16, "memory": "64GB"}})))
    result = specinfer("validate", str(manifest))
    assert result.returncode == 1, result.stderr
    assert f'{manifest}: spec.resources.memory: "64GB" is not a size Kubernetes takes' in result.stdout
    assert "spec.resources.cpu" not in result.stdout
