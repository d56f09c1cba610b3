"""vLLM's hidden-state connector, with a write path that runs on any device.

vLLM's ExampleHiddenStatesConnector saves, for each finished request, what its extract_hidden_states method put
in the KV cache: `hidden_states [tokens, layers, hidden]` and `token_ids [tokens]`, one safetensors file per
request. Its copy out of the cache goes through CUDA streams, events and pinned memory, so on vLLM's CPU
backend it serves one request and dies ("Found no NVIDIA driver"). This subclass copies synchronously (the
cache's device to the host, whatever the device) and keeps the rest: file names, locks, the writer threads.

It also always saves the generated tokens with the prompt (`include_output_tokens`), since the training Job
has the target write its own answer to each recorded prompt: those tokens are what a draft learns to predict.

Loaded by vLLM from `kv_transfer_config`: `{"kv_connector": "SyncHiddenStatesConnector",
"kv_connector_module_path": "specinfer_runtime.hidden_states_connector", "kv_role": "kv_producer", ...}`.
"""

from __future__ import annotations

import fcntl
import os
from functools import partial
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)

MODULE = "specinfer_runtime.hidden_states_connector"
CONNECTOR = "SyncHiddenStatesConnector"


class _Copied:
    """Stands for the parent's copy-done event: a synchronous copy is done when it returns."""

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class SyncHiddenStatesConnector(ExampleHiddenStatesConnector):  # type: ignore[misc]
    """ExampleHiddenStatesConnector with a synchronous copy out of the cache, saving prompt and answer."""

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        request.kv_transfer_params = {**(request.kv_transfer_params or {}), "include_output_tokens": True}
        found: tuple[bool, dict[str, Any] | None] = super().request_finished(request, block_ids)
        return found

    def _submit_async_write(self, pending: PendingSave) -> None:
        if not self._is_tp_rank_zero:
            return
        assert self._kv_cache is not None
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slots = (offsets.reshape(1, -1) + blocks.reshape(-1, 1) * self._block_size).flatten()
        cached = extract_from_kv_cache(self._kv_cache, slots.to(self._kv_cache.device), pending.token_ids.shape[0])
        tensors = {"hidden_states": cached.to("cpu").contiguous(), "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        copied = _Copied()
        future = self._executor.submit(self._write_tensors, tensors, copied, pending.filename, lock_fd)
        self._req_copy_events[pending.req_id] = copied
        self._req_futures[pending.req_id] = future
        future.add_done_callback(partial(self._on_write_done, pending.req_id))
