"""Training an EAGLE-3 head with speculators' model and loss, on any device.

speculators' own Trainer assumes CUDA (it moves the model to device 0 and autocasts for "cuda") and a fused
Triton loss; its model and eager loss do not. So this loop drives `Eagle3DraftModel` itself: one sequence a
step (the per-request files vLLM writes), AdamW, gradients clipped, the eager KL loss against the target's
own next-token distribution (from the target's last hidden states and LM head), at every step of
test-time training. What it saves is speculators' format, which vLLM serves as method eagle3.

The target's hidden states come as vLLM's extract_hidden_states writes them: `[tokens, 4, hidden]`, the three
layers the head reads (in ascending order) and the target's last layer.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, LlamaConfig

AUX_LAYERS = 3  # vLLM's EAGLE-3 head takes exactly three of the target's layers


@dataclass(frozen=True)
class Example:
    """One request's hidden states `[tokens, 4, hidden]` and its token ids `[tokens]`."""

    hidden: torch.Tensor
    tokens: torch.Tensor


@dataclass(frozen=True)
class Progress:
    """What an epoch did: its mean loss, and how often the head's first draft was the target's token."""

    epoch: int
    loss: float
    first_token_accuracy: float


def aux_layers(target: dict[str, Any], draft: dict[str, Any] | None) -> list[int]:
    """The target layers the head reads: the draft's own when it names them, else speculators' default
    [2, N/2, N-3] made distinct (a small target has few layers); then the last layer, N."""
    layers = int(target["num_hidden_layers"])
    named = (draft or {}).get("eagle_aux_hidden_state_layer_ids")
    if isinstance(named, list) and len(named) == AUX_LAYERS and all(isinstance(i, int) for i in named):
        return [*sorted(named), layers]
    if layers < AUX_LAYERS:
        raise ValueError(f"the target has {layers} layers: an EAGLE-3 head reads 3 of them, and its last")
    chosen = sorted({min(2, layers - 1), layers // 2, max(layers - 3, 0)})
    spare = [i for i in range(1, layers) if i not in chosen]
    while len(chosen) < AUX_LAYERS:
        chosen = sorted([*chosen, spare.pop()])
    return [*chosen, layers]


def draft_layer_config(target: Path) -> LlamaConfig:
    """One Llama decoder layer shaped like the target's: the head's transformer layer."""
    v = AutoConfig.from_pretrained(target)
    heads = v.num_attention_heads
    return LlamaConfig(
        vocab_size=v.vocab_size,
        hidden_size=v.hidden_size,
        intermediate_size=v.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=getattr(v, "num_key_value_heads", heads),
        head_dim=getattr(v, "head_dim", None) or v.hidden_size // heads,
        hidden_act="silu",
        max_position_embeddings=v.max_position_embeddings,
        rms_norm_eps=getattr(v, "rms_norm_eps", 1e-6),
        tie_word_embeddings=False,
        rope_parameters=getattr(v, "rope_parameters", None),
    )


def new_head(target: Path, aux: Sequence[int], ttt_steps: int) -> Any:
    """An untrained head for `target` (its embeddings and LM head copied from it, frozen)."""
    from speculators.models.eagle3 import Eagle3DraftModel

    vocab = int(json.loads((target / "config.json").read_text())["vocab_size"])
    return Eagle3DraftModel.from_training_args(
        verifier_config=draft_layer_config(target),
        verifier_name_or_path=str(target),
        target_layer_ids=list(aux[:AUX_LAYERS]),
        draft_vocab_size=vocab,
        norm_before_residual=True,
        norm_before_fc=True,
        norm_output=True,
        ttt_steps=ttt_steps,
        draft_attn_impl="sdpa",
    ).float()


def start_from(head: Any, draft: Path) -> bool:
    """Take the trainable weights of a draft in speculators' format, when they fit this head; False (and the
    head unchanged) when the draft is in another format or shape."""
    weights = draft / "model.safetensors"
    if not weights.is_file():
        return False
    found = load_file(str(weights))
    own = head.state_dict()
    trainable = {k for k, p in head.named_parameters() if p.requires_grad}
    if not trainable <= found.keys() or any(found[k].shape != own[k].shape for k in trainable):
        return False
    head.load_state_dict({k: found[k].to(own[k].dtype) for k in trainable}, strict=False)
    return True


def _batch(sequence: Example, device: str) -> dict[str, torch.Tensor]:
    """One sequence as the head's forward takes it, shifted as speculators' shift_batch does: the hidden
    state at t is paired with the token at t+1."""
    hidden = sequence.hidden.float()
    aux = hidden[:, :AUX_LAYERS].flatten(1)
    count = hidden.shape[0] - 1
    batch = {
        "hidden_states": aux[:-1],
        "input_ids": sequence.tokens.long()[1:],
        "verifier_last_hidden_states": hidden[1:, AUX_LAYERS],
        "loss_mask": torch.ones(count, dtype=torch.long),
        "position_ids": torch.arange(1, count + 1),
        "document_ids": torch.zeros(count, dtype=torch.long),
    }
    return {k: v.unsqueeze(0).to(device) for k, v in batch.items()}


def train(
    head: Any,
    sequences: Iterable[Example],
    epochs: int,
    learning_rate: float,
    ttt_steps: int,
    device: str = "cpu",
    seed: int = 0,
    report: Callable[[Progress], None] = lambda progress: None,
) -> list[Progress]:
    """Train `head` in place; what each epoch did."""
    from speculators.losses import resolve_loss_config

    data = [s for s in sequences if s.hidden.shape[0] > ttt_steps + 1]
    if not data:
        raise ValueError("no sample is long enough to train on")
    loss_config = resolve_loss_config("kl_div", "eager")
    head.to(device).train()
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate)
    order = random.Random(seed)
    done = []
    for epoch in range(1, epochs + 1):
        order.shuffle(data)
        total = hits = seen = 0.0
        for sequence in data:
            _, loss, metrics = head(
                **_batch(sequence, device), ttt_steps=ttt_steps, ttt_step_loss_decay=1.0, loss_config=loss_config
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            total += float(loss.detach())
            hits += float(metrics.get("full_acc_0_sum", 0.0))
            seen += float(metrics.get("full_acc_0_total", 0.0))
        progress = Progress(epoch, total / len(data), hits / seen if seen else math.nan)
        report(progress)
        done.append(progress)
    head.eval()
    return done


def save(head: Any, directory: Path) -> None:
    """speculators' format (config.json, model.safetensors): vLLM serves the directory as method eagle3."""
    directory.mkdir(parents=True, exist_ok=True)
    head.to("cpu").save_pretrained(str(directory))
