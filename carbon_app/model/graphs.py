"""Decode steps in fixed shapes, replayed as a CUDA graph.

At batch 1 a decode step of a billion-parameter decoder is a few hundred
small kernels; on a GPU, launching them one by one from Python costs more than
reading the weights they use. As in gpt-fast, the step is made shape-static
and captured once as a CUDA graph, then replayed per token: the new token's
keys and values are written into the preallocated cache at a position held
in a device tensor, and attention reads the cache's whole capacity with a
mask of the positions written so far. Masked positions get exactly zero
weight, so the step computes what the plain forward computes.

`decode_step` hands out such a step where it applies (a CUDA device, the lean
decoder, `CARBON_CUDA_GRAPHS` not 0) and the plain forward elsewhere; the
static step also runs without a graph, which is how a CPU tests it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from .decoder import LeanDecoder


def graphs_enabled() -> bool:
    return os.environ.get("CARBON_CUDA_GRAPHS", "1") != "0"


class StaticDecodeStep:
    """One new token per row over a preallocated cache (`kv.preallocated_cache`, already filled by a
    prefill): call it with ids [batch, 1] for the hidden states [batch, 1, hidden]; the cache grows by
    one. Steps back (`cache.crop`) are fine: the next step writes where the cache now ends."""

    def __init__(self, decoder: LeanDecoder, cache, batch: int, graph: bool):
        self.decoder, self.layers = decoder, cache.layers
        buffer = self.layers[0]._key_buffer
        self.capacity, device = buffer.shape[-2], buffer.device
        if buffer.shape[0] != batch:
            raise ValueError(f"the cache holds {buffer.shape[0]} rows, not {batch}")
        for layer in self.layers:  # masked positions weigh zero, but 0 x NaN is NaN: no garbage may stay
            layer._key_buffer[..., layer.length :, :].zero_()
            layer._value_buffer[..., layer.length :, :].zero_()
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.position = torch.full((1,), self.layers[0].length, dtype=torch.long, device=device)
        self.columns = torch.arange(self.capacity, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        if graph:
            self._capture()

    def _store(self, index: int, keys: torch.Tensor, values: torch.Tensor):
        layer = self.layers[index]
        layer._key_buffer.index_copy_(2, self.position, keys)
        layer._value_buffer.index_copy_(2, self.position, values)
        return layer._key_buffer, layer._value_buffer

    def _step(self) -> torch.Tensor:
        mask = (self.columns <= self.position).view(1, 1, 1, -1)
        return self.decoder.forward(self.ids, self.position.view(1, 1), self._store, mask, causal=False)

    @torch.inference_mode()
    def _capture(self) -> None:
        # warm-up on a side stream (allocator pools, kernel choices), then one capture; the warm-up
        # writes at the first free position, which the first real step overwrites
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._step()

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = self.layers[0].length
        if length >= self.capacity:
            raise ValueError(f"the cache is full ({self.capacity} positions)")
        self.ids.copy_(input_ids)
        self.position.fill_(length)
        if self.graph is not None:
            self.graph.replay()
            hidden = self.out.clone()  # the next replay overwrites its output
        else:
            hidden = self._step()
        for layer in self.layers:
            layer.length += 1
            layer._expose()
        return hidden


def decode_step(bundle, cache, batch: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """One-token steps over `cache`: a CUDA graph where one applies, else the bundle's own forward."""
    if bundle.decoder is not None and bundle.device.type == "cuda" and graphs_enabled():
        return StaticDecodeStep(bundle.decoder, cache, batch, graph=True)
    return lambda input_ids: bundle.hidden_states(input_ids, cache)
