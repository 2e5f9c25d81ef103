"""The preallocated KV cache gives the model exactly what transformers' DynamicCache gives it."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from carbon_app.model.kv import preallocated_cache


def test_same_hidden_states_through_prefill_steps_growth_crop_and_batch_repeat(compact):
    config, start = compact.model.config, compact.tokenizer.kmer_start_id
    generator = torch.Generator().manual_seed(0)
    prompt = start + torch.randint(0, 4096, (1, 9), generator=generator)
    steps = start + torch.randint(0, 4096, (3, 12), generator=generator)
    caches = [DynamicCache(config=config), preallocated_cache(config, capacity=12)]  # too small: must grow
    outputs = [[] for _ in caches]
    with torch.inference_mode():
        for cache, out in zip(caches, outputs, strict=True):
            out.append(compact.hidden_states(prompt, cache))
            cache.batch_repeat_interleave(3)
            for i in range(0, 12, 3):
                out.append(compact.hidden_states(steps[:, i : i + 3], cache))
                cache.crop(-1)  # as a speculative round that keeps all but its last token
            assert cache.get_seq_length() == 9 + 4 * 2
    for a, b in zip(*outputs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
