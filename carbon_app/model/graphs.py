"""Decode steps in fixed shapes, replayed as a CUDA graph.

At batch 1 a decode step of a billion-parameter decoder is a few hundred
small kernels; on a GPU, launching them one by one from Python costs more than
reading the weights they use. As in gpt-fast, the step is made shape-static
and captured once as a CUDA graph, then replayed per token: the new token's
keys and values are written into the preallocated cache at a position held
in a device tensor, and attention reads the cache's whole capacity with a
mask of the positions written so far. Masked positions get exactly zero
weight, so the step computes what the plain forward computes.

`forward_over` hands out such a forward where it applies (a CUDA device, the
lean decoder, `CARBON_CUDA_GRAPHS` not 0) and the plain forward elsewhere.
Several new tokens at once (a speculative verify) work the same way, with a
mask per new token; each count gets its own graph. The static forward also
runs without a graph, which is how a CPU tests it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from .decoder import LeanDecoder


def graphs_enabled() -> bool:
    return os.environ.get("CARBON_CUDA_GRAPHS", "1") != "0"


class StaticForward:
    """New tokens for every row over a preallocated cache (`kv.preallocated_cache`, already filled by a
    prefill): call it with ids [batch, new] for the hidden states [batch, new, hidden]; the cache grows
    by `new`. One token is a decode step, several a speculative verify (or a draft catching up); each
    count gets its own graph, captured at first use. Steps back (`cache.crop`) are fine: the next call
    writes where the cache now ends."""

    def __init__(self, decoder: LeanDecoder, cache, batch: int, graph: bool, max_graphed: int = 16):
        self.decoder, self.layers = decoder, cache.layers
        buffer = self.layers[0]._key_buffer
        self.capacity, self.device = buffer.shape[-2], buffer.device
        if buffer.shape[0] != batch:
            raise ValueError(f"the cache holds {buffer.shape[0]} rows, not {batch}")
        for layer in self.layers:  # masked positions weigh zero, but 0 x NaN is NaN: no garbage may stay
            layer._key_buffer[..., layer.length :, :].zero_()
            layer._value_buffer[..., layer.length :, :].zero_()
        self.batch, self.graph, self.max_graphed = batch, graph, max_graphed
        self.start = torch.zeros(1, dtype=torch.long, device=self.device)  # where the new tokens go
        self.columns = torch.arange(self.capacity, device=self.device)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = self.start + torch.arange(ids.shape[1], device=self.device)

        def store(index: int, keys: torch.Tensor, values: torch.Tensor):
            layer = self.layers[index]
            layer._key_buffer.index_copy_(2, positions, keys)
            layer._value_buffer.index_copy_(2, positions, values)
            return layer._key_buffer, layer._value_buffer

        mask = (self.columns.unsqueeze(0) <= positions.unsqueeze(1)).view(1, 1, ids.shape[1], -1)
        return self.decoder.forward(ids, positions.unsqueeze(0), store, mask, causal=False)

    def _captured(self, new: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        # warm-up on a side stream (allocator pools, kernel choices), then one capture; the warm-up
        # writes where the next call writes, so nothing it leaves is ever read
        ids = torch.zeros(self.batch, new, dtype=torch.long, device=self.device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(ids)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._forward(ids)
        self._graphs[new] = (graph, ids, out)
        return self._graphs[new]

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        length, new = self.layers[0].length, input_ids.shape[1]
        if length + new > self.capacity:
            raise ValueError(f"{new} more tokens do not fit the cache ({length} of {self.capacity} used)")
        self.start.fill_(length)
        if self.graph and new <= self.max_graphed:
            graph, ids, out = self._graphs.get(new) or self._captured(new)
            ids.copy_(input_ids)
            graph.replay()
            hidden = out.clone()  # the next replay overwrites its output
        else:
            hidden = self._forward(input_ids)
        for layer in self.layers:
            layer.length += new
            layer._expose()
        return hidden


def forward_over(bundle, cache, batch: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """New tokens over `cache` (filled by a prefill): CUDA graphs where they apply, else the bundle's
    own forward."""
    layer = cache.layers[0]
    if (bundle.decoder is not None and bundle.device.type == "cuda" and graphs_enabled()
            and getattr(layer, "is_initialized", False) and hasattr(layer, "_key_buffer")):
        return StaticForward(bundle.decoder, cache, batch, graph=True)
    return lambda input_ids: bundle.hidden_states(input_ids, cache)
