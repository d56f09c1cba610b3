"""The operator's own ports: what a client that connects and holds, floods or speaks plain HTTP to TLS costs."""

from __future__ import annotations

import asyncio
import ssl
import threading

import pytest

from specinfer_operator.manager.endpoints import Health, health_handler
from specinfer_operator.manager.serving import Limits, Request, Response, Server, parse_bind, parse_head
from specinfer_operator.manager.tls import server_context


async def hello(request: Request) -> Response:
    return Response(200, f"{request.path} {request.headers.get('authorization', '')}".encode())


async def get(
    port: int, head: bytes = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", tls: ssl.SSLContext | None = None
) -> bytes:
    """The answer, or b"" when the server closed (or reset) the connection without one."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
        writer.write(head)
        answer = await reader.read()
    except (ConnectionResetError, ssl.SSLError):
        return b""
    writer.close()
    return answer


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def test_a_request_gets_its_answer_and_the_connection_closes() -> None:
    async def main() -> bytes:
        server = Server("127.0.0.1", 0, hello, Limits())
        await server.start()
        answer = await get(server.bound_port, b"GET /metrics?x=1 HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n")
        await server.close()
        return answer

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close\r\n" in answer
    assert answer.endswith(b"\r\n\r\n/metrics Bearer t")


def test_idle_connections_hold_their_slots_only_until_the_header_timeout() -> None:
    """Without the bound every idle connection held a thread; here one that sends nothing is closed without a
    word once the header timeout passes, and its slot comes back."""

    async def main() -> tuple[int, int, bytes]:
        server = Server("127.0.0.1", 0, hello, Limits(connections=4, per_peer=100, header_timeout=0.5))
        await server.start()
        idle = [await asyncio.open_connection("127.0.0.1", server.bound_port) for _ in range(4)]
        while server.active < 4:
            await asyncio.sleep(0.01)
        held = server.active
        answers = await asyncio.gather(*(reader.read() for reader, _ in idle))
        while server.active:
            await asyncio.sleep(0.01)
        after = await get(server.bound_port)
        await server.close()
        return held, sum(len(a) for a in answers), after

    held, idle_answers, after = asyncio.run(main())
    assert held == 4
    assert idle_answers == 0  # timed out, nothing sent
    assert after.startswith(b"HTTP/1.1 200 OK")  # the slots came back


def test_a_client_that_asks_takes_the_slot_of_the_oldest_idle_one() -> None:
    """Every slot held by connections that never send a head (the header timeout far away): each client that
    asks is answered, in the slot of the oldest idle connection, which is closed; the count stays bounded."""
    limits = Limits(connections=4, per_peer=100, header_timeout=60.0)

    async def main() -> tuple[list[bytes], list[int], list[bytes]]:
        server = Server("127.0.0.1", 0, hello, limits)
        await server.start()
        idle = [await asyncio.open_connection("127.0.0.1", server.bound_port) for _ in range(4)]
        while server.active < 4:
            await asyncio.sleep(0.01)
        answers, counts = [], []
        for _ in range(6):  # each time every slot is held by an idle connection again
            answers.append(await get(server.bound_port))
            counts.append(server.active)
            idle.append(await asyncio.open_connection("127.0.0.1", server.bound_port))
            while server.active < 4:
                await asyncio.sleep(0.01)
        evicted = [await reader.read() for reader, _ in idle[:6]]
        for _, writer in idle:
            writer.close()
        while server.active:
            await asyncio.sleep(0.01)
        await server.close()
        return answers, counts, evicted

    answers, counts, evicted = asyncio.run(main())
    assert all(a.startswith(b"HTTP/1.1 200 OK") for a in answers), answers
    assert max(counts) <= 4, counts
    assert evicted == [b""] * 6  # the six oldest, closed without a word, oldest first


def test_one_peer_cannot_take_every_slot() -> None:
    """An address holds at most `per_peer` slots: its newer connection replaces its oldest idle one, and another
    address's slots are untouched."""

    async def main() -> tuple[int, bytes, bytes]:
        server = Server("127.0.0.1", 0, hello, Limits(connections=10, per_peer=2, header_timeout=60.0))
        await server.start()
        other = await asyncio.open_connection("127.0.0.1", server.bound_port, local_addr=("127.0.0.2", 0))
        idle = [await asyncio.open_connection("127.0.0.1", server.bound_port) for _ in range(2)]
        while server.active < 3:
            await asyncio.sleep(0.01)
        third = await get(server.bound_port)
        active = server.active
        oldest = await idle[0][0].read()
        other[1].write(b"GET /other HTTP/1.1\r\n\r\n")
        others = await other[0].read()
        for _, writer in idle:
            writer.close()
        await server.close()
        return active, third, oldest + b"|" + others

    active, third, rest = asyncio.run(main())
    assert third.startswith(b"HTTP/1.1 200 OK")
    assert active <= 3
    oldest, others = rest.split(b"|", 1)
    assert oldest == b""  # the peer's oldest idle connection gave up its slot
    assert others.endswith(b"/other ")  # the other address kept its own


def test_a_head_over_the_size_bound_is_dropped() -> None:
    async def main() -> bytes:
        server = Server("127.0.0.1", 0, hello, Limits(header_bytes=1024))
        await server.start()
        answer = await get(server.bound_port, b"GET /x HTTP/1.1\r\nX: " + b"a" * 4096 + b"\r\n\r\n")
        await server.close()
        return answer

    assert asyncio.run(main()) == b""


@pytest.mark.parametrize(
    "head",
    [b"\xff\xfe\r\n\r\n", b"GET x HTTP/1.1\r\n\r\n", b"GET /x SPDY/3\r\n\r\n", b"GET /x HTTP/1.1\r\nbad\r\n\r\n"],
)
def test_what_is_not_http_is_a_bad_request(head: bytes) -> None:
    assert parse_head(head.removesuffix(b"\r\n\r\n")) is None

    async def main() -> bytes:
        server = Server("127.0.0.1", 0, hello, Limits())
        await server.start()
        answer = await get(server.bound_port, head)
        await server.close()
        return answer

    assert asyncio.run(main()).startswith(b"HTTP/1.1 400 ")


def test_only_get_is_served() -> None:
    async def main() -> bytes:
        server = Server("127.0.0.1", 0, hello, Limits())
        await server.start()
        answer = await get(server.bound_port, b"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        await server.close()
        return answer

    assert asyncio.run(main()).startswith(b"HTTP/1.1 405 ")


def test_tls_serves_a_tls_client_and_closes_on_plain_http() -> None:
    async def main() -> tuple[bytes, bytes]:
        server = Server("127.0.0.1", 0, hello, Limits(), server_context(""))
        await server.start()
        secure = await get(server.bound_port, tls=client_tls())
        plain = await get(server.bound_port)
        await server.close()
        return secure, plain

    secure, plain = asyncio.run(main())
    assert secure.startswith(b"HTTP/1.1 200 ")
    assert not plain.startswith(b"HTTP")


def test_a_silent_tls_client_holds_a_slot_only_until_a_client_that_asks_needs_it() -> None:
    """The connection is counted before its handshake: a client that never sends its hello holds a slot, and
    gives it up to a TLS client that asks; plain HTTP to the TLS port gets no answer."""

    async def main() -> tuple[int, bytes, bytes, bytes]:
        server = Server("127.0.0.1", 0, hello, Limits(connections=1, header_timeout=60.0), server_context(""))
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        while server.active < 1:
            await asyncio.sleep(0.01)
        held = server.active
        plain = await get(server.bound_port, tls=None)
        answered = await get(server.bound_port, tls=client_tls())
        silent = await reader.read()
        writer.close()
        await server.close()
        return held, plain, answered, silent

    held, plain, answered, silent = asyncio.run(main())
    assert held == 1
    assert plain == b""
    assert answered.startswith(b"HTTP/1.1 200 OK")
    assert silent == b""


@pytest.mark.parametrize(
    ("text", "bind"),
    [("0", None), ("", None), (":8443", ("", 8443)), ("127.0.0.1:8080", ("127.0.0.1", 8080)), ("[::1]:9", ("::1", 9))],
)
def test_bind_addresses(text: str, bind: tuple[str, int] | None) -> None:
    assert parse_bind(text) == bind


@pytest.mark.parametrize("text", ["8080", "example.com:80", "127.0.0.1:0", "127.0.0.1:99999", ":x"])
def test_bind_addresses_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"host:port|does not appear"):
        parse_bind(text)


def test_health_answers_standby_then_whether_the_operators_loop_turns() -> None:
    health = Health(standby=True)
    kopf_loop = asyncio.new_event_loop()
    handler = health_handler(health)

    async def ask(path: str = "/healthz") -> Response:
        return await handler(Request("GET", path, {}))

    assert asyncio.run(ask()).body == b"standby\n"
    assert asyncio.run(ask("/metrics")).status == 404
    health.standby, health.loop = False, kopf_loop
    assert asyncio.run(ask()).body == b"starting\n"
    thread = threading.Thread(target=kopf_loop.run_forever, daemon=True)
    thread.start()
    try:
        assert asyncio.run(ask("/readyz")) == Response(200, b"ok\n")
    finally:
        kopf_loop.call_soon_threadsafe(kopf_loop.stop)
        thread.join()
