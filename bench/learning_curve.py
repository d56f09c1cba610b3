"""The learning curve of spec.learning on the tiny structured target: mean acceptance length and decode speed on
held-out prompts, against the samples a run trained on and the time it took.

Each point is one run of specinfer-train (the training Job's own program, in the engine venv) from the untrained
head, on the first N prompts of the corpus' first 70 % recorded as the engines' recorder records them; then vLLM
serves the trained head on the held-out prompts (the corpus' last 30 %): the mean acceptance length from its
/metrics, the decode speed a request gets counted by the client (one request at a time, the median of REPEATS
rounds after a warm-up). The untrained head (0 samples) and no speculation are measured in the same run. Floors:
the largest run accepts at least 1.5 times what the untrained head does (what the e2e suite asks of a promoted
draft), and decodes faster than it. Then the same engine without the recorder and with it recording every
request: the recorder costs a request at most RECORDER_FLOOR of its decode speed.

Run `make bench-learning` (about 15 minutes on 2 cores; `--samples` and `--epochs` choose the points).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.profiles import engine_venv, machine, say
from hack.engine import (
    MAX_TOKENS,
    SERVED_NAME,
    checked,
    complete,
    engine_python,
    environment,
    http,
    server,
    without_speculation,
)
from hack.learnmodel import HEAD_STEPS, LearningModels, engine_config, prompts, record
from specinfer_operator.measure.acceptance import acceptance
from specinfer_runtime import samples
from specinfer_runtime.argv import vllm_argv

REPEATS = 3
SAMPLES = (10, 20, 40, 80)
EPOCHS = 20
EPOCH_POINTS = (5, 40)  # at 40 samples, beside EPOCHS: the training-time axis
FLOOR = 1.5
RECORDER_FLOOR = 0.05  # what the recorder may cost a request's decode speed, at most


@dataclass(frozen=True)
class Point:
    label: str
    samples: int
    tokens: int
    seconds: float  # the run's, as specinfer-train reports it
    mean_acceptance_length: float | None
    decode: float  # tokens per second a request gets


def train(
    venv: Path, env: dict[str, str], models: LearningModels, count: int, epochs: int, root: Path
) -> dict[str, Any]:
    """specinfer-train on the first `count` traffic prompts; what it reports (result.json)."""
    claim = root / f"claim-{count}-{epochs}"
    now = time.time()
    record(claim / "samples", prompts(count)[0], now)
    run = {
        "generation": 1,
        "target": str(models.target_dir),
        "start": str(models.untrained_head),
        "samples": str(claim / "samples"),
        "output": str(claim / "draft"),
        "scratch": str(claim / "scratch"),
        "maxTokens": 1_000_000,
        "maxOutputTokens": 256,
        "epochs": epochs,
        "learningRate": 0.001,
        "speculativeTokens": HEAD_STEPS,
        "retentionSeconds": 3600,
    }
    said = engine_python(
        venv, "-m", "specinfer_runtime.training.job", "--config", json.dumps(run), env=env, timeout=3600
    )
    result: dict[str, Any] = json.loads(said.strip().splitlines()[-1])
    result["draft"] = str(claim / "draft")
    return result


def serve(
    venv: Path, env: dict[str, str], draft: str | None, held_out: list[str], log: Path
) -> tuple[float | None, float]:
    """The held-out prompts on an engine with `draft` (None: no speculation): its mean acceptance length and
    the decode speed a request gets (with `env`'s recorder settings, the launcher installs the recorder)."""
    config = engine_config(draft)
    log.parent.mkdir(parents=True, exist_ok=True)
    path = log.with_suffix(".json")
    path.write_text(json.dumps(config))
    argv = [str(venv / "bin" / "specinfer-runtime"), "--config", str(path)]
    if draft is None:
        argv = without_speculation(vllm_argv(checked(config)))
    rates = []
    with server(argv, env, log):
        complete(held_out[0])  # warm-up
        for _ in range(REPEATS):
            started = time.monotonic()
            for text in held_out:
                complete(text)
            rates.append(len(held_out) * MAX_TOKENS / (time.monotonic() - started))
        found = acceptance(http("/metrics").decode(), SERVED_NAME) if draft is not None else None
    length = found.mean_acceptance_length if found is not None else None
    return length, statistics.median(rates)


def recorder_cost(venv: Path, env: dict[str, str], draft: str, held_out: list[str], root: Path) -> tuple[float, float]:
    """The decode speed of the same engine without the recorder and with it taking every request."""
    without = serve(venv, env, draft, held_out, root / "logs" / "recorder-off.log")[1]
    recorder = {
        samples.DIR_ENV: str(root / "recorded"),
        samples.PERCENT_ENV: "100",
        samples.MAX_BYTES_ENV: "64Mi",
        samples.POD_ENV: "engine-0",
    }
    with_it = serve(venv, {**env, **recorder}, draft, held_out, root / "logs" / "recorder-on.log")[1]
    if not any((root / "recorded").glob("*/*")):
        raise SystemExit("the recorder recorded nothing: its cost was not measured")
    return without, with_it


def rounded(length: float | None) -> str:
    return "-" if length is None else f"{length:.2f}"


def table(points: list[Point], off: float) -> str:
    rows = [
        "| draft | samples | tokens | training | mean acceptance length | decode tok/s | vs no speculation |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| none (speculation off) | | | | | {off:,.0f} | 1.00x |",
    ]
    for p in points:
        length = rounded(p.mean_acceptance_length)
        trained = f"{p.seconds:.0f} s" if p.samples else ""
        rows.append(
            f"| {p.label} | {p.samples or ''} | {p.tokens or ''} | {trained} | {length} | {p.decode:,.0f} "
            f"| {p.decode / off:.2f}x |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, nargs="+", default=list(SAMPLES), help="the runs' sample counts")
    parser.add_argument("--epochs", type=int, nargs="*", default=list(EPOCH_POINTS), help="more runs, at 40 samples")
    ns = parser.parse_args(argv)
    venv = engine_venv("bench.learning_curve")
    models = LearningModels.from_json(engine_python(venv, "-m", "hack.learnmodel", timeout=1800))
    held_out = prompts()[1]
    say(f"learning curve on {machine(venv)}: held-out prompts {len(held_out)}, {MAX_TOKENS} tokens each, greedy")
    with tempfile.TemporaryDirectory(prefix="learning-curve-") as scratch:
        root = Path(scratch)
        env = environment(venv, models.hf_home, root / "engine")
        off = serve(venv, env, None, held_out, root / "logs" / "off.log")[1]
        say(f"no speculation: {off:,.0f} tok/s")
        length, speed = serve(venv, env, models.head, held_out, root / "logs" / "untrained.log")
        points = [Point("untrained head", 0, 0, 0.0, length, speed)]
        say(f"untrained head: mean acceptance length {rounded(length)}, {speed:,.0f} tok/s")
        runs = [(n, EPOCHS) for n in ns.samples] + [(40, e) for e in ns.epochs if e != EPOCHS]
        for count, epochs in runs:
            result = train(venv, env, models, count, epochs, root)
            length, speed = serve(venv, env, result["draft"], held_out, root / "logs" / f"{count}-{epochs}.log")
            label = f"trained, {epochs} epochs"
            points.append(Point(label, result["samples"], result["tokens"], result["trainingSeconds"], length, speed))
            say(
                f"{label} on {count} prompts ({result['tokens']} tokens, {result['trainingSeconds']} s): "
                f"mean acceptance length {rounded(length)}, {speed:,.0f} tok/s"
            )
        recording = recorder_cost(venv, env, models.head, held_out, root)
    say("\n" + table(points, off) + "\n")
    untrained, largest = points[0], max(points[1:], key=lambda p: (p.samples, p.seconds))
    ok = (
        untrained.mean_acceptance_length is not None
        and largest.mean_acceptance_length is not None
        and largest.mean_acceptance_length >= FLOOR * untrained.mean_acceptance_length
        and largest.decode > untrained.decode
    )
    say(
        f"largest run: mean acceptance length {rounded(largest.mean_acceptance_length)} against the untrained head's "
        f"{rounded(untrained.mean_acceptance_length)} (floor {FLOOR}x), {largest.decode:,.0f} against "
        f"{untrained.decode:,.0f} tok/s: {'ok' if ok else 'BELOW THE FLOOR'}"
    )
    cost = 1 - recording[1] / recording[0]
    say(
        f"the recorder (every request recorded): {recording[1]:,.0f} tok/s against {recording[0]:,.0f} without it, "
        f"{cost:+.1%} (floor {RECORDER_FLOOR:.0%}): {'ok' if cost <= RECORDER_FLOOR else 'ABOVE THE FLOOR'}"
    )
    return 0 if ok and cost <= RECORDER_FLOOR else 1


if __name__ == "__main__":
    sys.exit(main())
