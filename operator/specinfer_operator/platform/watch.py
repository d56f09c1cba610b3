"""A bounded list and watch of one collection, on the operator's API client, in a thread of its own.

kopf parses every watch event whole, queues a burst of them, and keeps each object's last bodies in its
workers: a pod of 1.4 MiB as JSON held about 10 MiB of the operator's memory for as long as it existed. Here
the list and the watch are read raw and cut into documents as they stream in (platform/jsonstream.py: at
most MAX_DOCUMENT_BYTES buffered, at most MAX_VALUES values parsed); each document is parsed and handed to
the sink, which keeps what it needs of it, before the next is read: one parsed object alive at a time.

A document over the bounds is dropped unread (counted in `specinfer_pod_events_refused_total{reason}`): the
watch cannot know which object it was. So after a watch that dropped one, the collection is listed again,
which drops what the sink knew of an object that is now over the bounds (its list item is dropped too):
within one watch's timeout (WATCH_SECONDS) of the event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specinfer_operator.platform.jsonstream import Items, Lines, parsed
from specinfer_operator.platform.metrics import POD_EVENTS_REFUSED

WATCH_SECONDS = 300  # the server ends each watch after this long; the next resumes where it ended
READ_SECONDS = WATCH_SECONDS + 30  # a silent connection (bookmarks come every minute or so) is given up
CONNECT_SECONDS = 10
CHUNK = 64 * 1024  # bytes read at a time
BACKOFF = (1.0, 30.0)  # seconds before the first retry after a failure, doubling up to the second
log = logging.getLogger(__name__)

Chunks = AbstractContextManager[Iterator[bytes]]  # a response's body, closed when the block ends


class Gone(Exception):  # noqa: N818 (reads as "raise Gone")
    """The watch cannot go on from its resource version (HTTP 410, or an ERROR event): list again."""

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(f"{code} {message[:256]}")
        self.code = code


class Source(Protocol):
    """Where the list and the watches come from; raises ApiException (Gone for 410) for a refused request."""

    def list(self) -> Chunks: ...

    def watch(self, version: str) -> Chunks: ...

    def interrupt(self) -> None:
        """End a read under way, from another thread."""


class Sink(Protocol):
    def event(self, kind: str | None, obj: dict[str, Any]) -> None:
        """An object added, modified or deleted; `kind` None for one listed."""

    def relisted(self, uids: set[str]) -> None:
        """A list has ended: what is not among `uids` is gone."""


class Watch:
    """List, then watch from the list's resource version; list again when that version is gone (HTTP 410 or
    an ERROR event) or after events were dropped; after any other failure, wait (BACKOFF) and watch again
    from where the last watch ended."""

    def __init__(self, source: Source, sink: Sink, name: str, wait: Callable[[float], bool] | None = None) -> None:
        self.source, self.sink, self.name = source, sink, name
        self._stopping = threading.Event()
        self._wait = wait or self._stopping.wait  # True: stop
        self._thread: threading.Thread | None = None
        self.version: str | None = None  # where the next watch starts; None: list first
        self._stale = False  # an event was dropped since the last list
        self._lines = 0  # lines the current watch brought

    def relist(self) -> None:
        """List the collection, hand each item to the sink, then tell it which were listed. An item over the
        bounds is not listed: its object is gone for the sink."""
        listed: set[str] = set()

        def accept(item: bytes) -> None:
            obj = parsed(item, _count)
            if isinstance(obj, dict):
                listed.add(str((obj.get("metadata") or {}).get("uid") or ""))
                self.sink.event(None, obj)

        items = Items(accept, _count)
        with self.source.list() as chunks:
            for chunk in chunks:
                items.feed(chunk)
        head = parsed(bytes(items.head), _count)
        version = (head.get("metadata") or {}).get("resourceVersion") if isinstance(head, dict) else None
        if not version:
            raise ValueError("a list without a resourceVersion")
        self.sink.relisted(listed)
        self.version, self._stale = str(version), False

    def watch(self) -> bool:
        """One watch from `version`, until the server ends it; whether it brought any line (a watch that
        brought none backs off before the next, as a failure does)."""
        assert self.version is not None
        self._lines = 0

        def accept(line: bytes) -> None:
            self._lines += 1
            self._event(parsed(line, self._drop))

        lines = Lines(accept, self._drop)
        with self.source.watch(self.version) as chunks:
            for chunk in chunks:
                lines.feed(chunk)
                if self._stopping.is_set():
                    break
        return self._lines > 0

    def _event(self, event: Any) -> None:
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            return
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            raise Gone(obj.get("code"), str(obj.get("message", "")))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.sink.event(kind, obj)
        if version and kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            self.version = str(version)

    def _drop(self, reason: str) -> None:
        self._lines += 1
        self._stale = True
        _count(reason)

    def run(self) -> None:
        """Watch until stopped; list again when needed (see the class)."""
        delay = 0.0
        while not self._stopping.is_set():
            try:
                if self._stale:
                    log.warning("%s: events over the bounds were dropped; listing again", self.name)
                if self.version is None or self._stale:
                    self.relist()
                brought = self.watch()
            except Gone as gone:
                log.info("%s: %s; listing again", self.name, gone)
                self.version, brought = None, gone.code == 410
            except Exception as error:  # the watch must outlive anything: the API server may be away
                if self._stopping.is_set():
                    return
                log.warning("%s failed: %s", self.name, error)
                brought = False
            delay = 0.0 if brought else min(BACKOFF[1], delay * 2 or BACKOFF[0])
            if delay and self._wait(delay):
                return

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name=f"watch {self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop watching: the read under way ends (its thread, a daemon, is not waited for: see `join`)."""
        self._stopping.set()
        self.source.interrupt()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


def _count(reason: str) -> None:
    POD_EVENTS_REFUSED.labels(reason).inc()


class ApiSource:
    """A collection's list and watches through the operator's API client (its configuration and token)."""

    def __init__(self, api: client.ApiClient, path: str, selector: str) -> None:
        self.api, self.path, self.selector = api, path, selector
        self._reading: urllib3.HTTPResponse | None = None

    def list(self) -> Chunks:
        return self._get({"labelSelector": self.selector})

    def watch(self, version: str) -> Chunks:
        return self._get(
            {
                "labelSelector": self.selector,
                "watch": "true",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(WATCH_SECONDS),
            }
        )

    @contextmanager
    def _get(self, query: dict[str, str]) -> Iterator[Iterator[bytes]]:
        method, url, headers, _, _ = self.api.param_serialize(
            method="GET",
            resource_path=self.path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        answer = self.api.call_api(method, url, header_params=headers, _request_timeout=(CONNECT_SECONDS, READ_SECONDS))
        response: urllib3.HTTPResponse = answer.response
        self._reading = response
        try:
            if response.status == 410:
                raise Gone(410, str(response.reason))
            if response.status >= 400:
                said = response.read(4096).decode(errors="replace")
                raise ApiException(status=response.status, reason=response.reason, body=said)
            yield response.stream(CHUNK)
        finally:
            self._reading = None
            response.close()  # a body left unread must not go back to the pool
            response.release_conn()

    def interrupt(self) -> None:
        reading = self._reading
        if reading is not None:
            reading.shutdown()
