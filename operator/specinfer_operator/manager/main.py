"""`specinfer-operator`: run the kopf operator with its settings, metrics, health and leader election."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import kopf
from kubernetes import client, config
from prometheus_client import start_http_server

from specinfer_operator.api.timestamps import utc_now
from specinfer_operator.controller.context import Context, EventSink
from specinfer_operator.controller.refresh import REFRESH_THREADS, Refreshes
from specinfer_operator.manager import handlers  # registers the handlers
from specinfer_operator.manager.settings import Settings, parse
from specinfer_operator.platform.kube import Kube
from specinfer_operator.platform.leader import Elector
from specinfer_operator.render.children import RenderDefaults
from specinfer_operator.telemetry.loop import Telemetry

log = logging.getLogger("specinfer_operator")
API_THREADS = 2 + REFRESH_THREADS  # beyond kopf's workers: the telemetry loop, the leader's lease, refreshes


def event_poster(kube: Kube, now: Callable[[], str]) -> EventSink:
    """Events through kopf (which batches them) from its handlers; posted directly from threads kopf did
    not start (a refresh the telemetry loop asked for), where kopf has no context to post with."""

    def post(body: dict[str, Any], type: str, reason: str, message: str) -> None:
        try:
            kopf.event(kopf.Body(cast(kopf.RawBody, body)), type=type, reason=reason, message=message[:1024])
        except LookupError:
            kube.event(body, type, reason, message, now())

    return post


@contextmanager
def standby_health(port: int) -> Iterator[None]:
    """Answer liveness probes while waiting for the Lease; kopf's endpoint takes the port afterwards."""

    class Standby(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"standby\n")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Standby)
    threading.Thread(target=server.serve_forever, name="standby-health", daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def api_client(connections: int) -> client.ApiClient:
    """A client whose connection pool covers every thread that calls the API: a smaller pool (urllib3's
    default is 5 per core) discards connections under load and pays a TLS handshake for each new one."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


def run(settings: Settings) -> None:
    kopf.configure(
        debug=settings.log_level == "debug",
        verbose=settings.log_level in ("debug", "info"),
        quiet=settings.log_level == "error",
        log_format=kopf.LogFormat.JSON if settings.log_format == "json" else kopf.LogFormat.FULL,
    )
    logging.getLogger().setLevel(settings.log_level.upper())
    kube = Kube(api_client(handlers.WORKERS + API_THREADS))
    if settings.metrics_port:
        start_http_server(settings.metrics_port)
    lost = threading.Event()
    if settings.leader_election:
        identity = f"{socket.gethostname()}_{os.getpid()}"
        elector = Elector(kube, settings.leader_election_namespace, settings.leader_election_id, identity)
        with standby_health(settings.health_port):
            elector.acquire()

        def step_down() -> None:
            # SIGTERM takes kopf's graceful path; a threading.Event stop_flag would hang its shutdown.
            lost.set()
            os.kill(os.getpid(), signal.SIGTERM)

        elector.keep(lost=step_down)
    defaults = RenderDefaults(
        settings.runtime_image, settings.npu_resource_name, settings.keda_prometheus, settings.trainer_image
    )
    ctx = Context(
        kube,
        defaults,
        event_poster(kube, utc_now),
        groups_enabled=settings.leader_worker_set,
        policy_name=settings.tenant_policy,
    )
    refreshes = Refreshes(ctx)
    telemetry = Telemetry(kube, ctx.lock, settings.scrape, ctx.now, ctx.ownership, refreshes)
    kopf.run(
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
        memo=kopf.Memo(ctx=ctx, telemetry=telemetry, refreshes=refreshes),
    )
    if lost.is_set():
        raise SystemExit("lost leadership")


def main(argv: Sequence[str] | None = None) -> None:
    run(parse(argv))
