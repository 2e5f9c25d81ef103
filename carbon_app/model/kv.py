"""A KV cache that writes each step in place instead of re-concatenating.

`transformers`' DynamicCache grows by `torch.cat`, which copies every layer's
whole cache at every generated token: O(L) work per token, O(L^2) per run, a
cost that grows with the context. Here each layer holds buffers sized for the
whole run (the engine knows it: prompt + new tokens) and hands the model views
of the filled part, so a step writes only its own keys and values.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def _with_room(buffer: torch.Tensor, extra: int) -> torch.Tensor:
    """`buffer` [..., length, dim] with `extra` unwritten positions after it."""
    return torch.cat([buffer, buffer.new_empty((*buffer.shape[:-2], extra, buffer.shape[-1]))], dim=-2)


class _PreallocatedLayer(DynamicLayer):
    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def _expose(self) -> None:
        self.keys = self._key_buffer[..., : self.length, :]
        self.values = self._value_buffer[..., : self.length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.dtype, self.device = key_states.dtype, key_states.device
            shape = (*key_states.shape[:-2], max(self.capacity, key_states.shape[-2]), key_states.shape[-1])
            self._key_buffer = key_states.new_empty(shape)
            self._value_buffer = value_states.new_empty((*shape[:-1], value_states.shape[-1]))
            self.is_initialized = True
        new = key_states.shape[-2]
        if self.length + new > self._key_buffer.shape[-2]:  # more than planned: grow, doubling
            extra = max(self._key_buffer.shape[-2], new)
            self._key_buffer, self._value_buffer = (_with_room(b, extra) for b in (self._key_buffer,
                                                                                     self._value_buffer))
        self._key_buffer[..., self.length : self.length + new, :] = key_states
        self._value_buffer[..., self.length : self.length + new, :] = value_states
        self.length += new
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes the negative number of tokens to drop")
        if self.is_initialized and tokens_to_remove:
            self.length = max(0, self.length + tokens_to_remove)
            self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._expose()


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache for `config`'s decoder whose layers hold `capacity` tokens in place."""
    cache = DynamicCache(config=config)
    cache.layers = [_PreallocatedLayer(capacity) for _ in cache.layers]
    return cache


def branch(config, cache: DynamicCache, keep: int, room: int, rows: torch.Tensor) -> DynamicCache:
    """A new preallocated cache that starts with the first `keep` positions of rows `rows` of the
    preallocated `cache` (one source row per new row) and has space for `room` more: several
    continuations of one prefix (a scan's substitutions) each read the prefix without recomputing it."""
    out = preallocated_cache(config, keep + room)
    for source, target in zip(cache.layers, out.layers, strict=True):
        target.update(source._key_buffer[rows, ..., :keep, :], source._value_buffer[rows, ..., :keep, :])
    return out
