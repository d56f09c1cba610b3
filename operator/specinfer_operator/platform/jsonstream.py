"""Bounded framing of the API server's JSON streams (pure): a watch's events, one per line, and a list's items.

Anyone who may create a pod may give it the operator's labels and as much as the API server stores: 40,000
labels and 256 KiB of annotations make a pod of 1.4 MiB as JSON, and about 10 MiB of Python objects once
parsed whole. So nothing is parsed before it is bounded. A document (an event line, a list item) is cut out
of the stream as it comes in and dropped as soon as it passes MAX_DOCUMENT_BYTES, never buffered past that;
a document within it is parsed only if it holds at most MAX_VALUES JSON values, counted without parsing.
What a parse makes is about a hundred bytes of Python objects per value plus its strings: at most a few MiB
for a document within both bounds, and the caller handles one document at a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# A document's bytes, at most. Above what the API server stores of a pod (etcd refuses a write over 1.5 MiB),
# so that every pod the operator renders fits, whatever its spec: a real engine pod's event is 7 to 10 KiB.
MAX_DOCUMENT_BYTES = 2 * 2**20
# A document's JSON values, at most: the count of Python objects a parse makes, which the bytes do not bound
# (a label `"k00001":""` is 12 bytes and two strings). A real engine pod's watch event, its managed fields
# included, counts 450 to 750 (7 to 10 KiB); one whose spec has the 64 environment variables of 4 KiB the CRD
# allows, 1,271 (270 KiB).
MAX_VALUES = 16_384
MAX_HEAD_BYTES = 64 * 1024  # a list's own fields (kind, metadata): a resourceVersion and a continue token

TOO_LARGE, TOO_MANY_VALUES, UNREADABLE = "too_large", "too_many_values", "unreadable"
Refuse = Callable[[str], None]  # told why a document was dropped: TOO_LARGE, TOO_MANY_VALUES or UNREADABLE


def values(document: bytes) -> int:
    """At least as many as the JSON values in `document`: each value but a container's first follows a comma,
    and each container opens with a bracket (those inside strings are counted too, which only overcounts)."""
    return document.count(b",") + document.count(b"{") + document.count(b"[") + 1


def parsed(document: bytes, refuse: Refuse, max_values: int = MAX_VALUES) -> Any:
    """`document` parsed, or None (and `refuse` told why) when it holds too many values or is not JSON."""
    if values(document) > max_values:
        refuse(TOO_MANY_VALUES)
        return None
    try:
        return json.loads(document)
    except ValueError:  # UnicodeDecodeError among them
        refuse(UNREADABLE)
        return None


class Lines:
    """A watch's stream cut into its lines (one event each), handed to `accept` as each ends; a line longer
    than `limit` is dropped as it streams in, and `refuse` told, at its end."""

    def __init__(self, accept: Callable[[bytes], None], refuse: Refuse, limit: int = MAX_DOCUMENT_BYTES) -> None:
        self._accept, self._refuse, self._limit = accept, refuse, limit
        self._line = bytearray()
        self._dropping = False

    @property
    def buffered(self) -> int:
        return len(self._line)

    def feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(chunk, start, end)
            if self._dropping:
                self._refuse(TOO_LARGE)
            elif self._line:
                self._emit()
            self._dropping = False
            start = end + 1
        self._take(chunk, start, len(chunk))

    def _emit(self) -> None:
        line = bytes(self._line)  # the buffer is emptied before the line is handled: one copy alive, not two
        self._line.clear()
        self._accept(line)

    def _take(self, chunk: bytes, start: int, end: int) -> None:
        if self._dropping:
            return
        if len(self._line) + end - start > self._limit:
            self._dropping = True
            self._line.clear()
        else:
            self._line += chunk[start:end]


_OUTSIDE = re.compile(rb'[{}\[\]"]')  # what changes the nesting, or opens a string
_INSIDE = re.compile(rb'["\\]')  # what ends a string, or escapes the next byte
_HEAD, _ITEM, _BETWEEN = range(3)


class Items:
    """A list's response (`{"kind": ..., "metadata": {...}, "items": [{...}, ...]}`) cut into its items as
    they stream in, each handed to `accept` as it ends; an item longer than `limit` is dropped as it streams
    in, and `refuse` told. The rest, the list with its items left out, is `head` (at most MAX_HEAD_BYTES).

    The JSON is followed byte class by byte class (strings, escapes, nesting), never parsed: an item is an
    object directly inside the array that the list's top-level object holds."""

    def __init__(self, accept: Callable[[bytes], None], refuse: Refuse, limit: int = MAX_DOCUMENT_BYTES) -> None:
        self._accept, self._refuse, self._limit = accept, refuse, limit
        self.head = bytearray()
        self._item = bytearray()
        self._dropping = False
        self._depth = 0
        self._string = self._escaped = self._array = False
        self._into = _HEAD

    @property
    def buffered(self) -> int:
        return len(self._item)

    def feed(self, chunk: bytes) -> None:
        pos, mark, end = 0, 0, len(chunk)
        while pos < end:
            if self._escaped:
                self._escaped, pos = False, pos + 1
                continue
            if self._string:
                found = _INSIDE.search(chunk, pos)
                if found is None:
                    break
                pos = found.end()
                if chunk[found.start()] == ord("\\"):
                    self._escaped = True
                else:
                    self._string = False
                continue
            found = _OUTSIDE.search(chunk, pos)
            if found is None:
                break
            at, pos = found.start(), found.end()
            byte = chunk[at]
            if byte == ord('"'):
                self._string = True
            elif byte in b"{[":
                if self._array and self._depth == 2 and byte == ord("{"):  # an item begins
                    self._put(chunk, mark, at)
                    mark, self._into = at, _ITEM
                elif self._depth == 1 and byte == ord("["):  # the items begin: the head keeps `[`, not them
                    self._put(chunk, mark, pos)
                    mark, self._into, self._array = pos, _BETWEEN, True
                self._depth += 1
            else:
                self._depth -= 1
                if self._into == _ITEM and self._depth == 2:  # the item ends
                    self._put(chunk, mark, pos)
                    self._end_item()
                    mark, self._into = pos, _BETWEEN
                elif self._array and self._depth == 1:  # the items end: the head goes on from `]`
                    self._put(chunk, mark, at)
                    mark, self._into, self._array = at, _HEAD, False
        self._put(chunk, mark, end)

    def _put(self, chunk: bytes, start: int, end: int) -> None:
        if self._into == _HEAD:
            if len(self.head) + end - start > MAX_HEAD_BYTES:
                raise ValueError(f"a list's own fields past {MAX_HEAD_BYTES} bytes")
            self.head += chunk[start:end]
        elif self._into == _ITEM and not self._dropping:
            if len(self._item) + end - start > self._limit:
                self._dropping = True
                self._item.clear()
            else:
                self._item += chunk[start:end]

    def _end_item(self) -> None:
        if self._dropping:
            self._refuse(TOO_LARGE)
        else:
            item = bytes(self._item)
            self._item.clear()
            self._accept(item)
        self._dropping = False
