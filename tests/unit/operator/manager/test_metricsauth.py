"""Who may read /metrics: the review's verdicts, cached briefly, boundedly, and never by the token itself."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from specinfer_operator.manager.endpoints import metrics_handler
from specinfer_operator.manager.metricsauth import Decisions, bearer
from specinfer_operator.manager.serving import Request


class Reviews:
    """A review that answers from a table and counts how often it was asked."""

    def __init__(self, verdicts: dict[str, int]) -> None:
        self.verdicts, self.asked = verdicts, 0

    def __call__(self, token: str) -> int:
        self.asked += 1
        return self.verdicts.get(token, 401)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_verdict_is_kept_for_its_ttl_then_asked_again() -> None:
    reviews, clock = Reviews({"reader": 200}), Clock()
    decisions = Decisions(reviews, ttl=10, clock=clock)
    assert [decisions.status("reader") for _ in range(3)] == [200, 200, 200]
    assert reviews.asked == 1
    clock.now = 10.5
    reviews.verdicts["reader"] = 403  # the binding was removed
    assert decisions.status("reader") == 403
    assert reviews.asked == 2


def test_the_cache_is_bounded_and_keyed_by_a_hash() -> None:
    decisions = Decisions(Reviews({}), size=16)
    for n in range(1000):
        assert decisions.status(f"forged-{n}") == 401
    assert len(decisions.kept) == 16
    assert all(len(key) == 32 and b"forged" not in key for key in decisions.kept)


def test_a_failed_review_is_not_kept() -> None:
    reviews = Reviews({"t": 500})
    decisions = Decisions(reviews)
    decisions.status("t")
    decisions.status("t")
    assert reviews.asked == 2


@pytest.mark.parametrize(
    ("header", "token"), [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", ""), ("", ""), ("Bearer", "")]
)
def test_bearer(header: str, token: str) -> None:
    assert bearer(header) == token


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"authorization": "Basic x"}, 401),
        ({"authorization": "Bearer nobody"}, 401),
        ({"authorization": "Bearer other"}, 403),
        ({"authorization": "Bearer reader"}, 200),
    ],
)
def test_metrics_answer_only_the_allowed(headers: dict[str, str], status: int) -> None:
    reviews = Reviews({"reader": 200, "other": 403})
    with ThreadPoolExecutor(1) as pool:
        response = asyncio.run(metrics_handler(Decisions(reviews), pool)(Request("GET", "/metrics", headers)))
    assert response.status == status
    assert (b"# HELP" in response.body) == (status == 200)
    assert reviews.asked == (1 if "Bearer" in headers.get("authorization", "") else 0)


def test_plain_metrics_need_no_token_and_serve_nothing_else() -> None:
    handler = metrics_handler(None, ThreadPoolExecutor(1))
    assert asyncio.run(handler(Request("GET", "/metrics", {}))).status == 200
    assert asyncio.run(handler(Request("GET", "/debug", {}))).status == 404
