"""Operator configuration: command-line flags, each defaulting to an environment variable."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from specinfer_operator.manager.serving import is_loopback, parse_bind
from specinfer_operator.render import flags
from specinfer_operator.render.children import RenderDefaults
from specinfer_operator.telemetry.targets import ScrapeConfig


@dataclass(frozen=True)
class Settings:
    render: RenderDefaults  # what the operator renders where a resource says nothing (render/flags.py)
    namespaces: tuple[str, ...]
    metrics_bind: tuple[str, int] | None
    health_port: int
    log_level: str
    log_format: str
    leader_election: bool
    leader_election_namespace: str
    leader_election_id: str
    scrape: ScrapeConfig
    leader_worker_set: bool = True
    tenant_policy: str = ""
    metrics_secure: bool = True
    metrics_cert_dir: str = ""


def _flag(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def parse(argv: Sequence[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(
        prog="specinfer-operator",
        description="Reconcile SpeculativeInference resources into vLLM-Ascend pods. Every flag also reads "
        "the environment variable named in its help.",
    )
    flags.add_arguments(p)
    p.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        help="watch only this namespace; repeat for several; all namespaces when unset "
        "(SPECINFER_NAMESPACES, comma-separated)",
    )
    p.add_argument(
        "--metrics-bind-address",
        default=flags.env("SPECINFER_METRICS_BIND_ADDRESS", ":8443"),
        metavar="HOST:PORT",
        help="where /metrics listens: :PORT for every address, 127.0.0.1:PORT for a sidecar, 0 for nowhere "
        "(SPECINFER_METRICS_BIND_ADDRESS)",
    )
    p.add_argument(
        "--metrics-secure",
        type=_flag,
        nargs="?",
        const=True,
        default=_flag(flags.env("SPECINFER_METRICS_SECURE", "true")),
        metavar="BOOL",
        help="serve /metrics over HTTPS to the bearers of tokens allowed to get the non-resource URL /metrics "
        "(a TokenReview, then a SubjectAccessReview); false serves plain HTTP to anyone, and is only accepted "
        "with a loopback --metrics-bind-address (SPECINFER_METRICS_SECURE)",
    )
    p.add_argument(
        "--metrics-cert-dir",
        default=flags.env("SPECINFER_METRICS_CERT_DIR", ""),
        metavar="DIR",
        help="directory of the metrics port's tls.crt and tls.key (a kubernetes.io/tls Secret); a self-signed "
        "certificate made at start when unset (SPECINFER_METRICS_CERT_DIR)",
    )
    p.add_argument(
        "--health-port",
        type=int,
        default=int(flags.env("SPECINFER_HEALTH_PORT", "8081")),
        help="port of /healthz and /readyz for the kubelet's probes, on every address (SPECINFER_HEALTH_PORT)",
    )
    p.add_argument(
        "--log-level",
        default=flags.env("SPECINFER_LOG_LEVEL", "info"),
        choices=("debug", "info", "warning", "error"),
        help="(SPECINFER_LOG_LEVEL)",
    )
    p.add_argument(
        "--log-format",
        default=flags.env("SPECINFER_LOG_FORMAT", "text"),
        choices=("text", "json"),
        help="json for log collectors (SPECINFER_LOG_FORMAT)",
    )
    p.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=flags.env("SPECINFER_LEADER_ELECTION", "false").lower() in ("1", "true", "yes"),
        help="hold a Lease so that only one of several replicas reconciles (SPECINFER_LEADER_ELECTION)",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=flags.env("SPECINFER_LEADER_ELECTION_NAMESPACE", flags.env("POD_NAMESPACE", "default")),
        help="namespace of the Lease (SPECINFER_LEADER_ELECTION_NAMESPACE, else POD_NAMESPACE)",
    )
    p.add_argument(
        "--leader-election-id",
        default=flags.env("SPECINFER_LEADER_ELECTION_ID", "specinfer-operator"),
        help="name of the Lease (SPECINFER_LEADER_ELECTION_ID)",
    )
    p.add_argument(
        "--leader-worker-set",
        action=argparse.BooleanOptionalAction,
        default=flags.env("SPECINFER_LEADER_WORKER_SET", "true").lower() in ("1", "true", "yes"),
        help="run engines over several nodes (spec.parallelism.nodes) as LeaderWorkerSets; without it, such specs "
        "are refused with what to install (SPECINFER_LEADER_WORKER_SET)",
    )
    p.add_argument(
        "--tenant-policy",
        default=flags.env("SPECINFER_TENANT_POLICY", ""),
        help="name of the SpeculativeInferencePolicy to enforce (the chart sets it); its built-in defaults when unset "
        "or missing (SPECINFER_TENANT_POLICY)",
    )
    default = ScrapeConfig()
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=float(flags.env("SPECINFER_SCRAPE_INTERVAL", str(default.interval))),
        help="seconds between scrapes of each engine pod's /metrics for acceptance, unless a resource sets "
        "spec.telemetry.intervalSeconds; 0 turns the scraping off (SPECINFER_SCRAPE_INTERVAL)",
    )
    p.add_argument(
        "--scrape-timeout",
        type=float,
        default=float(flags.env("SPECINFER_SCRAPE_TIMEOUT", str(default.timeout))),
        help="seconds one pod's /metrics may take, connect to last byte (SPECINFER_SCRAPE_TIMEOUT)",
    )
    p.add_argument(
        "--scrape-concurrency",
        type=int,
        default=int(flags.env("SPECINFER_SCRAPE_CONCURRENCY", str(default.concurrency))),
        help="pods scraped at once (SPECINFER_SCRAPE_CONCURRENCY)",
    )
    p.add_argument(
        "--status-refresh",
        type=float,
        default=float(flags.env("SPECINFER_STATUS_REFRESH", str(default.refresh))),
        help="seconds a steady acceptance figure goes without a status write; figures that move beyond their "
        "tolerance are written at once (SPECINFER_STATUS_REFRESH)",
    )
    args = p.parse_args(argv)
    if args.scrape_interval < 0 or args.scrape_timeout <= 0 or args.scrape_concurrency < 1 or args.status_refresh <= 0:
        p.error("--scrape-interval must be >= 0, --scrape-timeout and --status-refresh > 0, --scrape-concurrency >= 1")
    try:
        metrics_bind = parse_bind(args.metrics_bind_address)
    except ValueError as error:
        p.error(f"--metrics-bind-address: {error}")
    if metrics_bind and not args.metrics_secure and not is_loopback(metrics_bind[0]):
        p.error(
            f"--metrics-secure=false serves /metrics to anyone who connects: bind it to loopback (127.0.0.1:PORT), "
            f"not {args.metrics_bind_address!r}"
        )
    try:
        render = flags.render_defaults(args)
    except ValueError as error:
        p.error(str(error))
    namespaces = args.namespaces or [n for n in flags.env("SPECINFER_NAMESPACES", "").split(",") if n]
    return Settings(
        render=render,
        namespaces=tuple(namespaces),
        metrics_bind=metrics_bind,
        health_port=args.health_port,
        log_level=args.log_level,
        log_format=args.log_format,
        leader_election=args.leader_election,
        leader_election_namespace=args.leader_election_namespace,
        leader_election_id=args.leader_election_id,
        scrape=ScrapeConfig(args.scrape_interval, args.scrape_timeout, args.scrape_concurrency, args.status_refresh),
        leader_worker_set=args.leader_worker_set,
        tenant_policy=args.tenant_policy,
        metrics_secure=args.metrics_secure,
        metrics_cert_dir=args.metrics_cert_dir,
    )
