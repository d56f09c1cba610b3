"""The scraping threads, shared fairly: resources take turns, and one resource's pods hold a few threads at most.

A pod that accepts a connection and never answers holds a thread until the scrape deadline. With one
first-come queue, a resource of 48 such pods held all 16 threads for three deadlines, and every other
resource's scrapes waited behind them. Here each resource has a queue of its own; a free thread takes the
next resource in turn whose running scrapes are fewer than `share`, so a resource's pods never occupy more
than `share` threads, and another resource's scrape starts as soon as a thread is free, not after them.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


def share_of(workers: int) -> int:
    """The threads one resource's scrapes may hold at once: a quarter of them, so that no fewer than four
    resources whose pods all hang are needed to make another resource's scrape wait for a thread."""
    return max(1, workers // 4)


class FairQueue(Generic[K, T]):
    """Items by owner, taken round-robin across owners, at most `share` of one owner's taken and not done."""

    def __init__(self, share: int) -> None:
        self.share = share
        self._waiting: OrderedDict[K, deque[T]] = OrderedDict()  # owners with items, in turn order
        self._running: Counter[K] = Counter()

    def put(self, owner: K, item: T) -> None:
        self._waiting.setdefault(owner, deque()).append(item)

    def take(self) -> tuple[K, T] | None:
        """The next owner's next item, the owner's turn passing to the others; None when every owner with
        items already holds its share."""
        for owner, items in self._waiting.items():
            if self._running[owner] < self.share:
                item = items.popleft()
                self._running[owner] += 1
                if items:
                    self._waiting.move_to_end(owner)
                else:
                    del self._waiting[owner]
                return owner, item
        return None

    def done(self, owner: K) -> None:
        """An item of `owner` taken earlier has ended: its slot is free."""
        self._running[owner] -= 1
        if not self._running[owner]:
            del self._running[owner]


class FairPool(Generic[K]):
    """`workers` threads running submitted calls from a FairQueue: concurrent.futures' pool, shared fairly."""

    def __init__(self, workers: int, share: int, name: str) -> None:
        self.workers, self.name = workers, name
        self._queue: FairQueue[K, tuple[Future[Any], Callable[[], Any]]] = FairQueue(share)
        self._ready = threading.Condition()
        self._started = False
        self._closed = False

    def submit(self, owner: K, call: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            if not self._started:  # started with the first call: a loop that never scrapes holds no thread
                self._started = True
                for i in range(self.workers):
                    threading.Thread(target=self._work, name=f"{self.name}_{i}", daemon=True).start()
            self._queue.put(owner, (future, call))
            self._ready.notify()
        return future

    def shutdown(self) -> None:
        """The threads end once the calls already submitted have run."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def _work(self) -> None:
        while True:
            with self._ready:
                while (taken := self._queue.take()) is None:
                    if self._closed:
                        return
                    self._ready.wait()
            owner, (future, call) = taken
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as error:  # as concurrent.futures does: the caller's future carries it
                    future.set_exception(error)
                else:
                    future.set_result(result)
            with self._ready:
                self._queue.done(owner)
                self._ready.notify()  # another of this owner's calls may run now
