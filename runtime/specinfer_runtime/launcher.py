"""`specinfer-runtime`: the engine container's entry point.

It reads the engine config the operator rendered, validates it with the same models, checks what only
the pod can see, then `exec`s the exact `vllm serve` command line. A failure is one line in the
termination log, which Kubernetes shows in the pod status and the operator in the resource's status,
instead of a stack trace minutes into model loading.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specinfer_runtime import compat, fetch, multinode, preflight, samples
from specinfer_runtime.advisories import advise
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.engine import LISTEN_ADDRESS_ENV, EngineSpec
from specinfer_runtime.redaction import redact, token_problem
from specinfer_runtime.sources import DRAFT_TOKEN_ENV, HF_TOKEN_ENV, MODEL_ROOT
from specinfer_runtime.validation import validate

log = logging.getLogger("specinfer_runtime")

MIN_SHARED_MEMORY = 1 << 30


class PreflightError(Exception):
    """A reason the engine cannot start, in one line."""


@dataclass(frozen=True)
class Environment:
    """What the pod offers, gathered once so that the checks stay pure."""

    env: Mapping[str, str]
    devices: list[str] = field(default_factory=list)
    shared_memory: int | None = None
    find_module: Callable[[str], object | None] = lambda name: None
    versions: Mapping[str, str] = field(default_factory=dict)
    interface: str | None = None  # the network interface holding the pod's IP


@dataclass(frozen=True)
class Launch:
    """What to exec: the command line, and the variables to add to the environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def visible_npus(environment: Environment) -> int | None:
    """NPUs this container may use: the runtime's visibility variables, else the device nodes."""
    for name in ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES"):
        value = environment.env.get(name, "").strip()
        if value:
            return len([d for d in value.split(",") if d.strip()])
    return len(environment.devices) if environment.devices else None


def check(spec: EngineSpec, environment: Environment, read_config: Callable[[str], dict[str, object]]) -> list[str]:
    """Every reason this pod cannot run `spec` (empty when it can)."""
    problems = []
    need = spec.parallelism.npus_per_node()
    seen = visible_npus(environment)
    if environment.env.get("SPECINFER_SKIP_NPU_CHECK") != "1" and (seen is None or seen < need):
        per = f" / nodes {spec.parallelism.group_size()}" if spec.parallelism.group_size() > 1 else ""
        problems.append(
            f"{seen or 0} NPUs visible, tensor x pipeline x data{per} needs {need}: check the pod's "
            "NPU resource request and the Ascend device plugin"
        )
    if environment.env.get(compat.SKIP) != "1":
        problems += compat.unsupported(spec, environment.versions)
    missing = preflight.arctic_inference(spec, environment.find_module)
    if missing:
        problems.append(missing)
    configs = {}
    for role, ref in (("target", spec.model), ("draft", spec.speculative.draft_model)):
        path = ref.load_path(role) if ref else None
        if path and path.startswith(f"{MODEL_ROOT}/"):
            configs[role] = read_config(path)
            if not configs[role]:
                problems.append(f"no config.json in {path}: the {role} model volume does not hold a checkpoint")
    if "target" in configs and "draft" in configs:
        mismatch = preflight.shared_vocabulary(spec, configs["target"], configs["draft"])
        if mismatch:
            problems.append(mismatch)
    shm = environment.shared_memory
    if shm is not None and shm < MIN_SHARED_MEMORY:
        problems.append(
            f"/dev/shm has {shm >> 20} MiB, vLLM needs at least {MIN_SHARED_MEMORY >> 20} MiB: "
            "raise spec.resources.sharedMemory"
        )
    return problems


def load(path: str) -> EngineSpec:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise PreflightError(f"cannot read the engine config {path}: {error}") from error
    report = validate(EngineSpec, data)
    if report.value is None:
        raise PreflightError("invalid engine config: " + "; ".join(str(p) for p in report.errors))
    for warning in advise(report.value, prefix=""):
        log.warning("%s", warning)
    return report.value


def gather() -> Environment:
    try:
        stat = os.statvfs("/dev/shm")
        shm: int | None = stat.f_frsize * stat.f_blocks
    except OSError:
        shm = None
    return Environment(
        env=dict(os.environ),
        devices=sorted(glob.glob("/dev/davinci[0-9]*")),
        shared_memory=shm,
        find_module=importlib.util.find_spec,
        versions=compat.installed(),
        interface=multinode.interface_of(os.environ.get(multinode.POD_IP_ENV, "").strip()),
    )


def prepare(config: str, argv: Sequence[str], environment: Environment | None) -> Launch:
    """What to exec, or PreflightError with the reason; without an environment (a dry run outside the
    pod) only the config and the command are checked."""
    spec = load(config)
    rendered = vllm_argv(spec)
    command = list(argv) or rendered
    if command != rendered:
        raise PreflightError(
            "the container's arguments differ from the engine config (operator and runtime versions "
            "out of step?): run the image matching the operator"
        )
    if environment is None:
        return Launch(command)
    try:
        rank = multinode.flags(spec, environment.env)
    except multinode.GroupError as error:
        raise PreflightError(str(error)) from error
    # vLLM sends HF_TOKEN as it is: one it cannot send would be quoted in an error, and its log lines can
    # become the termination message. Checked here without quoting it, and given to vLLM stripped.
    tokens = {}
    if HF_TOKEN_ENV in environment.env:
        problem = token_problem(HF_TOKEN_ENV, environment.env[HF_TOKEN_ENV])
        if problem:
            raise PreflightError(f"{problem}: the Secret key in spec.model.source.huggingFace.tokenSecretRef")
        tokens[HF_TOKEN_ENV] = environment.env[HF_TOKEN_ENV].strip()
    failed = fetch.fetch_draft(spec, environment.env)
    if failed:
        raise PreflightError(failed)
    problems = check(spec, environment, preflight.read_model_config)
    if problems:
        raise PreflightError("preflight failed: " + "; ".join(problems))
    # The recorder of spec.learning runs inside vLLM's API server, when the operator set its directory.
    recorder = samples.middleware_flags(environment.env)
    command = listening(command, environment.env.get(LISTEN_ADDRESS_ENV, "").strip()) + rank + recorder
    return Launch(command, {**multinode.environment(spec, environment.env, environment.interface), **tokens})


def listening(command: list[str], address: str) -> list[str]:
    """The command with `--host` set to `address` (unchanged when it is empty)."""
    if not address or "--host" not in command:
        return command
    at = command.index("--host") + 1
    return [*command[:at], address, *command[at + 1 :]]


def main(args: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="specinfer-runtime",
        description="Validate the engine config, run preflight checks, then exec vllm serve. "
        "Usage in the pod: specinfer-runtime --config FILE -- vllm serve ...",
    )
    parser.add_argument("--config", required=True, help="engine config JSON (the operator's ConfigMap)")
    parser.add_argument(
        "--termination-log",
        default=os.environ.get("SPECINFER_TERMINATION_LOG", "/dev/termination-log"),
        help="where a failure reason goes (SPECINFER_TERMINATION_LOG)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- vllm serve ... (rendered when omitted)")
    ns = parser.parse_args(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s specinfer-runtime %(levelname)s %(message)s")
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    try:
        final = prepare(ns.config, command, None if ns.dry_run else gather())
    except PreflightError as error:
        reason = redact(
            str(error), [os.environ.get(n, "") for n in (HF_TOKEN_ENV, DRAFT_TOKEN_ENV) if os.environ.get(n)]
        )
        log.error("%s", reason)
        with contextlib.suppress(OSError):  # outside Kubernetes there may be no termination log
            Path(ns.termination_log).write_text(reason + "\n")
        sys.exit(1)
    shown = {k: v for k, v in final.env.items() if k != HF_TOKEN_ENV}
    log.info("exec %s%s", json.dumps(final.argv), f" with {json.dumps(shown)}" if shown else "")
    if ns.dry_run:
        print(" ".join(final.argv))
        return
    os.execvpe(final.argv[0], final.argv, {**os.environ, **final.env})
