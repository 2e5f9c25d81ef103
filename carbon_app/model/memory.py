"""A model's working memory: what a request needs beside the weights, checked against the budget
before any work starts.

The sizes come from the decoder's config (layers, heads, widths) and the weights' dtype; the budget is
the model manager's (`CARBON_MEMORY_BUDGET_GB` less every loaded model), asked at each check because
other models load and unload in between.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import ModelError


class WorkingMemory:
    """Byte counts for one loaded decoder, and (once a manager holds it) the budget they must fit."""

    def __init__(self, config, dtype: torch.dtype, n_kmers: int):
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        size = torch.tensor([], dtype=dtype).element_size()
        self.per_kv_token = 2 * config.num_hidden_layers * kv_heads * head_dim * size
        self.per_forward_token = (4 * config.hidden_size + 3 * config.intermediate_size) * size
        self.per_scored_token = n_kmers * 4 * 2  # fp32 k-mer log-probs with their logits
        self.free: Callable[[], int] | None = None  # bytes the manager's budget leaves for requests

    def bytes_for(self, kv_tokens: int, forward_tokens: int, scored_tokens: int) -> int:
        """About the memory a request needs beside the weights: keys and values for `kv_tokens` (summed
        over rows), one layer's activations for the `forward_tokens` of its largest forward pass, and
        fp32 k-mer log-probs (with their logits) for `scored_tokens` positions."""
        return (kv_tokens * self.per_kv_token + forward_tokens * self.per_forward_token
                + scored_tokens * self.per_scored_token)

    def check(self, kv_tokens: int, forward_tokens: int, scored_tokens: int, what: str) -> None:
        """Refuse, before any work, a request that cannot fit in the memory budget (none: no bound)."""
        if self.free is None:
            return
        needed, free = self.bytes_for(kv_tokens, forward_tokens, scored_tokens), self.free()
        if needed > free:
            raise ModelError(
                f"{what} needs about {needed / 2**20:,.0f} MiB of working memory beside the model weights, "
                f"but the memory budget (CARBON_MEMORY_BUDGET_GB) leaves {max(free, 0) / 2**20:,.0f} MiB: ask for "
                "fewer samples, fewer bases or a shorter window")
