"""Windowed figures: increases between samples, restarts, stale pods and the window's edge."""

from __future__ import annotations

import pytest

from specinfer_operator.measure.scrape import counts
from specinfer_operator.measure.window import Counts, History, Sample, aggregate, increase, served_since
from tests.support import DATA

DATA = DATA / "metrics"


def capture(name: str) -> Counts:
    found = counts((DATA / name).read_bytes())
    assert found is not None
    return found


def test_increase_between_real_captures_of_one_engine() -> None:
    first, third = capture("ngram-k4-1.txt"), capture("ngram-k4-3.txt")
    samples = [Sample(0, "a/0", first), Sample(30, "a/0", capture("ngram-k4-2.txt")), Sample(60, "a/0", third)]
    assert increase(samples) == third.since(first)
    got = increase(samples)
    assert got.drafts > 0
    assert got.accepted <= got.draft_tokens
    assert sum(got.per_position) == got.accepted


def test_a_restart_counts_the_new_series_in_full_never_negative() -> None:
    before, after = capture("ngram-k4-3.txt"), capture("ngram-k4-restarted-1.txt")
    assert after.drafts < before.drafts  # the restarted engine counts from zero
    # Detected from the counters alone (the container ID is unknown, e.g. the process restarted in place)...
    assert increase([Sample(0, "a/0", before), Sample(30, "a/0", after)]) == after
    # ...and from the series (restart count), even when the new counters already exceed the old ones.
    grown = after + before
    assert increase([Sample(0, "a/0", before), Sample(30, "a/1", grown)]) == grown


def test_counts_add_and_subtract_with_different_widths() -> None:
    assert Counts(2, 4, 3, (2, 1)) + Counts(1, 3, 1, (1, 0, 0)) == Counts(3, 7, 4, (3, 1, 0))
    assert Counts(3, 7, 4, (3, 1, 0)).since(Counts(2, 4, 3, (2, 1))) == Counts(1, 3, 1, (1, 0, 0))
    assert Counts(3, 7, 4, (3, 1)).since(Counts(3, 7, 4, (2, 2))) is None


def test_the_window_keeps_one_baseline_before_its_start() -> None:
    history = History(limit=100)
    for t in range(0, 400, 30):
        history.record(Sample(t, "a/0", Counts(t, 2 * t, t, (t,))), window=120)
    times = [s.time for s in history.samples]
    assert times[0] <= 390 - 120 < times[1]
    within = history.within(390, 120)
    assert (within[0].time, within[-1].time) == (270, 390)
    assert increase(within) == Counts(120, 240, 120, (120,))


def test_history_is_bounded_whatever_the_window() -> None:
    history = History(limit=5)
    for t in range(100):
        history.record(Sample(t, "a/0", Counts(t)), window=10**6)
    assert len(history.samples) == 5


def test_aggregate_sums_fresh_pods_only() -> None:
    a, b = History(10), History(10)
    for t, n in ((0, 0), (30, 10)):
        a.record(Sample(t, "a/0", Counts(n, 4 * n, 2 * n, (n, n))), window=300)
        b.record(Sample(t, "b/0", Counts(n, 4 * n, 4 * n, (n, n, n, n))), window=300)
    both = aggregate({"a": a, "b": b}, pods=2, fresh={"a", "b"}, now=30, window=300)
    assert (both.pods, both.pods_measured, both.seconds) == (2, 2, 30)
    assert both.counts == Counts(20, 80, 60, (20, 20, 10, 10))
    assert both.acceptance.acceptance_rate == pytest.approx(60 / 80)
    assert both.acceptance.mean_acceptance_length == pytest.approx(1 + 60 / 20)
    # b stopped answering: its figures are left out rather than presented as fresh.
    only_a = aggregate({"a": a, "b": b}, pods=2, fresh={"a"}, now=60, window=300)
    assert (only_a.pods, only_a.pods_measured, only_a.counts) == (2, 1, Counts(10, 40, 20, (10, 10)))


def test_a_first_sample_of_unknown_age_is_no_evidence() -> None:
    history = History(10)
    history.record(Sample(0, "a/0", capture("ngram-k4-3.txt")), window=300)
    figures = aggregate({"a": history}, pods=1, fresh={"a"}, now=0, window=300)
    assert (figures.counts, figures.seconds) == (Counts(), 0)
    assert figures.acceptance.mean_acceptance_length is None  # lifetime totals are never reported


def test_a_series_born_inside_the_window_counts_from_its_start() -> None:
    """A pod that started 20 s ago served requests before its first scrape: they are in the window."""
    early, later = capture("ngram-k4-1.txt"), capture("ngram-k4-2.txt")
    history = History(10)
    history.record(Sample(1000, "a/0", early, born=980), window=300)
    first = aggregate({"a": history}, pods=1, fresh={"a"}, now=1000, window=300)
    assert (first.counts, first.seconds) == (early, 20)
    history.record(Sample(1030, "a/0", later, born=980), window=300)
    assert aggregate({"a": history}, pods=1, fresh={"a"}, now=1030, window=300).counts == later


def test_a_series_born_before_the_window_starts_from_a_baseline() -> None:
    early, later = capture("ngram-k4-1.txt"), capture("ngram-k4-2.txt")
    history = History(10)
    history.record(Sample(1000, "a/0", early, born=0), window=300)
    history.record(Sample(1030, "a/0", later, born=0), window=300)
    figures = aggregate({"a": history}, pods=1, fresh={"a"}, now=1030, window=300)
    assert (figures.counts, figures.seconds) == (later.since(early), 30)
    # Once the window has moved past the series' birth, its first sample is a baseline again.
    assert increase(history.samples, start=1030 - 300) == later.since(early)


def test_requests_served_between_two_scrapes_of_a_real_engine() -> None:
    first, third = capture("ngram-k4-1.txt"), capture("ngram-k4-3.txt")
    served = third.steps.requests - first.steps.requests
    assert served > 0
    assert served_since(Sample(0, "a/0", first), Sample(60, "a/0", third)) == served
    assert served_since(None, Sample(60, "a/0", third)) == 0  # the first scrape: no baseline
    # a restart (another series, or counters that went down) counts nothing, never a negative number
    assert served_since(Sample(0, "a/0", third), Sample(60, "a/1", first)) == 0
    assert served_since(Sample(0, "a/0", third), Sample(60, "a/0", first)) == 0
