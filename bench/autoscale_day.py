"""A day of load against spec.autoscaling's rules and Auto's K, from measured engine profiles (a simulation).

On two cores, engines started beside each other share the same CPU: a second engine adds no capacity here, so what
autoscaling buys cannot be measured on this machine by running engines. This benchmark replays a day's load (quiet,
ramp, peak, ramp down, quiet) minute by minute against the step times and acceptance the load sweep measured on a
real engine (bench/load_sweep.py --save-metrics; the raw /metrics it uses are kept in bench/captures/load-sweep/),
with the HorizontalPodAutoscaler's algorithm as kube-controller-manager runs it: every 15 s, desired = ceil(ready
engines x figure / target) outside the 10 % tolerance, scale-up at once (the spec's default, at most doubling or 4
engines per period), scale-down to the highest count the scale-down window asked for, a new engine serving only
after it loaded its model. The figure is the speed objective's: milliseconds of decode per token over the adapter's
2-minute rate window, against the target rendered from the objective (render/autoscaler.py).

Requests are spread evenly over the engines that serve (a gateway's round robin), so an engine's batch is the
load's concurrency over them; a request then decodes at tokens per step / step time at that batch, for the
K in force. Auto's K follows the batch (a schedule: the K that measured fastest at each batch); the static
provisioning runs the best single static K of the day. It reports, for each, the share of minutes in which
requests got the objective and the engine-minutes spent, against static provisioning for the peak and for
the mean load.

Run `python -m bench.autoscale_day` (seconds; `--captures DIR` another sweep's metrics, `--objective` in
decode tokens per second, default the best static K's speed at batch OBJECTIVE_BATCH).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.decode_rate import step_at
from specinfer_operator.measure.scrape import read
from specinfer_operator.measure.window import Counts
from specinfer_operator.render.autoscaler import TOLERANCE
from specinfer_operator.tuning.model import Profile

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "bench" / "captures" / "load-sweep" / "deep-target"
SYNC = 15  # seconds between the autoscaler's decisions (--horizontal-pod-autoscaler-sync-period)
RATE_WINDOW = 120  # seconds the adapter's rules read counters over
STARTUP = 180  # seconds from an engine's creation to its first request: scheduling, image, model load
SCALE_DOWN_WINDOW = 600  # spec.autoscaling.scaleDownStabilizationSeconds, as the example sets it
QUIET, PEAK = 4, 96  # concurrent requests at night and at the peak
OBJECTIVE_BATCH = 8  # the default objective: what the best static K gives a request at this batch
MET, SPEND = 0.95, 0.60  # targets: objective met in this share of minutes, at most this share of peak's engines
FILE = re.compile(r"(k\d+|off)-(\d+)-c(\d+)\.txt")


@dataclass(frozen=True)
class Engine:
    """One K as the sweep measured it: the step time at each batch it served, and its tokens per step."""

    k: int
    points: tuple[tuple[float, float], ...]  # (requests per step, seconds per step)
    tokens_per_step: float

    def speed(self, batch: float) -> float:
        """Decode tokens per second a request gets when the engine serves `batch` requests per step."""
        return self.tokens_per_step / step_at(self.points, max(batch, 1.0))


def engines(folder: Path) -> dict[int, Engine]:
    """Each K's engine from the sweep's captures: an engine served every load in turn and its /metrics after
    each hold its counters since it started, so a load's profile is the difference from the load before."""
    runs: dict[tuple[int, int], dict[int, Counts]] = {}
    for path in folder.iterdir():
        match = FILE.fullmatch(path.name)
        if match is None:
            continue
        k = 0 if match[1] == "off" else int(match[1][1:])
        runs.setdefault((k, int(match[2])), {})[int(match[3])] = read(path.read_bytes())[0]
    profiles: dict[int, list[Profile]] = {}
    for (k, _), loads in sorted(runs.items()):
        before = Counts()
        for concurrency in sorted(loads):
            counts = loads[concurrency].since(before)
            before = loads[concurrency]
            profile = Profile.of(counts, k) if counts is not None else None
            if profile is not None:
                profiles.setdefault(k, []).append(profile)
    if not profiles:
        raise SystemExit(f"no load-sweep captures in {folder}: run python -m bench.load_sweep --save-metrics")
    return {
        k: Engine(
            k,
            tuple(sorted((p.batch, p.step_seconds) for p in found)),
            sum(p.tokens_per_step * p.steps for p in found) / sum(p.steps for p in found),
        )
        for k, found in profiles.items()
    }


def day(quiet: int = QUIET, peak: int = PEAK) -> list[float]:
    """Concurrent requests in each minute: quiet until 7:00, a ramp to the peak by 9:00, the peak until 17:00,
    a ramp down by 19:00, quiet again."""

    def at(minute: int) -> float:
        hour = minute / 60
        if hour < 7 or hour >= 19:
            return quiet
        if hour < 9:
            return quiet + (peak - quiet) * (hour - 7) / 2
        if hour < 17:
            return peak
        return peak - (peak - quiet) * (hour - 17) / 2

    return [at(m) for m in range(24 * 60)]


Policy = Callable[[float], float]  # a request's decode speed at this many requests per engine


@dataclass(frozen=True)
class Outcome:
    met: float  # share of minutes in which requests got the objective
    engines: tuple[int, ...]  # engines (serving or starting) at the start of each minute

    @property
    def engine_minutes(self) -> int:
        return sum(self.engines)


def static(load: Sequence[float], speed: Policy, engines: int, objective: float) -> Outcome:
    met = [speed(c / engines) >= objective for c in load]
    return Outcome(sum(met) / len(met), (engines,) * len(load))


def needed(concurrency: float, speed: Policy, objective: float, most: int = 1000) -> int:
    """The fewest engines at which a request gets the objective at this concurrency."""
    return next((n for n in range(1, most + 1) if speed(concurrency / n) >= objective), most)


def autoscaled(load: Sequence[float], speed: Policy, objective: float, least: int, most: int) -> Outcome:
    """The HorizontalPodAutoscaler over the day, one decision every SYNC seconds."""
    target = 1000 / (objective * (1 + TOLERANCE))  # ms per token, as render/autoscaler.py writes it
    ready, starting = least, deque[float]()  # engines serving; when each one being started serves
    figures = deque[float](maxlen=RATE_WINDOW // SYNC)  # the figure at each decision, for the rate window
    asked = deque[tuple[float, int]]()  # (time, desired) within the scale-down window
    met, engines = 0.0, list[int]()
    for second in range(0, len(load) * 60, SYNC):
        while starting and starting[0] <= second:
            starting.popleft()
            ready += 1
        concurrency = load[second // 60]
        figures.append(1000 / speed(concurrency / ready))
        ratio = (sum(figures) / len(figures)) / target
        count = ready + len(starting)
        desired = count if abs(ratio - 1) <= TOLERANCE else max(least, min(most, math.ceil(ready * ratio)))
        desired = min(desired, max(2 * count, count + 4))  # the default scale-up policy: 100 % or 4 per period
        asked.append((second, desired))
        while asked[0][0] <= second - SCALE_DOWN_WINDOW:
            asked.popleft()
        if desired > count:
            starting.extend([second + STARTUP] * (desired - count))
        else:
            drop = count - max(d for _, d in asked)  # the highest count the window asked for stays
            while drop > 0 and starting:
                starting.pop()
                drop -= 1
            ready -= max(0, drop)
        if second % 60 == 0:
            engines.append(ready + len(starting))
        met += (speed(concurrency / ready) >= objective) * SYNC / 60
    return Outcome(met / len(load), tuple(engines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=Path, default=CAPTURES, help="a load sweep's --save-metrics folder")
    parser.add_argument("--objective", type=float, help="decode tokens per second a request should get")
    args = parser.parse_args()
    measured = engines(args.captures)
    load = day()
    mean = sum(load) / len(load)
    speculating = {k: e for k, e in measured.items() if k}
    best_static = max(speculating.values(), key=lambda e: sum(e.speed(c) for c in (1, 4, 16, 32)))

    def auto(batch: float) -> float:  # the K that is fastest at this batch, as Auto's schedule serves it
        return max(e.speed(batch) for e in speculating.values())

    objective = args.objective or best_static.speed(OBJECTIVE_BATCH)
    print(f"profiles: {args.captures.relative_to(ROOT) if args.captures.is_relative_to(ROOT) else args.captures}")
    print("K     " + "  ".join(f"b={b:<5}" for b in (1, 4, 8, 16, 32)) + "  (decode tokens/s a request gets)")
    for k, engine in sorted(measured.items()):
        print(f"{'off' if k == 0 else f'K={k}':<5} " + "  ".join(f"{engine.speed(b):7.1f}" for b in (1, 4, 8, 16, 32)))
    print(
        f"day: {QUIET} concurrent requests at night, {PEAK} at the peak (9:00-17:00), mean {mean:.1f}; objective "
        f"{objective:.1f} tokens/s; an engine serves {STARTUP} s after it is added; scale-down window "
        f"{SCALE_DOWN_WINDOW} s"
    )
    static_k = f"K={best_static.k}"
    peak_engines = needed(PEAK, best_static.speed, objective)
    mean_engines = needed(mean, best_static.speed, objective)
    rows = {
        f"static for the peak ({peak_engines} engines, {static_k})": static(
            load, best_static.speed, peak_engines, objective
        ),
        f"static for the mean ({mean_engines} engines, {static_k})": static(
            load, best_static.speed, mean_engines, objective
        ),
        f"autoscaled, {static_k}": autoscaled(load, best_static.speed, objective, 1, 2 * peak_engines),
        "autoscaled, Auto (K follows the batch)": autoscaled(load, auto, objective, 1, 2 * peak_engines),
    }
    peak_spent = rows[next(iter(rows))].engine_minutes
    print(f"{'':45} {'minutes met':>12} {'engine-minutes':>15} {'of the peak':>12}")
    for name, outcome in rows.items():
        print(
            f"{name:45} {100 * outcome.met:11.1f}% {outcome.engine_minutes:15.0f} "
            f"{100 * outcome.engine_minutes / peak_spent:11.1f}%"
        )
    best = rows["autoscaled, Auto (K follows the batch)"]
    verdict = best.met >= MET and best.engine_minutes <= SPEND * peak_spent
    print(
        f"autoscaled with Auto: {100 * best.met:.1f} % of minutes met (target >= {100 * MET:.0f} %) with "
        f"{100 * best.engine_minutes / peak_spent:.1f} % of the peak's engine-minutes (target <= {100 * SPEND:.0f} %)"
        f": {'met' if verdict else 'MISSED'}"
    )
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
