"""`specinfer-operator`: run the kopf operator with its settings, metrics, health and leader election."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import kopf
from kubernetes import client, config

from specinfer_operator.api.timestamps import utc_now
from specinfer_operator.controller.context import Context, EventSink
from specinfer_operator.controller.refresh import REFRESH_THREADS, Refreshes
from specinfer_operator.manager import handlers  # registers the handlers
from specinfer_operator.manager.endpoints import Endpoints, Health, health_handler, metrics_handler
from specinfer_operator.manager.metricsauth import Decisions, kube_review
from specinfer_operator.manager.podwatch import PodWatches
from specinfer_operator.manager.serving import Limits, Server
from specinfer_operator.manager.settings import Settings, parse
from specinfer_operator.manager.tls import server_context
from specinfer_operator.platform.kube import Kube
from specinfer_operator.platform.leader import Elector
from specinfer_operator.telemetry.loop import Telemetry

log = logging.getLogger("specinfer_operator")
API_THREADS = 4 + REFRESH_THREADS  # beyond kopf's workers: telemetry, the lease, refreshes, the metrics reviews
# What the ports' clients may hold (docs/security.md): the kubelet probes from the node's address, one or two at once.
METRICS_LIMITS = Limits(connections=32, per_peer=8, header_timeout=5.0)
HEALTH_LIMITS = Limits(connections=32, per_peer=4, header_timeout=2.0)


def event_poster(kube: Kube, now: Callable[[], str]) -> EventSink:
    """Events through kopf (which batches them) from its handlers; posted directly from threads kopf did
    not start (a refresh the telemetry loop asked for), where kopf has no context to post with."""

    def post(body: dict[str, Any], type: str, reason: str, message: str) -> None:
        try:
            kopf.event(kopf.Body(cast(kopf.RawBody, body)), type=type, reason=reason, message=message[:1024])
        except LookupError:
            kube.event(body, type, reason, message, now())

    return post


def endpoints(settings: Settings, api: client.ApiClient, health: Health) -> Endpoints:
    """The health port, and the metrics port when bound: HTTPS for the tokens the API server allows, or plain
    HTTP (settings refuses that off loopback)."""
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="endpoints")
    servers = [Server("", settings.health_port, health_handler(health), HEALTH_LIMITS)]
    if settings.metrics_bind is not None:
        host, port = settings.metrics_bind
        decisions = Decisions(kube_review(api)) if settings.metrics_secure else None
        tls = server_context(settings.metrics_cert_dir) if settings.metrics_secure else None
        servers.append(Server(host, port, metrics_handler(decisions, pool), METRICS_LIMITS, tls))
    return Endpoints(servers, pool)


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
    kube = Kube(api_client(handlers.WORKERS + API_THREADS + max(1, len(settings.namespaces))))  # + pod watches
    health = Health(standby=settings.leader_election)
    endpoints(settings, kube.api, health).start()
    lost = threading.Event()
    if settings.leader_election:
        identity = f"{socket.gethostname()}_{os.getpid()}"
        elector = Elector(kube, settings.leader_election_namespace, settings.leader_election_id, identity)
        elector.acquire()
        health.standby = False

        def step_down() -> None:
            # SIGTERM takes kopf's graceful path; a threading.Event stop_flag would hang its shutdown.
            lost.set()
            os.kill(os.getpid(), signal.SIGTERM)

        elector.keep(lost=step_down)
    ctx = Context(
        kube,
        settings.render,
        event_poster(kube, utc_now),
        groups_enabled=settings.leader_worker_set,
        policy_name=settings.tenant_policy,
    )
    refreshes = Refreshes(ctx)
    telemetry = Telemetry(kube, ctx.lock, settings.scrape, ctx.now, ctx.ownership, refreshes)
    pods = PodWatches(kube, settings.namespaces, telemetry.pod_event, refreshes.schedule)
    health.loop = asyncio.new_event_loop()
    kopf.run(
        loop=health.loop,
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        memo=kopf.Memo(ctx=ctx, telemetry=telemetry, refreshes=refreshes, pods=pods),
    )
    if lost.is_set():
        raise SystemExit("lost leadership")


def main(argv: Sequence[str] | None = None) -> None:
    run(parse(argv))
