"""The list and watch requests on the operator's API client, against a local HTTP server: what is asked, the
body streamed in chunks, 410 and other refusals, and a read under way ended from another thread."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specinfer_operator.platform.watch import CHUNK, WATCH_SECONDS, ApiSource, Gone


class Api(BaseHTTPRequestHandler):
    """Answers each GET with the next of `answers`: (status, body, then hang before ending)."""

    answers: ClassVar[list[tuple[int, bytes, bool]]] = []
    asked: ClassVar[list[tuple[str, dict[str, list[str]]]]] = []
    release = threading.Event()
    ended = threading.Event()  # the server has ended its last answer

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.asked.append((url.path, parse_qs(url.query)))
        status, body, hang = self.answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(body), 1000):
            piece = body[start : start + 1000]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        if hang:
            self.wfile.flush()
            self.release.wait(10)
        self.wfile.write(b"0\r\n\r\n")
        self.ended.set()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def source() -> Iterator[ApiSource]:
    Api.answers, Api.asked = [], []
    Api.release.clear()
    Api.ended.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    yield ApiSource(client.ApiClient(configuration), "/api/v1/namespaces/a/pods", "app=x")
    Api.release.set()
    server.shutdown()
    server.server_close()


def test_a_list_and_a_watch_ask_for_what_they_need_and_stream_the_body(source: ApiSource) -> None:
    body = b"x" * (3 * CHUNK)
    Api.answers = [(200, b'{"items":[]}', False), (200, body, False)]
    with source.list() as chunks:
        assert b"".join(chunks) == b'{"items":[]}'
    with source.watch("42") as chunks:
        pieces = list(chunks)
    assert b"".join(pieces) == body
    assert max(len(p) for p in pieces) <= CHUNK
    assert Api.asked == [
        ("/api/v1/namespaces/a/pods", {"labelSelector": ["app=x"]}),
        (
            "/api/v1/namespaces/a/pods",
            {
                "labelSelector": ["app=x"],
                "watch": ["true"],
                "resourceVersion": ["42"],
                "allowWatchBookmarks": ["true"],
                "timeoutSeconds": [str(WATCH_SECONDS)],
            },
        ),
    ]


def test_410_is_gone_and_another_refusal_an_api_exception(source: ApiSource) -> None:
    Api.answers = [(410, b'{"code":410}', False), (403, b'{"reason":"Forbidden"}', False)]
    with pytest.raises(Gone), source.watch("1"):
        pass
    with pytest.raises(ApiException) as refused, source.list():
        pass
    assert refused.value.status == 403
    assert "Forbidden" in str(refused.value.body)


def test_a_read_under_way_is_ended_from_another_thread(source: ApiSource) -> None:
    Api.answers = [(200, b'{"type":"BOOKMARK"}\n', True)]
    read: list[bytes] = []
    with contextlib.suppress(Exception), source.watch("1") as chunks:  # whatever urllib3 makes of it
        for chunk in chunks:
            read.append(chunk)
            threading.Timer(0.1, source.interrupt).start()
    assert read == [b'{"type":"BOOKMARK"}\n']
    assert not Api.ended.is_set()  # the server still holds the answer open: the read was ended here
