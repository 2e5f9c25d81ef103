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
decoder of our own, `CARBON_CUDA_GRAPHS` not 0) and the plain forward elsewhere.
Several new tokens at once (a speculative verify) work the same way, with a
mask per new token; each count gets its own graph. On a GPU the graphed step
runs the decoder's compiled layer (`decoder.compiled_static_layer`;
`CARBON_COMPILE=0` keeps it eager). The static forward also runs without a
graph, which is how a CPU tests it.

Capturing costs a few steps' time per token count, so the buffers and the
graphs over them outlive a run: each model keeps a few `GraphPool`s, one per
(rows, capacity rounded up to a power of two), and the next run of that size
copies its prompt's keys and values in and replays. Pools are kept only while
small (`KEPT_POOL_BYTES`), and the memory budget counts them (`held_bytes`);
a larger run's graphs read its own cache and go with it.
"""

from __future__ import annotations

import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable

import torch

from .. import settings
from .decoder import Decoder
from .kv import is_preallocated

#: A pool is kept for later runs only up to this size (its KV buffers; a graph's own memory is small), and a
#: model keeps at most `KEPT_POOLS`: batch-1 designs, scores' steps and a draft's rounds stay captured,
#: while a 64-sample design over a long context frees its buffers when it ends.
KEPT_POOL_BYTES = 512 * 2**20
KEPT_POOLS = 4
MIN_POOL_CAPACITY = 256
#: The most new tokens a step replays as a graph (one graph per count); a longer one (a draft catching up
#: after the target ran alone) runs the same static forward without one.
MAX_GRAPHED_TOKENS = 16


def graphs_enabled() -> bool:
    return settings.get("CARBON_CUDA_GRAPHS")


_compile_failure: str | None = None  # why compiling failed in this process, if it did: then it is not tried again


def compile_enabled() -> bool:
    return settings.get("CARBON_COMPILE") and _compile_failure is None


class GraphPool:
    """Fixed KV buffers (per layer, [batch, kv heads, capacity, head dim]) with the graphs captured over
    them: `allocate` new ones to keep for later runs, or `adopt` a cache's own for one run."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys, self.values = keys, values
        self.batch, self.capacity, self.device = keys[0].shape[0], keys[0].shape[-2], keys[0].device
        self.start = torch.zeros(1, dtype=torch.long, device=self.device)  # where the new tokens go
        self.columns = torch.arange(self.capacity, device=self.device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.in_use = False

    @classmethod
    def allocate(cls, cache, batch: int, capacity: int) -> GraphPool:
        def like(buffer: torch.Tensor) -> torch.Tensor:
            return buffer.new_zeros((batch, *buffer.shape[1:-2], capacity, buffer.shape[-1]))

        return cls([like(layer.buffers[0]) for layer in cache.layers],
                   [like(layer.buffers[1]) for layer in cache.layers])

    @classmethod
    def adopt(cls, cache) -> GraphPool:
        """The cache's own buffers: no copy and no memory beyond what the run was budgeted for."""
        return cls([layer.buffers[0] for layer in cache.layers], [layer.buffers[1] for layer in cache.layers])

    @property
    def n_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def fits(self, cache, batch: int) -> bool:
        keys = cache.layers[0].buffers[0]
        return (batch == self.batch and keys.shape[-2] <= self.capacity
                and keys.dtype == self.keys[0].dtype and keys.device == self.device)


def pool_capacity(capacity: int) -> int:
    """The capacity a pool is built with: a power of two, so runs of similar lengths share one."""
    return max(MIN_POOL_CAPACITY, 1 << (capacity - 1).bit_length())


class StaticForward:
    """New tokens for every row over a preallocated cache (`kv.preallocated_cache`, already filled by a
    prefill): call it with ids [batch, new] for the hidden states [batch, new, hidden]; the cache grows
    by `new`. One token is a decode step, several a speculative verify (or a draft catching up); each
    count gets its own graph, captured at first use. Steps back (`cache.crop`) are fine: the next call
    writes where the cache now ends. The cache's layers are moved onto `pool`'s buffers (a pool of
    their own size when none is given), so the graphs read what the cache holds."""

    def __init__(self, decoder: Decoder, cache, batch: int, graph: bool, max_graphed: int = MAX_GRAPHED_TOKENS,
                 pool: GraphPool | None = None, compiled: bool = False):
        self.decoder, self.layers = decoder, cache.layers
        if self.layers[0].rows != batch:
            raise ValueError(f"the cache holds {self.layers[0].rows} rows, not {batch}")
        self.pool = pool or GraphPool.adopt(cache)
        self.pool.in_use = True
        weakref.finalize(self, setattr, self.pool, "in_use", False)
        for layer, keys, values in zip(self.layers, self.pool.keys, self.pool.values, strict=True):
            layer.move_to(keys, values)  # a kept pool: the prompt's keys and values move in
        self.capacity, self.device = self.pool.capacity, self.pool.device
        self.batch, self.graph, self.max_graphed, self.compiled = batch, graph, max_graphed, compiled

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        pool = self.pool
        positions = pool.start + torch.arange(ids.shape[1], device=self.device)
        mask = pool.columns.unsqueeze(0) <= positions.unsqueeze(1)  # [new, capacity]: what each new token sees
        return self.decoder.static_forward(ids, positions, pool.keys, pool.values, mask, compiled=self.compiled)

    def _first_forward(self, ids: torch.Tensor) -> torch.Tensor:
        """`_forward`, where the compiled layers are first called: should compiling fail (a machine
        without the C compiler Triton needs, say), the step runs uncompiled, here and from then on."""
        global _compile_failure
        try:
            return self._forward(ids)
        except Exception as error:  # noqa: BLE001 (re-raised unless the compiled layer was running)
            if not self.compiled:
                raise
            _compile_failure = f"{type(error).__name__}: {error}"[:500]
            warnings.warn(f"compiling the decode step failed, so it runs uncompiled: {_compile_failure}",
                          RuntimeWarning, stacklevel=2)
            self.compiled = False
            return self._forward(ids)

    def _captured(self, new: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        # warm-up on a side stream (allocator pools, kernel choices, compilation), then one capture; the
        # warm-up writes where the next call writes, so nothing it leaves is ever read
        ids = torch.zeros(self.batch, new, dtype=torch.long, device=self.device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._first_forward(ids)
            self._forward(ids)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._forward(ids)
        self.pool.graphs[new] = (graph, ids, out)
        return self.pool.graphs[new]

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        length, new = self.layers[0].length, input_ids.shape[1]
        if length + new > self.capacity:
            raise ValueError(f"{new} more tokens do not fit the cache ({length} of {self.capacity} used)")
        self.pool.start.fill_(length)
        if self.graph and new <= self.max_graphed:
            graph, ids, out = self.pool.graphs.get(new) or self._captured(new)
            ids.copy_(input_ids)
            graph.replay()
            hidden = out.clone()  # the next replay overwrites its output
        else:
            hidden = self._first_forward(input_ids)
        for layer in self.layers:
            layer.advance(new)
        return hidden


def _pool_for(bundle, cache, batch: int) -> GraphPool:
    """A kept pool that fits this run and is free; else a new one to keep, if one of this size may be
    kept; else the cache's own buffers, for this run only."""
    pools: OrderedDict = bundle.graph_pools
    capacity = pool_capacity(cache.layers[0].room)
    key = (batch, capacity)
    pool = pools.get(key)
    if pool is not None and not pool.in_use and pool.fits(cache, batch):
        pools.move_to_end(key)
        return pool
    per_position = sum(layer.bytes_per_position for layer in cache.layers)
    if per_position * capacity > KEPT_POOL_BYTES or key in pools:  # too large to keep, or the kept one is busy
        return GraphPool.adopt(cache)
    pools[key] = pool = GraphPool.allocate(cache, batch, capacity)
    while len(pools) > KEPT_POOLS:
        pools.popitem(last=False)
    return pool


def forward_over(bundle, cache, batch: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """New tokens over `cache` (filled by a prefill): CUDA graphs where they apply, else the bundle's
    own forward."""
    if bundle.decoder.static and bundle.device.type == "cuda" and graphs_enabled() and is_preallocated(cache):
        return StaticForward(bundle.decoder, cache, batch, graph=True, pool=_pool_for(bundle, cache, batch),
                             compiled=compile_enabled())
    return lambda input_ids: bundle.hidden_states(input_ids, cache)
