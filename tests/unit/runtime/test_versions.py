"""A floor's pattern matches exactly the releases at or above it, in PEP 440 order."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from specinfer_runtime.versions import RELEASE, RELEASE_LENGTH, at_least

number = st.one_of(st.integers(0, 12), st.integers(0, 9999))
optional = st.one_of(st.none(), number)
release = st.builds(
    lambda major, minor, patch, rc, post: (
        f"{major}.{minor}.{patch}"
        + (f"rc{rc}" if rc is not None else "")
        + (f".post{post}" if post is not None else "")
    ),
    number,
    number,
    number,
    optional,
    optional,
)


@given(floor=release, version=release)
def test_the_pattern_is_the_version_order(floor: str, version: str) -> None:
    assert bool(re.match(at_least(floor), version)) == (Version(version) >= Version(floor))


@given(version=release)
def test_every_release_is_spelled_as_declared(version: str) -> None:
    assert re.match(RELEASE, version)
    assert len(version) <= RELEASE_LENGTH
    assert str(Version(version)) == version  # the normal form, as the package indexes write it


def test_the_cases_that_matter() -> None:
    dspark = re.compile(at_least("0.25.0rc1"))
    assert [v for v in ("0.24.0", "0.25.0rc0", "0.25.0rc1", "0.25.0", "0.26.0rc1", "1.0.0") if dspark.match(v)] == [
        "0.25.0rc1",
        "0.25.0",
        "0.26.0rc1",
        "1.0.0",
    ]
    assert not re.match(at_least("0.25.0"), "0.25.0rc9")  # a candidate comes before its release


def test_post_releases_follow_their_release() -> None:
    """vllm-ascend's final 0.23.0 is 0.23.0.post1 on PyPI: it runs what 0.23.0 runs, and no more than 0.23.1."""
    assert re.match(RELEASE, "0.23.0.post1")
    assert re.match(at_least("0.23.0"), "0.23.0.post1")
    assert not re.match(at_least("0.23.1"), "0.23.0.post1")
    assert not re.match(at_least("0.23.0.post2"), "0.23.0.post1")
    assert re.match(at_least("0.25.0rc1"), "0.25.0rc1.post1")
    assert not re.match(at_least("0.25.0rc1.post1"), "0.25.0rc1")
    for spelled in ("0.23.0post1", "0.23.0-1", "0.23.0.post", "0.23.0.post01", "v0.23.0"):
        assert not re.match(RELEASE, spelled), spelled  # not as the package indexes write it
