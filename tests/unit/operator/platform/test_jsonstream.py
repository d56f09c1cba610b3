"""The API server's streams cut into bounded documents: nothing over the bounds is buffered or parsed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from specinfer_operator.platform.jsonstream import (
    MAX_DOCUMENT_BYTES,
    MAX_VALUES,
    TOO_LARGE,
    TOO_MANY_VALUES,
    UNREADABLE,
    Items,
    Lines,
    parsed,
    values,
)

# Strings that look like structure: brackets, quotes, escapes, a backslash last, newlines escaped, UTF-8.
TRICKY = ['{"a":[1,2]}', '\\"}]', "\\", "]}{[", "line\nbreak", "é✓", ""]


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


class Taken:
    def __init__(self) -> None:
        self.documents: list[bytes] = []
        self.refused: list[str] = []


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}, "spec": {"x": TRICKY}}


def test_lines_are_handed_over_whole_however_the_stream_is_cut() -> None:
    events = [{"type": "ADDED", "object": pod(f"p{i}", note=TRICKY[i % len(TRICKY)])} for i in range(5)]
    stream = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    for size in (1, 2, 7, 64, len(stream)):
        taken = Taken()
        lines = Lines(taken.documents.append, taken.refused.append)
        for chunk in pieces(stream, size):
            lines.feed(chunk)
        assert [json.loads(d) for d in taken.documents] == events
        assert taken.refused == []


def test_a_line_over_the_bound_is_dropped_as_it_streams_never_buffered_whole() -> None:
    limit = 1000
    huge = json.dumps({"type": "ADDED", "object": pod("huge", filler="x" * 50_000)}).encode()
    small = json.dumps({"type": "ADDED", "object": pod("small")}).encode()
    taken = Taken()
    lines = Lines(taken.documents.append, taken.refused.append, limit)
    largest = 0
    for chunk in pieces(small + b"\n" + huge + b"\n" + small + b"\n", 97):
        lines.feed(chunk)
        largest = max(largest, lines.buffered)
    assert largest <= limit
    assert taken.documents == [small, small]
    assert taken.refused == [TOO_LARGE]


def test_a_line_of_exactly_the_bound_passes_and_one_byte_more_does_not() -> None:
    taken = Taken()
    lines = Lines(taken.documents.append, taken.refused.append, 10)
    lines.feed(b"0123456789\n01234567890\n\n")
    assert (taken.documents, taken.refused) == ([b"0123456789"], [TOO_LARGE])


def test_a_list_is_cut_into_its_items_however_the_stream_is_cut() -> None:
    items = [pod(f"p{i}", note=t) for i, t in enumerate(TRICKY)]
    body = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}, "items": items}
    stream = json.dumps(body).encode()
    for size in (1, 2, 3, 7, 64, len(stream)):
        taken = Taken()
        cut = Items(taken.documents.append, taken.refused.append)
        for chunk in pieces(stream, size):
            cut.feed(chunk)
        assert [json.loads(d) for d in taken.documents] == items
        assert json.loads(cut.head) == {**body, "items": []}


def test_an_empty_list_and_a_status_are_all_head() -> None:
    for body in (
        {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []},
        {"kind": "Status", "code": 403, "details": {"causes": [{"reason": "x"}]}},
    ):
        taken = Taken()
        cut = Items(taken.documents.append, taken.refused.append)
        cut.feed(json.dumps(body).encode())
        assert (json.loads(cut.head), taken.documents) == (body, [])


def test_an_item_over_the_bound_is_dropped_as_it_streams_never_buffered_whole() -> None:
    limit = 1000
    items = [pod("a"), pod("huge", filler='x"}]' * 20_000), pod("b")]
    stream = json.dumps({"metadata": {"resourceVersion": "1"}, "items": items}).encode()
    taken = Taken()
    cut = Items(taken.documents.append, taken.refused.append, limit)
    largest = 0
    for chunk in pieces(stream, 101):
        cut.feed(chunk)
        largest = max(largest, cut.buffered)
    assert largest <= limit
    assert [json.loads(d)["metadata"]["name"] for d in taken.documents] == ["a", "b"]
    assert taken.refused == [TOO_LARGE]


def test_a_list_whose_own_fields_are_too_long_is_refused() -> None:
    cut = Items(lambda _: None, lambda _: None)
    with pytest.raises(ValueError, match="own fields"):
        cut.feed(json.dumps({"metadata": {"continue": "c" * 70_000}, "items": []}).encode())


@pytest.mark.parametrize(
    "document",
    [
        {"labels": {f"k{i}": "" for i in range(50)}},
        {"args": ["ab"] * 40, "empty": [[], {}, [[]]], "n": [1.5, None, True]},
        pod("p", note="a,b{c[d"),
    ],
)
def test_values_are_never_undercounted(document: Any) -> None:
    def count(value: Any) -> int:
        if isinstance(value, dict):
            return 1 + sum(count(v) for v in value.values())
        if isinstance(value, list):
            return 1 + sum(count(v) for v in value)
        return 1

    encoded = json.dumps(document, separators=(",", ":")).encode()
    assert values(encoded) >= count(document)


def test_a_document_of_too_many_values_is_not_parsed() -> None:
    refused: list[str] = []
    labels = json.dumps({"metadata": {"labels": {f"k{i:05d}": "" for i in range(40_000)}}}).encode()
    assert len(labels) < MAX_DOCUMENT_BYTES  # small enough in bytes: the count is what refuses it
    assert parsed(labels, refused.append) is None
    assert parsed(b"[" + b"1," * MAX_VALUES + b"1]", refused.append) is None
    assert parsed(b"[" + b"1," * (MAX_VALUES - 2) + b"1]", refused.append) == [1] * (MAX_VALUES - 1)
    assert refused == [TOO_MANY_VALUES, TOO_MANY_VALUES]


def test_a_document_that_is_not_json_is_refused() -> None:
    refused: list[str] = []
    assert parsed(b'{"a": ', refused.append) is None
    assert parsed(b'{"a": "\xff"}', refused.append) is None
    assert refused == [UNREADABLE, UNREADABLE]
