"""The preallocated KV cache gives the model exactly what transformers' DynamicCache gives it."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from carbon_app.model.kv import preallocated_cache


def test_same_hidden_states_through_prefill_steps_growth_crop_and_batch_repeat(compact):
    config, start = compact.decoder.config, compact.tokenizer.kmer_start_id
    generator = torch.Generator().manual_seed(0)
    prompt = start + torch.randint(0, 4096, (1, 9), generator=generator)
    steps = start + torch.randint(0, 4096, (3, 12), generator=generator)
    caches = [DynamicCache(), preallocated_cache(config, capacity=12)]  # too small: must grow
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


def test_a_layer_moved_onto_other_buffers_keeps_what_is_written_and_zeroes_the_rest():
    """The interface a static step writes through: `move_to` copies the written part into buffers of
    another size and zeroes the unwritten (NaN there would poison masked attention); `advance` counts
    positions someone else wrote and refuses more than the buffers hold."""
    from carbon_app.model.kv import PreallocatedLayer, is_preallocated

    layer = PreallocatedLayer(capacity=6)
    assert not is_preallocated(DynamicCache()) and not layer.is_initialized
    keys, values = torch.randn(2, 1, 4, 3), torch.randn(2, 1, 4, 3)
    layer.update(keys, values)
    assert (layer.rows, layer.room, layer.length) == (2, 6, 4)
    assert layer.bytes_per_position == 2 * 2 * 1 * 3 * 4
    target = [torch.full((2, 1, 10, 3), float("nan")) for _ in range(2)]
    layer.move_to(*target)
    assert layer.buffers[0] is target[0] and layer.room == 10
    torch.testing.assert_close(layer.keys, keys, rtol=0, atol=0)
    torch.testing.assert_close(layer.values, values, rtol=0, atol=0)
    assert not target[0][..., 4:, :].any() and not target[1][..., 4:, :].isnan().any()
    target[0][..., 4:6, :] = 1.0
    layer.advance(2)
    assert layer.keys.shape[-2] == 6 and (layer.keys[..., 4:, :] == 1).all()
    with pytest.raises(ValueError, match="do not fit"):
        layer.advance(5)
    layer.move_to(*layer.buffers)  # its own buffers: the written part stays, nothing is copied
    assert layer.length == 6 and (layer.keys[..., 4:, :] == 1).all()
