"""A tiny target with something to learn, and the untrained EAGLE-3 head a learning resource starts from.

The engine tests' tiny target has random weights: a head trained on its hidden states has nothing to learn
(its next token is noise). This one has their tokenizer and shape, with four layers (a head reads three of
them and the last), trained on corpus.txt until it continues the corpus: its greedy answers have structure a
head can learn from the target's hidden states, as a real model's do. Training is deterministic (fixed seed,
one thread) and takes a minute or two on a CPU, once: the result is cached under
`${SPECINFER_CACHE:-~/.cache/specinfer}/learning-models/<key>`, keyed on this file, tinymodel.py and the corpus.

Run `python -m hack.learnmodel` to build them (or find them built); it prints where they are, as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from hack import tinymodel

TARGET = f"{tinymodel.ORGANIZATION}/tiny-structured"
HEAD = f"{tinymodel.ORGANIZATION}/tiny-structured-eagle3"  # its untrained EAGLE-3 head
SIZE = tinymodel.Size(layers=4, hidden=128, intermediate=256, heads=2)
STEPS = 600
BATCH = 16
WINDOW = 64
LEARNING_RATE = 3e-3
HEAD_STEPS = 3  # the untrained head's test-time-training steps (its K)


@dataclass(frozen=True)
class LearningModels:
    """The structured target and its untrained head: repository ids in `hf_home`, and their directories."""

    hf_home: Path
    target: str
    target_dir: Path
    head: str
    untrained_head: Path

    def to_json(self) -> str:
        return json.dumps({k: str(v) for k, v in self.__dict__.items()}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> LearningModels:
        data = json.loads(text)
        return cls(
            Path(data["hf_home"]), data["target"], Path(data["target_dir"]), data["head"], Path(data["untrained_head"])
        )


def _key() -> str:
    digest = hashlib.sha256()
    for path in (Path(__file__), Path(tinymodel.__file__), tinymodel.CORPUS):
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


def build(cache: Path) -> LearningModels:
    """Build the target and the untrained head into `cache` (or find them there)."""
    root = cache / "learning-models" / _key()
    done = root / "models.json"
    if done.is_file():
        return LearningModels.from_json(done.read_text())
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
    shutil.rmtree(root / "staging", ignore_errors=True)
    built = LearningModels(hf_home, TARGET, target_dir, HEAD, untrained)
    done.write_text(built.to_json())
    return built


if __name__ == "__main__":
    cache = Path(os.environ.get("SPECINFER_CACHE", Path.home() / ".cache" / "specinfer"))
    print(build(cache).to_json())
