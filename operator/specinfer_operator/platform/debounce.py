"""Run an action once per key, shortly after the first request for it, on a bounded pool of threads.

Child events come in bursts: a rollout moves the Deployment and every pod through several states within
a second. Refreshing a resource's status on each event costs the API server a round trip per event and
kept kopf's handler threads, which also reconcile new specs, busy waiting on it. Requests for a key that
is already due join it; the action then reads the state after the whole burst.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class Debounce(Generic[K]):
    """`schedule(key)` runs `action(key)` `delay` seconds later, once for all requests until then.

    The action runs in the context variables of the first request (kopf's event posting needs them)."""

    def __init__(self, action: Callable[[K], None], delay: float, workers: int, name: str) -> None:
        self.action, self.delay = action, delay
        self._pool = ThreadPoolExecutor(workers, name)
        self._due: set[K] = set()
        self._queue: list[tuple[float, int, K, contextvars.Context]] = []
        self._order = itertools.count()  # ties in time keep arrival order; keys need not be comparable
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._dispatch, name=f"{name}-timer", daemon=True)
        self._thread.start()

    def schedule(self, key: K) -> None:
        with self._wake:
            if key in self._due or self._stopped:
                return
            self._due.add(key)
            entry = (time.monotonic() + self.delay, next(self._order), key, contextvars.copy_context())
            heapq.heappush(self._queue, entry)
            self._wake.notify()

    def stop(self) -> None:
        """Drop what is due and let running actions finish."""
        with self._wake:
            self._stopped = True
            self._queue.clear()
            self._due.clear()
            self._wake.notify()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _dispatch(self) -> None:
        with self._wake:
            while not self._stopped:
                if not self._queue:
                    self._wake.wait()
                    continue
                wait = self._queue[0][0] - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                _, _, key, context = heapq.heappop(self._queue)
                self._pool.submit(context.run, self._fire, key)

    def _fire(self, key: K) -> None:
        with self._wake:
            self._due.discard(key)  # before the action reads: a request from now on schedules another run
        try:
            self.action(key)
        except Exception:  # one resource's failure must not end the others' refreshes
            log.exception("%s failed for %s", getattr(self.action, "__name__", "action"), key)
