"""The docs' `kubectl get specinference` samples are laid out from the CRD's printer columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.get_samples import ROOT, columns, pages, rewritten, sample
from specinfer_operator.api.crd import crd

SAMPLED = [p for p in pages() if "$ kubectl get specinference" in p.read_text()]


def test_the_samples_are_found_where_the_readme_and_the_docs_show_them() -> None:
    assert ROOT / "README.md" in SAMPLED
    assert len(SAMPLED) >= 5


@pytest.mark.parametrize("page", SAMPLED, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_sample_has_the_crds_columns(page: Path) -> None:
    text = page.read_text()
    assert rewritten(text) == text, f"{page} lays out a sample unlike the CRD: run `make docs`"


def test_every_printer_column_is_in_some_sample() -> None:
    shown = {word for page in SAMPLED for line in page.read_text().splitlines() for word in line.split()}
    printer = crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert {c["name"].upper() for c in printer} <= shown


def test_wide_adds_the_priority_columns_after_the_others_in_the_crds_order() -> None:
    narrow, wide = columns(wide=False, namespaces=False), columns(wide=True, namespaces=False)
    assert narrow[:2] == ["NAME", "METHOD"]
    assert narrow[-1] == "AGE"
    assert wide[: len(narrow)] == narrow
    assert len(wide) > len(narrow)
    assert columns(wide=False, namespaces=True) == ["NAMESPACE", *narrow]


def test_a_row_keeps_its_values_under_their_columns_and_is_aligned_as_kubectl_aligns_it() -> None:
    """A column the CRD lacks is dropped, one it has that the sample lacks shows empty; each column is as wide as
    its widest cell plus three spaces, and a line ends at its last value."""
    table = [
        "NAME    METHOD   K   BOGUS   READY   STATUS   AGE",
        "llama   ngram    4   x       2/2     Ready    9m",
    ]
    out = sample("$ kubectl get specinference llama", table)
    header = columns(wide=False, namespaces=False)
    assert out[0].split() == header
    values = dict(zip(header, ["llama", "ngram", "4", "2/2", "Ready"], strict=False))
    for name, value in values.items():
        assert out[1][out[0].index(name) :].startswith(value), (name, out)
    assert out[1].endswith("9m")
    assert out[1][out[0].index("AGE") :] == "9m"
    assert "x" not in out[1].split()
    assert out[0].startswith("NAME    METHOD   K   READY   STATUS   ACCEPT-LEN   ")
