"""`specinfer-train`: the training Job of spec.learning, start to end.

0. In an init container with the claim writable (`--prune`): remove what retention says (retention.py).
1. Take the newest recorded prompts within the run's token cap, outside quarantined windows (the samples are
   mounted read-only here).
2. Have the target answer them (greedy, as long as each client asked, up to maxOutputTokens) while vLLM's
   extract_hidden_states path saves what it computed (extract.py, in a process of its own).
3. Train the draft in force on that (head.py), or a new head when the draft is not one this loop trains.
4. Write the generation to the claim (a temporary directory renamed when complete, so the operator never
   serves half a draft) with result.json, and say the same in one line of JSON in the termination log,
   where the operator reads it. A failure is one line there instead, and exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from specinfer_runtime.base import Section
from specinfer_runtime.training.corpus import recorded, select, tokenizer_of
from specinfer_runtime.training.retention import prune_claim
from specinfer_runtime.validation import validate

log = logging.getLogger("specinfer_train")
MAX_MESSAGE = 4096  # what Kubernetes keeps of a termination message


class TrainingRun(Section):
    """One run, as the operator renders it into the Job's arguments."""

    generation: int = Field(ge=1, description="The generation this run makes.")
    target: str = Field(min_length=1, max_length=1024, description="The target: a directory, or a Hub id.")
    start: str | None = Field(default=None, max_length=1024, description="The draft in force: a directory or Hub id.")
    samples: str = Field(min_length=1, max_length=1024, description="The claim's samples directory.")
    output: str = Field(min_length=1, max_length=1024, description="Where the generation goes.")
    scratch: str = Field(min_length=1, max_length=1024, description="Where the hidden states go, for this run only.")
    max_tokens: int = Field(ge=1, description="Tokens of prompts and answers to extract, at most.")
    max_output_tokens: int = Field(ge=1, description="The longest answer.")
    epochs: int = Field(ge=1, le=100)
    learning_rate: float = Field(gt=0, le=1)
    speculative_tokens: int = Field(ge=1, le=14, description="Steps of test-time training: the K it serves at.")
    retention_seconds: int = Field(ge=1)
    since: float = Field(
        default=0, ge=0, description="When the last run began (Unix time): this one needs a prompt recorded after."
    )
    max_bytes: int = Field(default=1 << 30, ge=0, description="What the samples of every pod may take together.")
    keep: list[int] = Field(
        default=[], max_length=128, description="The generations kept in the drafts directory beside this one."
    )
    exclude: list[Annotated[list[int], Field(min_length=2, max_length=2)]] = Field(
        default=[],
        max_length=64,
        description="Quarantined windows (Unix seconds, both ends included): samples recorded in them are not used.",
    )
    device: Literal["auto", "cpu", "npu"] = Field(default="auto")
    tensor_parallel: int = Field(default=1, ge=1, le=64, description="The target's, as the engines load it.")
    quantization: str | None = Field(default=None, max_length=64, description="The target's, as the engines load it.")
    trust_remote_code: bool = Field(default=False, description="The target's, as the engines load it.")


class RunError(Exception):
    """Why the run cannot make a generation, in one line."""


def local(model: str) -> Path:
    """A model's directory: itself, or its Hub snapshot (HF_HOME, HF_TOKEN as the engines have them)."""
    path = Path(model)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model))


def device(wanted: str) -> str:
    if wanted != "auto":
        return wanted
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return "cpu"
    return "npu"


def run(config: TrainingRun, now: float) -> dict[str, Any]:
    """The run; what it made, as result.json and the termination message say."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from specinfer_runtime.training import head

    started = time.monotonic()
    target = local(config.target)
    tokenizer = AutoTokenizer.from_pretrained(target)
    found = recorded(Path(config.samples), now, config.retention_seconds, config.exclude)
    newest = next(found, None)
    if newest is None or not _number(newest.get("time")) or newest["time"] <= config.since:
        raise RunError(
            f"no prompt recorded in {config.samples} since the last run: the engines record nothing (see their "
            "specinfer_samples_dropped_total), or sampling.maxBytes is reached"
        )
    prompts = select(
        itertools.chain([newest], found), tokenizer_of(tokenizer), config.max_tokens, config.max_output_tokens
    )
    times = [p.time for p in prompts]
    if not prompts:
        raise RunError(f"none of the prompts recorded in {config.samples} can be tokenized (chat without a template?)")
    target_config = json.loads((target / "config.json").read_text())
    start = _start_dir(config.start)
    start_config = json.loads((start / "config.json").read_text()) if start else None
    layers = head.aux_layers(target_config, start_config)
    scratch = Path(config.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        paths = _extract(config, str(target), prompts, layers, scratch)
        examples = [head.Example(d["hidden_states"], d["token_ids"]) for d in map(load_file, map(str, paths))]
        torch.manual_seed(config.generation)
        draft = head.new_head(target, layers, config.speculative_tokens)
        continued = bool(start and head.start_from(draft, start))
        progress = head.train(
            draft,
            examples,
            config.epochs,
            config.learning_rate,
            config.speculative_tokens,
            device(config.device),
            seed=config.generation,
            report=lambda p: log.info("epoch %d: loss %.4f, first-token accuracy %.4f", *p.__dict__.values()),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "generation": config.generation,
        "samples": len(examples),
        "tokens": sum(int(e.tokens.shape[0]) for e in examples),
        "trainingSeconds": round(time.monotonic() - started, 1),
        "from": "draft in force" if continued else "new head",
        "loss": round(progress[-1].loss, 4),
        "firstTokenAccuracy": round(progress[-1].first_token_accuracy, 4),
        "oldest": min(times),
        "newest": max(times),
    }
    _publish(draft, Path(config.output), result)
    return result


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _start_dir(start: str | None) -> Path | None:
    """The draft in force as a directory, when it can be had (a Hub draft that cannot is trained anew)."""
    if start is None:
        return None
    try:
        found = local(start)
    except Exception as error:  # any failure of the Hub means: start anew, and say so
        log.warning("the draft in force %s cannot be read (%s): training a new head", start, error)
        return None
    return found if (found / "config.json").is_file() else None


def _extract(
    config: TrainingRun, target: str, prompts: Sequence[Any], layers: Sequence[int], scratch: Path
) -> list[Path]:
    """extract.py in a process of its own: its memory is the device's again when it exits."""
    request = scratch / "extract.json"
    listing = scratch / "files.json"
    request.write_text(
        json.dumps(
            {
                "target": target,
                "prompts": [p.token_ids for p in prompts],
                "layers": list(layers),
                "scratch": str(scratch / "hidden-states"),
                "answers": [p.answer_tokens for p in prompts],
                "engine": {
                    "tensor_parallel_size": config.tensor_parallel,
                    "quantization": config.quantization,
                    "trust_remote_code": config.trust_remote_code,
                },
                "output": str(listing),
            }
        )
    )
    done = subprocess.run([sys.executable, "-m", "specinfer_runtime.training.extract", str(request)], check=False)
    if done.returncode != 0:
        raise RunError(f"extracting hidden states failed (exit {done.returncode}): see the pod's log")
    return [Path(p) for p in json.loads(listing.read_text())]


def _publish(draft: Any, output: Path, result: dict[str, Any]) -> None:
    from specinfer_runtime.training import head

    partial = output.with_name(f".{output.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    head.save(draft, partial)
    (partial / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(output, ignore_errors=True)
    os.replace(partial, output)


def failure_line(error: Exception) -> str:
    """What the termination log says of a failure, which the operator copies into status and events: this
    module's own words, or an OSError's (a path, a full volume), but never another library's ValueError, which
    may quote what it was given, a recorded prompt (the pod's log has it all)."""
    if isinstance(error, RunError | OSError) and str(error):
        return str(error).splitlines()[0]
    return f"{type(error).__name__} while training: see the training pod's log"


def main(args: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="specinfer-train", description="Train the next draft of spec.learning.")
    parser.add_argument("--config", required=True, help="the run, as JSON (the operator renders it)")
    parser.add_argument(
        "--prune", action="store_true", help="only remove what retention says, with the claim writable (first step)"
    )
    parser.add_argument(
        "--termination-log",
        default=os.environ.get("SPECINFER_TERMINATION_LOG", "/dev/termination-log"),
        help="where the result or the reason goes (SPECINFER_TERMINATION_LOG)",
    )
    ns = parser.parse_args(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s specinfer-train %(levelname)s %(message)s")
    try:
        report = validate(TrainingRun, json.loads(ns.config))
        if report.value is None:
            raise RunError("invalid run: " + "; ".join(str(p) for p in report.errors))
        done = prune_claim(report.value, time.time()) if ns.prune else run(report.value, time.time())
        line = json.dumps(done, separators=(",", ":"))
        code = 0
    except (RunError, ValueError, OSError) as error:
        log.exception("the run failed")
        line, code = failure_line(error), 1
    with contextlib.suppress(OSError):
        Path(ns.termination_log).write_text(line[:MAX_MESSAGE] + "\n")
    if code:
        sys.exit(code)
    print(line)


if __name__ == "__main__":
    main()
