"""RenderDefaults as command-line flags, each defaulting to an environment variable as the chart sets them.

The operator takes them (manager/settings.py) and so does `specinfer render`, so that the CLI renders what an
operator started with the same flags would: the default images and their pull policies, the engine pods'
tolerations and nodeSelector, the pull Secrets, the NPU resource, KEDA's Prometheus.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any, get_args

from pydantic import TypeAdapter, ValidationError

from specinfer_operator.api.container import PullPolicy
from specinfer_operator.api.placement import LabelMap, Toleration
from specinfer_operator.render.children import (
    DEFAULT_NPU_RESOURCE,
    DEFAULT_RUNTIME_IMAGE,
    DEFAULT_TRAINER_IMAGE,
    RenderDefaults,
)
from specinfer_runtime.names import DNS_SUBDOMAIN


def env(name: str, default: str) -> str:
    """A flag's default: its environment variable, else `default`."""
    return os.environ.get(name, default)


def _pull_secrets(text: str) -> tuple[str, ...]:
    """--image-pull-secrets: comma-separated Secret names, each once, in order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if len(n) > 253 or not re.fullmatch(DNS_SUBDOMAIN, n)]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, bad))}: not a Secret name (a DNS subdomain of at most 253 characters: lower case "
            "letters, digits, '-' and '.'); give names separated by commas, e.g. regcred,mirror-credentials"
        )
    return tuple(dict.fromkeys(names))


def _json(flag: str, text: str, shape: TypeAdapter[Any]) -> Any:
    """A flag's JSON value checked against its model, or an error naming the flag, the path and the fix."""
    try:
        return shape.validate_python(json.loads(text))
    except json.JSONDecodeError as error:
        raise ValueError(f"{flag} {text!r} is not JSON: {error}") from None
    except ValidationError as error:
        where = "; ".join(f"[{']['.join(map(str, e['loc']))}]: {e['msg']}" for e in error.errors())
        raise ValueError(f"{flag} {text!r}: {where}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of RenderDefaults, on `p`."""
    p.add_argument(
        "--runtime-image",
        default=env("SPECINFER_RUNTIME_IMAGE", DEFAULT_RUNTIME_IMAGE),
        help="image for resources that set no spec.runtime.image (SPECINFER_RUNTIME_IMAGE)",
    )
    p.add_argument(
        "--trainer-image",
        default=env("SPECINFER_TRAINER_IMAGE", DEFAULT_TRAINER_IMAGE),
        help="image of spec.learning's training Jobs for resources that set no spec.learning.training.image "
        "(SPECINFER_TRAINER_IMAGE)",
    )
    for kind, what in (("runtime", "engines'"), ("trainer", "training Jobs'")):
        p.add_argument(
            f"--{kind}-pull-policy",
            default=env(f"SPECINFER_{kind.upper()}_PULL_POLICY", "IfNotPresent"),
            choices=get_args(PullPolicy),
            help=f"imagePullPolicy of the {what} default image (--{kind}-image); an image a resource names is "
            f"pulled by its spec.runtime.imagePullPolicy (SPECINFER_{kind.upper()}_PULL_POLICY)",
        )
    p.add_argument(
        "--engine-tolerations",
        default=env("SPECINFER_ENGINE_TOLERATIONS", "[]"),
        metavar="JSON",
        help="tolerations (a JSON list of core/v1 Tolerations) of the engine pods and training Jobs of resources "
        "that set no spec.placement.tolerations, e.g. the NPU nodes' taint (SPECINFER_ENGINE_TOLERATIONS)",
    )
    p.add_argument(
        "--engine-node-selector",
        default=env("SPECINFER_ENGINE_NODE_SELECTOR", "{}"),
        metavar="JSON",
        help="nodeSelector (a JSON object of node labels) of the engine pods and training Jobs of resources that set "
        "no spec.placement.nodeSelector (SPECINFER_ENGINE_NODE_SELECTOR)",
    )
    p.add_argument(
        "--image-pull-secrets",
        type=_pull_secrets,
        default=env("SPECINFER_IMAGE_PULL_SECRETS", ""),
        metavar="NAMES",
        help="Secrets (comma-separated names) every engine pod and training Job pulls its images with, after the "
        "resource's own spec.runtime.imagePullSecrets: the credentials of the registry of --runtime-image and "
        "--trainer-image. Each must exist in the resource's namespace (SPECINFER_IMAGE_PULL_SECRETS)",
    )
    p.add_argument(
        "--npu-resource-name",
        default=env("SPECINFER_NPU_RESOURCE_NAME", DEFAULT_NPU_RESOURCE),
        help="extended resource for resources that set no spec.resources.npuResourceName (SPECINFER_NPU_RESOURCE_NAME)",
    )
    p.add_argument(
        "--keda-prometheus",
        default=env("SPECINFER_KEDA_PROMETHEUS", ""),
        metavar="URL",
        help="render spec.autoscaling as KEDA ScaledObjects whose Prometheus triggers query this server "
        "(http://prometheus.monitoring:9090) instead of HorizontalPodAutoscalers on the custom metrics API "
        "(SPECINFER_KEDA_PROMETHEUS)",
    )


def render_defaults(args: argparse.Namespace) -> RenderDefaults:
    """What add_arguments' flags say; ValueError naming the flag, its value and the fix when one is wrong."""
    if args.keda_prometheus and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", args.keda_prometheus):
        raise ValueError(f"--keda-prometheus {args.keda_prometheus!r} is not an http:// or https:// URL")
    return RenderDefaults(
        args.runtime_image,
        args.npu_resource_name,
        args.keda_prometheus,
        args.trainer_image,
        runtime_pull_policy=args.runtime_pull_policy,
        trainer_pull_policy=args.trainer_pull_policy,
        tolerations=tuple(_json("--engine-tolerations", args.engine_tolerations, TypeAdapter(list[Toleration]))),
        node_selector=_json("--engine-node-selector", args.engine_node_selector, TypeAdapter(LabelMap)),
        image_pull_secrets=args.image_pull_secrets,
    )
