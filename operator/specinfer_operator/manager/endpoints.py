"""The operator's /metrics and probe ports: both servers on one event loop in one thread of their own.

What blocks (a token's review, rendering the metrics) runs on two worker threads, so the threads the ports cost
do not grow with what connects; kopf's loop is only asked to turn once per probe.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from specinfer_operator.manager.metricsauth import Decisions, bearer
from specinfer_operator.manager.serving import Handler, Request, Response, Server

PROBE_TIMEOUT = 5.0  # seconds kopf's loop may take to run a no-op before /healthz fails


@dataclass
class Health:
    """What /healthz and /readyz answer: standby while the Lease is another's, then whether kopf's loop turns."""

    standby: bool = False
    loop: asyncio.AbstractEventLoop | None = None

    async def probe(self) -> Response:
        if self.standby:
            return Response(200, b"standby\n")
        if self.loop is None or not self.loop.is_running():
            return Response(200, b"starting\n")
        turned = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(turned), PROBE_TIMEOUT)
        except TimeoutError:
            return Response(503, b"the operator's event loop does not turn\n")
        return Response(200, b"ok\n")


def health_handler(health: Health) -> Handler:
    async def handle(request: Request) -> Response:
        if request.path not in ("/healthz", "/readyz"):
            return Response(404, b"not found\n")
        return await health.probe()

    return handle


def metrics_handler(decisions: Decisions | None, pool: Executor) -> Handler:
    """/metrics for whoever the API server lets `get` it (`decisions`), or for anyone (plain HTTP on loopback)."""

    async def handle(request: Request) -> Response:
        if request.path != "/metrics":
            return Response(404, b"not found\n")
        loop = asyncio.get_running_loop()
        if decisions is not None:
            token = bearer(request.headers.get("authorization", ""))
            status = await loop.run_in_executor(pool, decisions.status, token) if token else 401
            if status == 401:
                return Response(401, b"unauthorized\n", headers=(("WWW-Authenticate", 'Bearer realm="metrics"'),))
            if status != 200:
                return Response(status, b"forbidden\n" if status == 403 else b"the review failed\n")
        body = await loop.run_in_executor(pool, generate_latest, REGISTRY)
        return Response(200, body, CONTENT_TYPE_LATEST)

    return handle


class Endpoints:
    """Starts the servers in their thread and returns once they listen (or raises what binding raised)."""

    def __init__(self, servers: list[Server], pool: ThreadPoolExecutor) -> None:
        self.servers, self.pool = servers, pool
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="endpoints", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        self.thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            for server in self.servers:
                self.loop.run_until_complete(server.start())
        except OSError as error:
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        for server in self.servers:
            asyncio.run_coroutine_threadsafe(server.close(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.pool.shutdown(wait=False)
