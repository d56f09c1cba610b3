"""Times as status and events write them (RFC 3339, whole seconds, UTC), and the age of one."""

from __future__ import annotations

from datetime import UTC, datetime

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> str:
    return datetime.now(UTC).strftime(TIME_FORMAT)


def parse(stamp: str) -> datetime:
    """A status timestamp as an aware datetime; ValueError when it is not one."""
    return datetime.strptime(stamp, TIME_FORMAT).replace(tzinfo=UTC)


def age(then: str | None, now: str) -> float:
    """Seconds from `then` to `now`; infinite when `then` is missing or unreadable (long ago, for every use)."""
    try:
        return (parse(now) - parse(then or "")).total_seconds()
    except ValueError:
        return float("inf")
