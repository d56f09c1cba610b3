"""What a scrape holds in memory is bounded whatever the pod sends (scrape.MEMORY), one at a time and many at
once, as the operator's scraping threads run them. Measured with tracemalloc, which counts allocations, not
time: the figures do not depend on how busy the machine is."""

from __future__ import annotations

import contextlib
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from hack.hostile import BEHAVIOURS, REAL, Server, answer, escapes
from specinfer_operator.measure.scrape import MEMORY, Endpoint, ScrapeError, scrape

# Bodies that are costly to hold or to read, all within the size limit: what a pod may send.
COSTLY = {
    name: behaviour
    for name, behaviour, _, result in BEHAVIOURS
    if result in ("too_large", "unreadable", "protocol") and "a byte at a time" not in name
}
COSTLY["a real body"] = answer(REAL)
COSTLY["sample lines of escapes, within the bound"] = answer(escapes(30))


@contextlib.contextmanager
def traced() -> Iterator[list[int]]:
    """The peak of memory allocated while the block ran, above what was allocated before it."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield peak
        peak.append(tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()


def scraped(port: int) -> None:
    with contextlib.suppress(ScrapeError):
        scrape(Endpoint("127.0.0.1", port), timeout=60)


@pytest.mark.parametrize("name", sorted(COSTLY))
def test_one_scrape_holds_at_most_its_bound(name: str) -> None:
    with Server(COSTLY[name]) as server, traced() as peak:
        scraped(server.port)
    assert peak[0] <= MEMORY, f"{name}: {peak[0] >> 10} KiB"


def test_concurrent_scrapes_hold_at_most_their_bound_each() -> None:
    """Sixteen hostile pods scraped at once, as the operator's 16 scraping threads would."""
    behaviours = sorted(COSTLY.items())
    bodies = [behaviours[i % len(behaviours)][1] for i in range(16)]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(Server(b)) for b in bodies]
        with ThreadPoolExecutor(16) as pool, traced() as peak:
            list(pool.map(scraped, [s.port for s in servers]))
    assert peak[0] <= 16 * MEMORY, f"{peak[0] >> 20} MiB"
