"""A bounded HTTP/1.1 server for the operator's own /metrics and probes.

Anyone who reaches a port may connect to it, so what a connection may cost is bounded here rather than trusted:
at most `connections` at once (and `per_peer` from one address); the TLS handshake and the request head within
`header_timeout` and `header_bytes`; one request per connection. When every slot (or the address's share) is
taken, a new connection takes the slot of the oldest one (of that address) still waiting for its head: idle or
slow clients cannot keep out the kubelet's probe or Prometheus' scrape, which ask as soon as they connect. Every
server runs on one event loop in one thread, so connections cost no threads.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import cast

# The exceptions a client can cause by what it sends or by going away; each ends its connection, nothing more.
CLIENT_ERRORS = (TimeoutError, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
REASONS |= {405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    connections: int = 32
    per_peer: int = 8
    header_timeout: float = 5.0
    header_bytes: int = 8192
    write_timeout: float = 10.0


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self) -> bytes:
        head = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Error')}"]
        head += [f"Content-Type: {self.content_type}", f"Content-Length: {len(self.body)}", "Connection: close"]
        head += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + self.body


Handler = Callable[[Request], Coroutine[None, None, Response]]


def parse_head(head: bytes) -> Request | None:
    """The request line and headers, or None when they are not HTTP/1.x."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1.") or not target.startswith("/"):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    return Request(method, target.split("?", 1)[0], headers)


def parse_bind(text: str) -> tuple[str, int] | None:
    """`host:port`, `[v6]:port` or `:port` (every address); "0" or "" for no server."""
    if text in ("", "0"):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host and host != "localhost":
        ipaddress.ip_address(host)  # a name would bind wherever it resolves to
    return host, int(port)


def is_loopback(host: str) -> bool:
    return host == "localhost" or (bool(host) and ipaddress.ip_address(host).is_loopback)


@dataclass
class Server:
    """One listening port; `tls` is applied after the connection is counted, so a handshake is bounded too."""

    host: str
    port: int
    handler: Handler
    limits: Limits
    tls: ssl.SSLContext | None = None
    active: int = 0
    peers: dict[str, int] = field(default_factory=dict)
    # The connections still waiting for their request head, oldest first: the ones a new connection may replace.
    waiting: OrderedDict[int, tuple[str, asyncio.Task[None]]] = field(default_factory=OrderedDict)
    _server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host or None, self.port, limit=self.limits.header_bytes, backlog=128
        )

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.tls is not None:
            # Before the first await: else the client's hello lands in the plain reader, lost to start_tls.
            cast(asyncio.Transport, writer.transport).pause_reading()
        peer = str((writer.get_extra_info("peername") or ("",))[0])
        if not self._make_room(peer):
            writer.transport.abort()
            return
        self.active += 1
        self.peers[peer] = self.peers.get(peer, 0) + 1
        task = asyncio.current_task()
        assert task is not None
        key = id(task)
        self.waiting[key] = (peer, task)
        try:
            request = await asyncio.wait_for(self._read(reader, writer), self.limits.header_timeout)
            self.waiting.pop(key, None)
            await asyncio.wait_for(self._reply(request, writer), self.limits.write_timeout)
        except CLIENT_ERRORS:
            pass
        finally:
            self.waiting.pop(key, None)
            self.active -= 1
            self.peers[peer] -= 1
            if not self.peers[peer]:
                del self.peers[peer]
            writer.transport.abort()

    def _make_room(self, peer: str) -> bool:
        """Whether a new connection from `peer` may have a slot: one is free, or the oldest connection still
        waiting for its head (of `peer` when that address holds its share) gives up its own."""
        crowded = self.peers.get(peer, 0) >= self.limits.per_peer
        if not crowded and self.active < self.limits.connections:
            return True
        for key, (owner, task) in self.waiting.items():
            if owner == peer or not crowded:
                del self.waiting[key]
                task.cancel()  # as its header timeout would: its slot is counted free when it ends
                return True
        return False

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
        """The handshake and the request head: what an idle or slow client could otherwise hold open."""
        if self.tls is not None:
            await writer.start_tls(self.tls)
        return parse_head((await reader.readuntil(b"\r\n\r\n"))[:-4])

    async def _reply(self, request: Request | None, writer: asyncio.StreamWriter) -> None:
        if request is None:
            response = Response(400, b"bad request\n")
        elif request.method != "GET":
            response = Response(405, b"method not allowed\n", headers=(("Allow", "GET"),))
        else:
            response = await self.handler(request)
        writer.write(response.encode())
        writer.close()  # flushes what is buffered, where an abort would drop it
        await writer.wait_closed()
