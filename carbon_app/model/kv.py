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


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in buffers [rows, kv heads, capacity, head dim], of which the first
    `length` positions are written; `keys`/`values` (what the model reads) are views of that part.

    Beside `DynamicLayer`'s interface, code that writes the buffers itself (a CUDA graph's static step,
    `graphs.StaticForward`) uses `buffers`, `move_to` and `advance`."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole key and value buffers, written or not (after the first `update`)."""
        return self._key_buffer, self._value_buffer

    @property
    def rows(self) -> int:
        return self._key_buffer.shape[0]

    @property
    def room(self) -> int:
        """Positions the buffers hold, written or not."""
        return self._key_buffer.shape[-2]

    @property
    def bytes_per_position(self) -> int:
        return sum(b.numel() // b.shape[-2] * b.element_size() for b in self.buffers)

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
        if self.length + new > self.room:  # more than planned: grow, doubling
            extra = max(self.room, new)
            self._key_buffer, self._value_buffer = (_with_room(b, extra) for b in self.buffers)
        self._key_buffer[..., self.length : self.length + new, :] = key_states
        self._value_buffer[..., self.length : self.length + new, :] = value_states
        self.length += new
        self._expose()
        return self.keys, self.values

    def move_to(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold this layer in `keys`/`values` (buffers of the same rows and at least this room) from now on:
        the written positions are copied in where they are other buffers, and every unwritten one is zeroed
        (a static step's masked positions weigh zero, but 0 x NaN is NaN, so none may hold garbage)."""
        if keys is not self._key_buffer:
            keys[..., : self.length, :].copy_(self._key_buffer[..., : self.length, :])
            values[..., : self.length, :].copy_(self._value_buffer[..., : self.length, :])
        keys[..., self.length :, :].zero_()
        values[..., self.length :, :].zero_()
        self._key_buffer, self._value_buffer = keys, values
        self._expose()

    def advance(self, new: int) -> None:
        """Count `new` positions after `length` as written: their keys and values were put in the buffers
        by someone else (a replayed graph)."""
        if self.length + new > self.room:
            raise ValueError(f"{new} more positions do not fit the layer ({self.length} of {self.room} written)")
        self.length += new
        self._expose()

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


def is_preallocated(cache) -> bool:
    """Whether `cache` is a `preallocated_cache` that has been written (so its buffers exist)."""
    layer = cache.layers[0] if getattr(cache, "layers", None) else None
    return isinstance(layer, PreallocatedLayer) and layer.is_initialized


def preallocated_cache(config, capacity: int) -> DynamicCache:
    """A DynamicCache for the decoder of `config` (its `num_hidden_layers` full-attention layers) whose
    layers hold `capacity` tokens in place. A `transformers` Cache, so the fallback forward reads it too."""
    cache = DynamicCache()
    cache.layers = [PreallocatedLayer(capacity) for _ in range(config.num_hidden_layers)]
    return cache


def branch(config, cache: DynamicCache, keep: int, room: int, rows: torch.Tensor) -> DynamicCache:
    """A new preallocated cache that starts with the first `keep` positions of rows `rows` of the
    preallocated `cache` (one source row per new row) and has space for `room` more: several
    continuations of one prefix (a scan's substitutions) each read the prefix without recomputing it."""
    out = preallocated_cache(config, keep + room)
    for source, target in zip(cache.layers, out.layers, strict=True):
        keys, values = source.buffers
        target.update(keys[rows, ..., :keep, :], values[rows, ..., :keep, :])
    return out
