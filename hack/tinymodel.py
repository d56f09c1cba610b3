"""A tiny Llama target and its 1-layer draft, built locally so the engine tests download nothing.

The tokenizer is a byte-level BPE (vocabulary 512) trained on corpus.txt (the project's prose), the weights
are random under fixed seeds: the models are useless as language models but exercise the same
proposers, verifier and metrics as a real checkpoint. They are laid out as an offline Hugging Face cache
(`$HF_HOME/hub/models--specinfer-tests--tiny-llama/...`) so that the spec's model `name` is a repository
id, rendered verbatim as `vllm serve specinfer-tests/tiny-llama`, exactly as without a volume source.

The draft is the target cut after its first layer (same embeddings, final norm and LM head): a
self-speculative draft that shares the tokenizer. The target's later layers are scaled down so that the
draft agrees with it often but not always, like a real draft; independent random weights would agree
by chance only. `Size` makes larger pairs (the tuning benchmark's), whose target costs more per step.

Run `python -m hack.tinymodel HF_HOME` to build them by hand.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ORGANIZATION = "specinfer-tests"
TARGET = f"{ORGANIZATION}/tiny-llama"
DRAFT = f"{ORGANIZATION}/tiny-llama-draft"
# The draft again, with the mask token parallel drafting (PARD) puts in the positions it drafts at once.
PARD_DRAFT = f"{ORGANIZATION}/tiny-llama-pard-draft"
# The target with PADDING layers more that add nothing to the residual stream: the same tokens as the
# target, so a draft every token of which is accepted, at many times the cost of a pass.
SLOW_COPY = f"{ORGANIZATION}/tiny-llama-slow-copy"
PADDING = 30
VOCAB_SIZE = 512
SEED = 1234
MAX_POSITIONS = 1024
BOS, EOS = "<s>", "</s>"
# Scale of the output projections of the target's layers after the first. With purely random layers the
# 1-layer draft picks the target's greedy token about 5% of the time; at 0.25 (2 layers) it does 50-85% on
# the test prompts.
TAIL_SCALE = 0.25
# Training text: a frozen copy of some of the project's own prose (the README's start and the commented
# examples, ~20 KB), so that editing the README does not change the models.
CORPUS = Path(__file__).with_name("corpus.txt")


@dataclass(frozen=True)
class TinyModels:
    """Where the models are: the repository ids to give vLLM, and the snapshot directories behind them."""

    hf_home: Path
    target: str
    draft: str
    target_dir: Path
    draft_dir: Path
    pard_draft: str = PARD_DRAFT
    slow_copy: str = SLOW_COPY

    def to_json(self) -> str:
        return json.dumps({k: str(v) for k, v in self.__dict__.items()}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> TinyModels:
        """What `python -m hack.tinymodel` printed, in the process that runs the tests."""
        data = json.loads(text)
        return cls(
            hf_home=Path(data["hf_home"]),
            target=data["target"],
            draft=data["draft"],
            target_dir=Path(data["target_dir"]),
            draft_dir=Path(data["draft_dir"]),
            pard_draft=data["pard_draft"],
            slow_copy=data["slow_copy"],
        )


def corpus() -> list[str]:
    """The tokenizer's training text."""
    return [CORPUS.read_text(encoding="utf-8")]


def train_tokenizer(texts: list[str]) -> object:
    """A byte-level BPE with VOCAB_SIZE entries, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    assert tokenizer.get_vocab_size() == VOCAB_SIZE, tokenizer.get_vocab_size()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS)


@dataclass(frozen=True)
class Size:
    """The shape of a target; its draft is the target cut after its first layer."""

    layers: int = 2
    hidden: int = 128
    intermediate: int = 256
    heads: int = 2  # head_dim = hidden / heads; vLLM's CPU attention refuses 16, takes 64
    tail_scale: float = TAIL_SCALE  # scale of what the layers after the first write into the residual
    draft_layers: int = 1  # the draft is the target's first layers; all of them: a copy, accepted always


def llama_config(size: Size, layers: int, bos: int, eos: int) -> object:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        head_dim=size.hidden // size.heads,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=False,
        dtype="float32",
    )


def _revision(directory: Path) -> str:
    """A commit-like id for the snapshot: the SHA-1 of its files, so equal builds share a revision."""
    digest = hashlib.sha1()
    for path in sorted(directory.iterdir()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def publish(staging: Path, hf_home: Path, repo_id: str) -> Path:
    """Move a saved checkpoint into the hub cache layout and point refs/main at it."""
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    revision = _revision(staging)
    snapshot = repo_dir / "snapshots" / revision
    if not snapshot.exists():
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(snapshot)
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return snapshot


def _slow_copy(big: object, size: Size, bos: int, eos: int) -> object:
    """The target and PADDING layers whose attention and MLP outputs are zero: each adds exactly nothing, so
    the logits are the target's, at the cost of the extra layers."""
    import torch
    from transformers import LlamaForCausalLM

    slow = LlamaForCausalLM(llama_config(size, size.layers + PADDING, bos, eos)).eval()
    with torch.no_grad():
        for layer in slow.model.layers[size.layers :]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    missing, unexpected = slow.load_state_dict(big.state_dict(), strict=False)  # type: ignore[attr-defined]
    padded = tuple(f"model.layers.{i}." for i in range(size.layers, size.layers + PADDING))
    assert not unexpected, unexpected
    assert all(key.startswith(padded) for key in missing), missing
    return slow


def save(model: object, tokenizer: object, staging_root: Path, hf_home: Path, name: str) -> Path:
    staging = staging_root / name.replace("/", "--")
    staging.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(staging, safe_serialization=True)  # type: ignore[attr-defined]
    tokenizer.save_pretrained(staging)  # type: ignore[attr-defined]
    return publish(staging, hf_home, name)


def build(hf_home: Path, size: Size = Size(), target: str = TARGET, draft: str = DRAFT) -> TinyModels:
    """Build both checkpoints into `hf_home` (deterministic: same corpus, same size, same files)."""
    import torch
    from transformers import LlamaForCausalLM

    tokenizer = train_tokenizer(corpus())
    bos, eos = tokenizer.convert_tokens_to_ids([BOS, EOS])  # type: ignore[attr-defined]
    torch.manual_seed(SEED)
    big = LlamaForCausalLM(llama_config(size, size.layers, bos, eos)).eval()
    small = LlamaForCausalLM(llama_config(size, size.draft_layers, bos, eos)).eval()
    with torch.no_grad():  # the later layers write less into the residual stream, so the draft often agrees
        for layer in big.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(size.tail_scale)
            layer.mlp.down_proj.weight.mul_(size.tail_scale)
    # The draft is the target's first layers under the target's embeddings, final norm and LM head.
    missing, unexpected = small.load_state_dict(big.state_dict(), strict=False)
    assert not missing, missing
    kept = tuple(f"model.layers.{i}." for i in range(size.draft_layers))
    assert not any(key.startswith(kept) for key in unexpected), unexpected

    staging_root = hf_home / "staging"
    dirs = [save(model, tokenizer, staging_root, hf_home, name) for name, model in ((target, big), (draft, small))]
    pard = staging_root / PARD_DRAFT.replace("/", "--")
    shutil.copytree(dirs[1], pard)
    config = json.loads((pard / "config.json").read_text())
    (pard / "config.json").write_text(json.dumps({**config, "pard_token": VOCAB_SIZE - 1}, indent=2))
    publish(pard, hf_home, PARD_DRAFT)
    save(_slow_copy(big, size, bos, eos), tokenizer, staging_root, hf_home, SLOW_COPY)
    shutil.rmtree(staging_root)  # what is left are builds equal to a snapshot already there
    return TinyModels(hf_home=hf_home, target=target, draft=draft, target_dir=dirs[0], draft_dir=dirs[1])


if __name__ == "__main__":
    built = build(Path(sys.argv[1]).resolve())
    print(built.to_json())
