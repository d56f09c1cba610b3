"""A floor's pattern matches exactly the releases at or above it, in PEP 440 order."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from specinfer_runtime.versions import RELEASE, at_least

number = st.one_of(st.integers(0, 12), st.integers(0, 9999))
release = st.builds(
    lambda major, minor, patch, rc: f"{major}.{minor}.{patch}" + (f"rc{rc}" if rc is not None else ""),
    number,
    number,
    number,
    st.one_of(st.none(), number),
)


@given(floor=release, version=release)
def test_the_pattern_is_the_version_order(floor: str, version: str) -> None:
    assert bool(re.match(at_least(floor), version)) == (Version(version) >= Version(floor))


@given(version=release)
def test_every_release_is_spelled_as_declared(version: str) -> None:
    assert re.match(RELEASE, version)


def test_the_cases_that_matter() -> None:
    dspark = re.compile(at_least("0.25.0rc1"))
    assert [v for v in ("0.24.0", "0.25.0rc0", "0.25.0rc1", "0.25.0", "0.26.0rc1", "1.0.0") if dspark.match(v)] == [
        "0.25.0rc1",
        "0.25.0",
        "0.26.0rc1",
        "1.0.0",
    ]
    assert not re.match(at_least("0.25.0"), "0.25.0rc9")  # a candidate comes before its release
