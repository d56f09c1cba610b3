"""Debounced refreshes: one run per burst of requests, after the burst, in the first request's context."""

from __future__ import annotations

import contextvars
import threading

from specinfer_operator.platform.debounce import Debounce

ORIGIN: contextvars.ContextVar[str] = contextvars.ContextVar("origin", default="none")


def test_a_burst_of_requests_runs_the_action_once_after_it() -> None:
    runs: list[str] = []
    done = threading.Event()

    def action(key: str) -> None:
        runs.append(key)
        done.set()

    debounce = Debounce(action, delay=0.2, workers=2, name="test")
    try:
        for _ in range(50):
            debounce.schedule("a")
        assert runs == []  # nothing before the delay
        assert done.wait(5)
        debounce.stop()
        assert runs == ["a"]
    finally:
        debounce.stop()


def test_a_request_after_the_run_started_runs_it_again() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Semaphore(0)
    runs: list[str] = []

    def action(key: str) -> None:
        runs.append(key)
        started.set()
        release.wait(5)
        finished.release()

    debounce = Debounce(action, delay=0.01, workers=2, name="test")
    try:
        debounce.schedule("a")
        assert started.wait(5)
        debounce.schedule("a")  # the first run may have read the old state: another one follows
        release.set()
        assert finished.acquire(timeout=5)
        assert finished.acquire(timeout=5)
        assert runs == ["a", "a"]
    finally:
        debounce.stop()


def test_keys_are_independent_and_run_in_the_requesters_context() -> None:
    seen: dict[str, str] = {}
    done = threading.Semaphore(0)

    def action(key: str) -> None:
        seen[key] = ORIGIN.get()
        done.release()

    debounce = Debounce(action, delay=0.01, workers=2, name="test")
    try:
        for key in ("a", "b"):
            ORIGIN.set(f"handler of {key}")
            debounce.schedule(key)
        assert done.acquire(timeout=5)
        assert done.acquire(timeout=5)
        assert seen == {"a": "handler of a", "b": "handler of b"}
    finally:
        debounce.stop()


def test_a_failing_action_does_not_stop_the_others() -> None:
    done = threading.Event()

    def action(key: str) -> None:
        if key == "bad":
            raise RuntimeError("boom")
        done.set()

    debounce = Debounce(action, delay=0.01, workers=1, name="test")
    try:
        debounce.schedule("bad")
        debounce.schedule("good")
        assert done.wait(5)
    finally:
        debounce.stop()


def test_nothing_runs_after_stop() -> None:
    runs: list[str] = []
    debounce = Debounce(runs.append, delay=0.05, workers=1, name="test")
    debounce.schedule("a")
    debounce.stop()
    debounce.schedule("b")
    threading.Event().wait(0.2)
    assert runs == []
