"""The exposition reader fed in pieces, as a scrape feeds it: the same samples however the body is cut, and
what it keeps bounded whatever the body holds."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hack.hostile import REAL
from specinfer_operator.measure.acceptance import DRAFTS, LABELS
from specinfer_operator.measure.exposition import MAX_KEPT, MAX_LINE, ExpositionError, Reader, _unescape, samples
from specinfer_operator.measure.scrape import COUNTERS

STAND_INS = ["\x00", "\x01", "\x02"]  # what the unescaping holds pairs of backslashes in: a value may hold them

WHOLE = samples(REAL, COUNTERS, LABELS)


def fed(body: bytes, cuts: list[int]) -> list[tuple[str, dict[str, str], float]]:
    reader = Reader(COUNTERS, LABELS)
    at = 0
    for cut in [*sorted(cuts), len(body)]:
        reader.feed(body[at:cut])
        at = cut
    return [(s.name, s.labels, s.value) for s in reader.close()]


@settings(max_examples=200)
@given(st.lists(st.integers(0, len(REAL)), max_size=40))
def test_the_same_samples_however_the_body_is_cut(cuts: list[int]) -> None:
    assert fed(REAL, cuts) == [(s.name, s.labels, s.value) for s in WHOLE]


def test_a_name_inside_another_line_is_not_a_sample() -> None:
    body = f'other{{note="{DRAFTS} 5"}} 1\n# HELP {DRAFTS} 7\n  {DRAFTS}{{model_name="m"}} 3\r\n{DRAFTS}_x 9\n'
    assert [(s.labels, s.value) for s in samples(body, COUNTERS, LABELS)] == [({"model_name": "m"}, 3.0)]


def test_the_last_line_needs_no_newline() -> None:
    assert [s.value for s in samples(f"{DRAFTS} 4", COUNTERS, LABELS)] == [4.0]


def test_a_long_line_of_another_metric_is_skipped_without_being_kept() -> None:
    reader = Reader(COUNTERS, LABELS)
    for _ in range(64):
        reader.feed(b"x" * 65536)  # one line of 4 MiB, in pieces
        assert len(reader._carry) <= MAX_LINE + 65536
    reader.feed(f"\n{DRAFTS} 2\n".encode())
    assert [s.value for s in reader.close()] == [2.0]


def test_a_long_line_of_ours_is_refused_before_it_ends() -> None:
    reader = Reader(COUNTERS, LABELS)
    reader.feed(f'{DRAFTS}{{model_name="'.encode())
    for _ in range(MAX_LINE // 1024 - 1):
        reader.feed(b"m" * 1024)  # still within a line's bound
    with pytest.raises(ExpositionError, match=f"more than {MAX_LINE} bytes") as raised:
        reader.feed(b"m" * 1024)
    assert raised.value.bound


def test_the_lines_kept_are_bounded_in_bytes() -> None:
    line = f'{DRAFTS}{{model_name="{"m" * 4000}"}} 1\n'.encode()
    with pytest.raises(ExpositionError, match=f"{MAX_KEPT >> 10} KiB") as raised:
        samples(line * (MAX_KEPT // len(line) + 1), COUNTERS, LABELS)
    assert raised.value.bound


def test_only_the_labels_asked_for_are_kept() -> None:
    (sample,) = samples(f'{DRAFTS}{{engine="0",model_name="m",x="{"y" * 1000}"}} 1\n', COUNTERS, LABELS)
    assert sample.labels == {"model_name": "m"}


def reference_unescape(raw: str) -> str:
    """The escapes as the exposition format defines them, one pair at a time."""
    return re.sub(r"\\(.)", lambda m: {"\\": "\\", '"': '"', "n": "\n"}.get(m.group(1), m.group(0)), raw)


@settings(max_examples=500)
@given(
    st.lists(st.sampled_from(["a", "n", "\\\\", '\\"', "\\n", "\\t", "\\a", "é", "\x00", "\x01", "\x02"]), max_size=30)
)
def test_unescaping_by_splitting_agrees_with_one_pair_at_a_time(pieces: list[str]) -> None:
    raw = "".join(pieces)
    assert _unescape(raw) == reference_unescape(raw)


@pytest.mark.parametrize("spacing", ['l{i}="v"', 'l{i}= "v"', 'l{i} ="v"', 'l{i} = "v"', 'l{i}=\t"v"'])
def test_labels_are_counted_as_read_however_they_are_spaced(spacing: str) -> None:
    """The text format allows blanks around `=`: the bound holds whatever the spacing."""
    within = ",".join(spacing.format(i=i) for i in range(16))
    assert samples(f"{DRAFTS}{{{within}}} 1\n", COUNTERS, LABELS)[0].value == 1.0
    beyond = ",".join(spacing.format(i=i) for i in range(17))
    with pytest.raises(ExpositionError, match="more than 16 labels") as raised:
        samples(f"{DRAFTS}{{{beyond}}} 1\n", COUNTERS, LABELS)
    assert raised.value.bound
