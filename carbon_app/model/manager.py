"""The model cache: loaded bundles kept within a memory budget, and running out of memory as a message.

`ModelManager` hands out loaded `ModelBundle`s, keeps the most recently used
ones within a memory budget (GPU memory on a GPU), loads each model once even
when many requests ask for it at the same moment, and never runs remote code
unless it was created with `trust_remote_code=True`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import torch

from .. import settings
from ..errors import ModelError
from .bundle import ModelBundle, default_device, default_dtype, load_bundle, weights_bytes
from .hub import default_model_name, draft_for, looks_like_hub_id, resolve_model_dir


@contextmanager
def out_of_memory_as_error(what: str) -> Iterator[None]:
    """Turn running out of memory inside the block into a ModelError that says what to do.

    The failed request's tensors are freed when the error leaves the block (the
    original traceback, which holds them, is dropped), so the models that are
    loaded stay loaded and keep working.
    """
    try:
        yield
    except RuntimeError as exc:  # CUDA raises torch.OutOfMemoryError (a RuntimeError), the CPU allocator says so
        if not (isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)
                or "out of memory" in str(exc)):
            raise
        device = "GPU" if isinstance(exc, torch.OutOfMemoryError) else "machine"
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise ModelError(f"the {device} ran out of memory during {what}; the loaded models still work: ask for "
                         "fewer samples, fewer bases or a shorter window") from None


def _default_budget(device: torch.device) -> int:
    configured = settings.get("CARBON_MEMORY_BUDGET_GB")
    if configured:
        return int(configured * 2**30)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory * 0.85)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.5)


class ModelManager:
    """Loaded models, least recently used first out, safe to share between threads."""

    def __init__(
        self,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        fp32_head: bool = True,
        memory_budget_bytes: int | None = None,
        trust_remote_code: bool = False,
    ):
        self.device = torch.device(device) if device is not None else default_device()
        self.dtype = dtype or default_dtype(self.device)
        self.fp32_head = fp32_head
        self.trust_remote_code = trust_remote_code
        self.memory_budget_bytes = memory_budget_bytes or _default_budget(self.device)
        self._cache: OrderedDict[str, ModelBundle] = OrderedDict()
        self._loading: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.loads = 0  # how many times a model was actually read from disk

    def get(self, name: str | None = None) -> ModelBundle:
        """The loaded model `name` (default: the configured or bundled one)."""
        name = (name or default_model_name()).strip()
        with self._lock:
            if name in self._cache:
                self._cache.move_to_end(name)
                return self._cache[name]
            future = self._loading.get(name)
            owner = future is None
            if owner:
                future = self._loading[name] = Future()
        if not owner:
            return future.result()  # another request is loading it: wait, share its result or error
        try:
            bundle = self._load(name)
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._loading.pop(name, None)
        future.set_result(bundle)
        return bundle

    def _load(self, name: str) -> ModelBundle:
        needed = weights_bytes(resolve_model_dir(name), self.dtype)
        if needed > self.memory_budget_bytes:
            raise ModelError(
                f"model '{name}' needs about {needed / 2**30:.2f} GiB, more than the "
                f"{self.memory_budget_bytes / 2**30:.2f} GiB memory budget"
            )
        with self._lock:
            self._evict_until_free(needed)
        bundle = load_bundle(name, self.device, self.dtype, self.fp32_head, self.trust_remote_code)
        self.loads += 1
        bundle.memory.free = self.free_bytes
        with self._lock:
            self._evict_until_free(bundle.n_bytes)
            self._cache[name] = bundle
        return bundle

    def _evict_until_free(self, needed: int) -> None:
        evicted = False
        while self._cache and self.used_bytes() + needed > self.memory_budget_bytes:
            self._cache.popitem(last=False)
            evicted = True
        if evicted and self.device.type == "cuda":
            torch.cuda.empty_cache()

    def used_bytes(self) -> int:
        return sum(b.held_bytes for b in self._cache.values())

    def free_bytes(self) -> int:
        """What the budget leaves for requests beside the loaded weights (and the buffers kept with them)."""
        with self._lock:
            return self.memory_budget_bytes - self.used_bytes()

    def loaded(self) -> list[dict]:
        with self._lock:
            return [b.describe() for b in self._cache.values()]

    def unload(self, name: str) -> bool:
        with self._lock:
            removed = self._cache.pop(name, None) is not None
        if removed and self.device.type == "cuda":
            torch.cuda.empty_cache()
        return removed

    def draft_for(self, name: str | None = None) -> str | None:
        name = name or default_model_name()
        with self._lock:
            if name in self._cache:
                return self._cache[name].draft
        return draft_for(name, resolve_model_dir(name) if not looks_like_hub_id(name) else None)
