"""The scraping threads are shared fairly: a resource whose pods never answer holds its share of them, and
another resource's scrape is not queued behind its pods."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from specinfer_operator.telemetry.fair import FairPool, FairQueue, share_of
from specinfer_operator.telemetry.targets import ScrapeConfig

HANG_GUARD = 60  # seconds before a broken pool fails the test instead of hanging it; never a measure


def drain(queue: FairQueue[str, int]) -> list[tuple[str, int]]:
    taken = []
    while (item := queue.take()) is not None:
        taken.append(item)
    return taken


def test_a_resource_queued_after_48_pods_of_another_is_taken_with_the_first_of_them() -> None:
    queue: FairQueue[str, int] = FairQueue(share=4)
    for pod in range(48):
        queue.put("a", pod)
    queue.put("b", 0)
    taken = drain(queue)  # what free threads take while none of A's scrapes ends
    assert ("b", 0) in taken[:2]
    assert [item for item in taken if item[0] == "a"] == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]


def test_an_ended_scrape_frees_its_resources_slot_and_only_that() -> None:
    queue: FairQueue[str, int] = FairQueue(share=2)
    for pod in range(5):
        queue.put("a", pod)
    assert drain(queue) == [("a", 0), ("a", 1)]
    queue.done("a")
    assert drain(queue) == [("a", 2)]
    queue.done("a")
    queue.done("a")
    assert drain(queue) == [("a", 3), ("a", 4)]


def test_resources_take_turns() -> None:
    queue: FairQueue[str, int] = FairQueue(share=100)
    for owner in "abc":
        for pod in range(3):
            queue.put(owner, pod)
    assert [owner for owner, _ in drain(queue)] == list("abcabcabc")


@pytest.mark.parametrize(("workers", "share"), [(1, 1), (3, 1), (4, 1), (16, 4), (64, 16)])
def test_one_resource_may_hold_a_quarter_of_the_threads(workers: int, share: int) -> None:
    assert share_of(workers) == share


def test_the_operators_pool_leaves_most_threads_to_other_resources() -> None:
    workers = ScrapeConfig().concurrency
    assert workers - share_of(workers) >= 3 * share_of(workers)


def test_a_scrape_of_b_ends_while_every_pod_of_a_hangs() -> None:
    """48 of A's pods that hang until released, then one of B's: B's ends while A's still hang, and no more
    of A's than its share ever ran at once."""
    pool: FairPool[str] = FairPool(workers=16, share=4, name="test")
    release, lock = threading.Event(), threading.Lock()
    running, most = 0, 0

    def hang() -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(HANG_GUARD)
        with lock:
            running -= 1
        return "a"

    hung: list[Future[str]] = [pool.submit("a", hang) for _ in range(48)]
    b = pool.submit("b", lambda: "b")
    try:
        assert b.result(HANG_GUARD) == "b"
        assert not any(f.done() for f in hung)
    finally:
        release.set()
    assert [f.result(HANG_GUARD) for f in hung] == ["a"] * 48
    assert most == 4
    pool.shutdown()


def test_a_failing_call_fails_its_future_only() -> None:
    pool: FairPool[str] = FairPool(workers=2, share=1, name="test")

    def fail() -> int:
        raise ValueError("broken")

    failing, fine = pool.submit("a", fail), pool.submit("a", lambda: 1)
    with pytest.raises(ValueError, match="broken"):
        failing.result(HANG_GUARD)
    assert fine.result(HANG_GUARD) == 1
    pool.shutdown()
