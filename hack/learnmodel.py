"""A tiny target with something to learn, its untrained EAGLE-3 head, and a head trained on its traffic.

The engine tests' tiny target has random weights: a head trained on its hidden states has nothing to learn
(its next token is noise). This one has their tokenizer and shape, with four layers (a head reads three of
them and the last), trained on corpus.txt until it continues the corpus: its greedy answers have structure a
head can learn from the target's hidden states, as a real model's do. Training is deterministic (fixed seed,
one thread) and takes a minute or two on a CPU, once: the result is cached under
`${SPECINFER_CACHE:-~/.cache/specinfer}/learning-models/<key>`, keyed on this file, tinymodel.py, the corpus and
the training Job's program. Suites that run at once build it once: the second waits for the first's lock.

A learning resource starts from the untrained head (a weak draft). The trained one is specinfer-train's first
generation from the traffic (the corpus' first 70 %), made once here: a draft that serves well, for a resource
whose next generation must not replace it with a worse one.

Run `python -m hack.learnmodel` to build them (or find them built); it prints where they are, as JSON.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack import tinymodel
from hack.engine import MAX_MODEL_LEN, SERVED_NAME
from specinfer_runtime import samples
from specinfer_runtime.training import job

TARGET = f"{tinymodel.ORGANIZATION}/tiny-structured"
HEAD = f"{tinymodel.ORGANIZATION}/tiny-structured-eagle3"  # its untrained EAGLE-3 head
SIZE = tinymodel.Size(layers=4, hidden=128, intermediate=256, heads=2)
STEPS = 600
BATCH = 16
WINDOW = 64
LEARNING_RATE = 3e-3
HEAD_STEPS = 3  # the heads' test-time-training steps (their K)
TRAINED_HEAD = f"{tinymodel.ORGANIZATION}/tiny-structured-eagle3-corpus"  # the head trained on TRAFFIC
TRAFFIC, HELD_OUT = 40, 12
PROMPT_CHARACTERS = 80
ANSWER_TOKENS = 48  # what the tests' clients ask for


def prompts(traffic: int = TRAFFIC) -> tuple[list[str], list[str]]:
    """`traffic` prompts from the corpus' first 70 %, HELD_OUT prompts from the rest, at even steps (more than
    about 110 of the first overlap)."""
    text = tinymodel.CORPUS.read_text(encoding="utf-8")
    cut = int(len(text) * 0.7)
    first = [text[i : i + PROMPT_CHARACTERS] for i in range(0, cut - PROMPT_CHARACTERS, cut // traffic)]
    rest = len(text) - cut - PROMPT_CHARACTERS
    last = [text[cut + i : cut + i + PROMPT_CHARACTERS] for i in range(0, rest, rest // HELD_OUT)]
    return first[:traffic], last[:HELD_OUT]


def engine_config(draft: str | None) -> dict[str, Any]:
    """The launcher's config of the structured target with `draft` (a Hub id in the cache, or a directory) as its
    eagle3 head; with None, an ngram config whose command runs without --speculative-config (hack.engine's
    without_speculation: a config requires a method)."""
    speculative: dict[str, Any] = {"method": "ngram", "numSpeculativeTokens": HEAD_STEPS}
    if draft is not None:
        speculative = {"method": "eagle3", "numSpeculativeTokens": HEAD_STEPS, "draftModel": {"name": draft}}
    return {
        "model": {"name": TARGET, "servedModelName": SERVED_NAME, "maxModelLen": MAX_MODEL_LEN},
        "speculative": speculative,
        "graph": {"mode": "NONE"},
        "engineArgs": ["--dtype", "float32", "--seed", "0"],
    }


@dataclass(frozen=True)
class LearningModels:
    """The structured target and its heads: repository ids in `hf_home`, and the directories of the first two."""

    hf_home: Path
    target: str
    target_dir: Path
    head: str
    untrained_head: Path
    trained_head: str

    def to_json(self) -> str:
        return json.dumps({k: str(v) for k, v in self.__dict__.items()}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> LearningModels:
        data = json.loads(text)
        return cls(
            Path(data["hf_home"]),
            data["target"],
            Path(data["target_dir"]),
            data["head"],
            Path(data["untrained_head"]),
            data["trained_head"],
        )


def _key() -> str:
    digest = hashlib.sha256()
    training = Path(job.__file__).parent
    for path in (Path(__file__), Path(tinymodel.__file__), tinymodel.CORPUS, *sorted(training.glob("*.py"))):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _train_target(tokenizer: object) -> object:
    """The target, trained to continue the corpus (next-token loss on random windows of it)."""
    import torch
    from transformers import LlamaForCausalLM

    bos, eos = tokenizer.convert_tokens_to_ids([tinymodel.BOS, tinymodel.EOS])  # type: ignore[attr-defined]
    ids = torch.tensor(tokenizer(tinymodel.corpus()[0])["input_ids"])  # type: ignore[operator]
    torch.manual_seed(tinymodel.SEED)
    model = LlamaForCausalLM(tinymodel.llama_config(SIZE, SIZE.layers, bos, eos))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(tinymodel.SEED)
    model.train()
    for _ in range(STEPS):
        starts = torch.randint(0, len(ids) - WINDOW - 1, (BATCH,), generator=generator)
        batch = torch.stack([ids[s : s + WINDOW] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"learnmodel: target trained, last loss {float(loss):.3f}", file=sys.stderr)
    return model.eval()


def record(directory: Path, texts: list[str], now: float) -> None:
    """`texts` as the engines' recorder records completion requests of ANSWER_TOKENS at `now`."""
    store = samples.Store(samples.Settings(directory, 100, 64 << 20, 3600, "engine-0"), clock=lambda: now)
    for text in texts:
        store.write({"kind": "completion", "time": round(now), "prompt": text, "maxTokens": ANSWER_TOKENS})
    store.complete()


def _train_head(target_dir: Path, start: Path, claim: Path) -> Path:
    """specinfer-train's first generation from TRAFFIC, recorded as the engines' recorder records it."""
    now = time.time()
    record(claim / "samples" / "engine-0", prompts()[0], now)
    run = job.TrainingRun(
        generation=1,
        target=str(target_dir),
        start=str(start),
        samples=str(claim / "samples"),
        output=str(claim / "drafts" / "gen-1"),
        scratch=str(claim / "scratch"),
        max_tokens=100_000,
        max_output_tokens=256,
        epochs=20,
        learning_rate=1e-3,
        speculative_tokens=HEAD_STEPS,
        retention_seconds=3600,
    )
    result = job.run(run, now)
    print(f"learnmodel: head trained on the traffic: {result}", file=sys.stderr)
    (claim / "drafts" / "gen-1" / "result.json").unlink()
    return claim / "drafts" / "gen-1"


def build(cache: Path) -> LearningModels:
    """Build the target and the untrained head into `cache` (or find them there)."""
    root = cache / "learning-models" / _key()
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process ends
        done = root / "models.json"
        if done.is_file():
            return LearningModels.from_json(done.read_text())
        return _build(root, done)


def _build(root: Path, done: Path) -> LearningModels:
    """The models, built from scratch into `root`; `done` written last marks them whole."""
    import torch

    from specinfer_runtime.training import head

    torch.set_num_threads(1)  # the same weights on every machine, and room for what else runs
    shutil.rmtree(root, ignore_errors=True)
    hf_home = root / "hf"
    tokenizer = tinymodel.train_tokenizer(tinymodel.corpus())
    target_dir = tinymodel.save(_train_target(tokenizer), tokenizer, root / "staging", hf_home, TARGET)
    staging = root / "staging" / HEAD.replace("/", "--")
    config = json.loads((target_dir / "config.json").read_text())
    torch.manual_seed(tinymodel.SEED)
    head.save(head.new_head(target_dir, head.aux_layers(config, None), HEAD_STEPS), staging)
    untrained = tinymodel.publish(staging, hf_home, HEAD)
    trained = _train_head(target_dir, untrained, root / "staging" / "claim")
    tinymodel.publish(trained, hf_home, TRAINED_HEAD)
    shutil.rmtree(root / "staging", ignore_errors=True)
    built = LearningModels(hf_home, TARGET, target_dir, HEAD, untrained, TRAINED_HEAD)
    done.write_text(built.to_json())
    return built


def main() -> None:
    """Print where the models are, as JSON alone on stdout: what building them prints (the training run's engine
    logs to stdout, from its own processes too) goes to stderr."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    cache = Path(os.environ.get("SPECINFER_CACHE", Path.home() / ".cache" / "specinfer"))
    built = build(cache)
    sys.stdout.flush()
    answer.write(built.to_json() + "\n")
    answer.close()


if __name__ == "__main__":
    main()
