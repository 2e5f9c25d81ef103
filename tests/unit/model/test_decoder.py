"""Carbon Studio's decoder (`model.decoder`) against `transformers`' own forward, the reference: on the
architectures it claims, from a checkpoint's files and from a model already built, and on every shape the
project knows; what it does not compute falls back to `transformers`, loudly."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from transformers import (
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from carbon_app.inference.generate import generate
from carbon_app.model.checkpoint import TransformersDecoder, decoder_of, load_decoder, transformers_model
from carbon_app.model.decoder import Decoder
from carbon_app.model.kv import preallocated_cache
from carbon_app.model.manager import ModelManager

SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500_000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
ARCHITECTURES = {
    "llama-gqa": lambda: LlamaForCausalLM(LlamaConfig(**SMALL, rope_theta=5_000_000.0)),
    "llama-biases-llama3-rope": lambda: LlamaForCausalLM(LlamaConfig(**SMALL, attention_bias=True, mlp_bias=True,
                                                                     rope_parameters=LLAMA3_ROPE)),
    "llama-head-dim-48": lambda: LlamaForCausalLM(LlamaConfig(**SMALL, head_dim=48)),
    "qwen2-qkv-bias": lambda: Qwen2ForCausalLM(Qwen2Config(**SMALL)),
}


def _reference_and_lean(make):
    """(the reference, the model our decoder was made from, sharing its weights, our decoder)."""
    torch.manual_seed(0)
    model = make().eval()
    reference = copy.deepcopy(model)
    lean = decoder_of(model)
    assert isinstance(lean, Decoder), lean.name
    return reference, model, lean


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("made_from", ["checkpoint files", "a built model"])
@torch.inference_mode()
def test_our_forward_equals_transformers_through_prefill_steps_batches_and_verifies(architecture, made_from,
                                                                                  tmp_path):
    reference, model, lean = _reference_and_lean(ARCHITECTURES[architecture])
    if made_from == "checkpoint files":  # as the engine loads a model: config.json and safetensors, by name
        reference.save_pretrained(tmp_path)
        lean = load_decoder(tmp_path, torch.device("cpu"), torch.float32)
        assert isinstance(lean, Decoder) and lean.config.architecture == type(reference).__name__
    prompt = torch.randint(0, 300, (1, 11))

    def hf(ids, cache=None):
        return reference.model(input_ids=ids, past_key_values=cache, use_cache=cache is not None).last_hidden_state

    torch.testing.assert_close(lean(prompt), hf(prompt), rtol=0, atol=1e-5)  # no cache
    for make_cache in (lambda: preallocated_cache(reference.config, 40), lambda: DynamicCache(config=reference.config)):
        ours, theirs = make_cache(), make_cache()
        torch.testing.assert_close(lean(prompt, ours), hf(prompt, theirs), rtol=0, atol=1e-5)
        ours.batch_repeat_interleave(3)
        theirs.batch_repeat_interleave(3)
        for _ in range(3):  # single-token steps of three samples
            step = torch.randint(0, 300, (3, 1))
            torch.testing.assert_close(lean(step, ours), hf(step, theirs), rtol=0, atol=1e-5)
        verify = torch.randint(0, 300, (3, 5))  # several new tokens after a history: the offset causal mask
        torch.testing.assert_close(lean(verify, ours), hf(verify, theirs), rtol=0, atol=1e-5)
        ours.crop(-2)
        theirs.crop(-2)
        step = torch.randint(0, 300, (3, 1))
        torch.testing.assert_close(lean(step, ours), hf(step, theirs), rtol=0, atol=1e-5)
        assert ours.get_seq_length() == theirs.get_seq_length() == 11 + 3 + 5 - 2 + 1


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@torch.inference_mode()
def test_branches_read_side_by_side_equal_each_branch_read_alone_by_transformers(architecture):
    """A scan's substitutions: several continuations of each of some cache rows, cut before their token, read
    in one pass (`continuations`); each must be what transformers computes for it alone after its row's prefix,
    and the cache is left as it was."""
    reference, _, lean = _reference_and_lean(ARCHITECTURES[architecture])
    windows = torch.randint(0, 300, (3, 12))
    ours, theirs = preallocated_cache(reference.config, 12), preallocated_cache(reference.config, 12)
    lean(windows, ours)
    reference.model(input_ids=windows, past_key_values=theirs, use_cache=True)
    rows, branches = torch.tensor([2, 0, 2]), torch.randint(0, 300, (3, 4, 3))  # row 2 twice: two units of it
    got = lean.continuations(ours, 7, rows, branches)
    fallback = TransformersDecoder(reference).continuations(theirs, 7, rows, branches)
    assert got.shape == fallback.shape == (3, 4, 3, 64)
    for i, row in enumerate(rows.tolist()):
        for j in range(4):
            alone = preallocated_cache(reference.config, 10)
            reference.model(input_ids=windows[row : row + 1, :7], past_key_values=alone, use_cache=True)
            want = reference.model(input_ids=branches[i, j][None], past_key_values=alone,
                                   use_cache=True).last_hidden_state[0]
            torch.testing.assert_close(got[i, j], want, rtol=0, atol=1e-5)
            torch.testing.assert_close(fallback[i, j], want, rtol=0, atol=1e-5)
    assert ours.get_seq_length() == 12 and theirs.get_seq_length() == 12


@torch.inference_mode()
def test_our_forward_in_bfloat16_follows_transformers(tmp_path):
    """bf16, as on a GPU: RMSNorm statistics in float32, everything else in bf16, like transformers; the
    weights cast as they are read from the file."""
    reference, _, _ = _reference_and_lean(ARCHITECTURES["llama-gqa"])
    reference.save_pretrained(tmp_path)
    # loaded in bf16 as `from_pretrained` loads it, which keeps the rotary frequencies in float32 (a model
    # cast with `.to(bfloat16)` rounds them too)
    reference = transformers_model(tmp_path, torch.device("cpu"), torch.bfloat16)
    lean = load_decoder(tmp_path, torch.device("cpu"), torch.bfloat16)
    prompt, step = torch.randint(0, 300, (1, 11)), torch.randint(0, 300, (1, 1))
    ours, theirs = preallocated_cache(reference.config, 20), preallocated_cache(reference.config, 20)
    for ids in (prompt, step, step):
        got = lean(ids, ours)
        want = reference.model(input_ids=ids, past_key_values=theirs, use_cache=True).last_hidden_state
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)


@pytest.mark.gpu
@pytest.mark.parametrize("architecture", ["llama-gqa", "qwen2-qkv-bias"])
@torch.inference_mode()
def test_our_forward_in_bfloat16_on_cuda_follows_transformers_through_steps_verifies_and_crops(architecture):
    """On the GPU in bf16 both forwards run CUDA kernels (SDPA picks flash or memory-efficient attention
    for each), so they agree to bf16's precision, not bit for bit: 0.03 relative and absolute on hidden
    states of order 1 (bf16 keeps 8 bits of mantissa, ~0.4%; three layers and two attention kernels)."""
    reference, model, _ = _reference_and_lean(ARCHITECTURES[architecture])
    reference, model = reference.to("cuda", torch.bfloat16), model.to("cuda", torch.bfloat16)
    lean = decoder_of(model)
    ours, theirs = preallocated_cache(reference.config, 40), preallocated_cache(reference.config, 40)

    def both(ids):
        got = lean(ids, ours)
        want = reference.model(input_ids=ids, past_key_values=theirs, use_cache=True).last_hidden_state
        assert got.device.type == "cuda" and got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want.float(), rtol=0.03, atol=0.03)

    both(torch.randint(0, 300, (1, 11), device="cuda"))  # prefill
    ours.batch_repeat_interleave(3)
    theirs.batch_repeat_interleave(3)
    for _ in range(3):  # batched single-token steps
        both(torch.randint(0, 300, (3, 1), device="cuda"))
    both(torch.randint(0, 300, (3, 5), device="cuda"))  # a speculative verify over a history
    ours.crop(-2)
    theirs.crop(-2)
    both(torch.randint(0, 300, (3, 1), device="cuda"))
    assert ours.get_seq_length() == theirs.get_seq_length() == 11 + 3 + 5 - 2 + 1


@pytest.mark.gpu
@torch.inference_mode()
def test_the_graphed_compiled_step_in_bfloat16_on_cuda_is_as_close_to_float32_as_transformers_bfloat16():
    """What a GPU decode step runs (the shape-static forward, each layer compiled, replayed as CUDA
    graphs) in bf16, through steps, verifies and crops, against `transformers` in float32: no further from
    it than `transformers`' own bf16 forward (mean error within 1.5x of its, largest within 2x). Compiled
    kernels keep intermediates in float32 where the eager ones round to bf16, so the two bf16 forwards
    differ from each other by a bf16 step here and there and cannot be held to each other's values."""
    from carbon_app.model.graphs import StaticForward

    truth, model, _ = _reference_and_lean(ARCHITECTURES["llama-gqa"])
    half = copy.deepcopy(truth).to("cuda", torch.bfloat16)
    truth, model = truth.to("cuda"), model.to("cuda", torch.bfloat16)
    lean = decoder_of(model)
    caches = [preallocated_cache(truth.config, 40) for _ in range(3)]
    ours, theirs, exact = caches
    prompt = torch.randint(0, 300, (1, 11), device="cuda")
    lean(prompt, ours)
    half.model(input_ids=prompt, past_key_values=theirs, use_cache=True)
    truth.model(input_ids=prompt, past_key_values=exact, use_cache=True)
    for cache in caches:
        cache.batch_repeat_interleave(2)
    forward = StaticForward(lean, ours, batch=2, graph=True, compiled=True)
    errors = {"ours": [], "transformers": []}
    for new, back in [(1, 0), (1, 0), (5, 3), (1, 0), (4, 0), (1, 2), (1, 0)]:
        ids = torch.randint(0, 300, (2, new), device="cuda")
        want = truth.model(input_ids=ids, past_key_values=exact, use_cache=True).last_hidden_state
        errors["ours"].append((forward(ids).float() - want).abs())
        their = half.model(input_ids=ids, past_key_values=theirs, use_cache=True).last_hidden_state
        errors["transformers"].append((their.float() - want).abs())
        if back:
            for cache in caches:
                cache.crop(-back)
    ours_error, their_error = (torch.cat([e.flatten() for e in errors[k]]) for k in ("ours", "transformers"))
    assert their_error.mean() > 0  # bf16 does round: the comparison means something
    assert ours_error.mean() <= 1.5 * their_error.mean(), (ours_error.mean(), their_error.mean())
    assert ours_error.max() <= 2 * their_error.max(), (ours_error.max(), their_error.max())
    assert set(forward.pool.graphs) == {1, 4, 5}


@torch.inference_mode()
def test_a_decoder_made_from_a_built_model_shares_its_weights_and_leaves_it_working():
    reference, model, lean = _reference_and_lean(ARCHITECTURES["llama-gqa"])
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    assert sum(storages.values()) == sum(p.numel() * p.element_size() for p in reference.parameters())
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight.untyped_storage().data_ptr() == lean.layers[0].qkv.untyped_storage().data_ptr()
    assert lean.n_parameters == sum(p.numel() for p in reference.parameters())
    ids = torch.randint(0, 300, (2, 9))
    torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids[:1], **kwargs), reference.generate(ids[:1], **kwargs))


#: What this module does not compute, each saved as a checkpoint: what its fallback names.
UNCOVERED = {
    "q/k norms (Qwen3)": (lambda: Qwen3ForCausalLM(Qwen3Config(**SMALL)), "architecture Qwen3ForCausalLM"),
    "sliding layers": (lambda: LlamaForCausalLM(LlamaConfig(**SMALL, layer_types=["sliding_attention"] * 3,
                                                            sliding_window=16)),
                       "sliding-window attention"),
    "YaRN": (lambda: LlamaForCausalLM(LlamaConfig(**SMALL, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10_000.0, "factor": 4.0, "original_max_position_embeddings": 64})),
             "RoPE scaling 'yarn'"),
    "a v bias alone": (lambda: _with_v_bias(LlamaForCausalLM(LlamaConfig(**SMALL))), "biases on some of"),
    "gelu": (lambda: LlamaForCausalLM(LlamaConfig(**SMALL, hidden_act="gelu")), "activation gelu"),
}


def _with_v_bias(model):
    model.model.layers[1].self_attn.v_proj.bias = torch.nn.Parameter(torch.zeros(32))
    return model


@pytest.mark.parametrize("case", sorted(UNCOVERED))
@torch.inference_mode()
def test_what_our_decoder_does_not_compute_runs_on_transformers_and_says_so(case, tmp_path, caplog):
    make, named = UNCOVERED[case]
    torch.manual_seed(0)
    model = make().eval()
    model.save_pretrained(tmp_path)
    with caplog.at_level("WARNING", logger="carbon_app"):
        loaded = load_decoder(tmp_path, torch.device("cpu"), torch.float32)
    assert isinstance(loaded, TransformersDecoder) and named in loaded.reason and not loaded.static
    assert f"runs on transformers' forward, not Carbon Studio's decoder, which does not compute {named}" in caplog.text
    assert named in loaded.name  # /models and the Models tab show it
    ids = torch.randint(0, 300, (1, 7))
    torch.testing.assert_close(loaded(ids), model.model(input_ids=ids).last_hidden_state, rtol=0, atol=0)


def test_every_carbon_shape_runs_on_our_decoder_and_its_logits_are_transformers(demo, carbon, compact):
    """The bundled models, the released 155,776-id layout and every Carbon shape (500M, 3B, 8B, built
    without memory; the narrow 3B heads and the small shape computed): none falls back, and the k-mer
    logits are `transformers`' to float32 precision. A Carbon shape on the fallback fails here."""
    from tests.synthetic import SHAPES, random_model

    bundles = [demo, ModelManager(device="cpu").get("carbon-demo-draft"), carbon, compact]
    for bundle in bundles:
        assert isinstance(bundle.decoder, Decoder) and bundle.describe()["forward"] == "Carbon's own decoder"
    for shape in sorted(SHAPES):  # shapes only: no memory, no arithmetic
        assert isinstance(decoder_of(random_model(shape, 155_776, device="meta")), Decoder), shape
    built = [(random_model(shape, 4_200, seed=3), shape) for shape in ("small", "3B-narrow", "tiny")]
    with torch.inference_mode():
        for bundle in bundles:
            reference = transformers_model(bundle.path, bundle.device, bundle.dtype)
            _assert_same_kmer_logits(bundle.decoder, reference, bundle.tokenizer.kmer_start_id, bundle.k)
        for model, shape in built:
            reference = copy.deepcopy(model)
            lean = decoder_of(model)
            assert isinstance(lean, Decoder), shape
            _assert_same_kmer_logits(lean, reference, 4_200 - 4_096, 6)


def _assert_same_kmer_logits(lean, reference, kmer_start: int, k: int) -> None:
    ids = kmer_start + torch.randint(0, 4 ** k, (2, 40), generator=torch.Generator().manual_seed(1))
    ours = lean(ids) @ lean.output[kmer_start : kmer_start + 4 ** k].T
    theirs = reference(ids).logits[..., kmer_start : kmer_start + 4 ** k]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("options", [
    dict(temperature=0.0),
    dict(temperature=0.9, top_k=50, seed=11, samples=3),
    dict(temperature=0.0, mode="token"),
])
def test_generation_is_the_same_with_our_and_the_transformers_forward(compact, options):
    plain = dataclasses.replace(compact, decoder=TransformersDecoder(
        transformers_model(compact.path, compact.device, compact.dtype)))
    mask = "ACGTRYSWKMBDHVN" * 6 + "NN"
    kwargs = dict(prompt="ACGTTGCAACGTAGCTAGGCTA", n_bases=len(mask), mask=mask, **options)
    assert generate(compact, **kwargs).sequences == generate(plain, **kwargs).sequences


@pytest.mark.parametrize("architecture", ["llama-gqa", "qwen2-qkv-bias"])
@pytest.mark.parametrize("fused_from_rows", [None, 2])
@torch.inference_mode()
def test_the_static_forward_computes_the_plain_steps_verifies_and_crops(architecture, fused_from_rows, monkeypatch):
    """The shape-static forward CUDA graphs replay (run eagerly here): whole-capacity attention under a
    mask of the written positions gives the plain forward's hidden states, for one new token (a decode
    step) and several (a speculative verify), also after steps back; with the attention written out
    and through scaled-dot-product attention (`FUSED_ATTENTION_FROM_ROWS`; these runs have 2 rows)."""
    from carbon_app.model import decoder as decoder_module
    from carbon_app.model.graphs import StaticForward

    monkeypatch.setattr(decoder_module, "FUSED_ATTENTION_FROM_ROWS", fused_from_rows)
    assert (decoder_module.static_attention(2) is decoder_module._fused_attention) == (fused_from_rows is not None)

    reference, _, lean = _reference_and_lean(ARCHITECTURES[architecture])
    prompt = torch.randint(0, 300, (1, 9))
    plain, static = preallocated_cache(reference.config, 40), preallocated_cache(reference.config, 40)
    lean(prompt, plain)
    lean(prompt, static)
    plain.batch_repeat_interleave(2)
    static.batch_repeat_interleave(2)
    for layer in static.layers:  # unwritten memory may hold anything: attention must not read it
        for buffer in layer.buffers:
            buffer[..., layer.length :, :] = float("nan")
    forward = StaticForward(lean, static, batch=2, graph=False)
    for new, back in [(1, 0), (1, 0), (5, 3), (1, 0), (4, 0), (1, 2), (1, 0)]:
        ids = torch.randint(0, 300, (2, new))
        torch.testing.assert_close(forward(ids), lean(ids, plain), rtol=0, atol=1e-5)
        if back:
            plain.crop(-back)
            static.crop(-back)
        assert static.get_seq_length() == plain.get_seq_length()
    with pytest.raises(ValueError, match="rows"):
        StaticForward(lean, static, batch=3, graph=False)
    with pytest.raises(ValueError, match="do not fit"):
        forward(torch.zeros(2, 40, dtype=torch.long))


@pytest.mark.parametrize(("compiled", "fused_from_rows"), [(False, None),
                                                           pytest.param(True, None, marks=pytest.mark.integration),
                                                           pytest.param(True, 1, marks=pytest.mark.integration)])
@torch.inference_mode()
def test_a_kept_graph_pool_serves_the_next_run_and_the_compiled_layers_compute_the_same(compiled, fused_from_rows,
                                                                                       monkeypatch):
    """A pool's buffers outlive the run that made them: the next run, with another prompt of another
    length, copies its own keys and values in (and nothing of the last run stays readable) and steps
    exactly as the plain forward does. `compiled` runs the compiled layer (inductor's CPU kernels
    here; a GPU's graphs replay them), which reorder float sums: equal to 1e-5; with either attention."""
    from carbon_app.model import decoder as decoder_module
    from carbon_app.model.graphs import GraphPool, StaticForward, pool_capacity

    monkeypatch.setattr(decoder_module, "FUSED_ATTENTION_FROM_ROWS", fused_from_rows)

    reference, _, lean = _reference_and_lean(ARCHITECTURES["llama-biases-llama3-rope"])
    pool = None
    for prompt_length, capacity in [(9, 30), (4, 20), (13, 33)]:
        prompt = torch.randint(0, 300, (1, prompt_length))
        plain, static = preallocated_cache(reference.config, capacity), preallocated_cache(reference.config, capacity)
        lean(prompt, plain)
        lean(prompt, static)
        pool = pool or GraphPool.allocate(static, batch=1, capacity=pool_capacity(33))
        assert pool_capacity(33) == 256 and pool.fits(static, 1) and not pool.fits(static, 2)
        forward = StaticForward(lean, static, batch=1, graph=False, pool=pool, compiled=compiled)
        assert pool.in_use and static.layers[0].buffers[0].data_ptr() == pool.keys[0].data_ptr()
        for new in (1, 3, 1):
            ids = torch.randint(0, 300, (1, new))
            torch.testing.assert_close(forward(ids), lean(ids, plain), rtol=0, atol=1e-5)
        del forward
        assert not pool.in_use  # the run is over: the next may take the pool


@torch.inference_mode()
def test_a_model_keeps_small_pools_counted_in_its_memory_and_lends_each_to_one_run_at_a_time(compact_model_dir,
                                                                                           monkeypatch):
    from carbon_app.inference.generate import _prefill
    from carbon_app.model import graphs

    manager = ModelManager(device="cpu")
    bundle = manager.get(str(compact_model_dir))
    free = manager.free_bytes()
    cache, _ = _prefill(bundle, [5, 6, 7], 40, 1)
    pool = graphs._pool_for(bundle, cache, 1)
    assert list(bundle.graph_pools.values()) == [pool] and pool.capacity == graphs.MIN_POOL_CAPACITY
    assert bundle.held_bytes == bundle.n_bytes + pool.n_bytes and manager.free_bytes() == free - pool.n_bytes
    first = graphs.StaticForward(bundle.decoder, cache, 1, graph=False, pool=pool)
    other, _ = _prefill(bundle, [5, 6], 50, 1)
    busy = graphs._pool_for(bundle, other, 1)  # the kept pool is lent out: this run uses its own cache
    assert busy is not pool and busy.keys[0] is other.layers[0].buffers[0] and len(bundle.graph_pools) == 1
    del first
    assert graphs._pool_for(bundle, other, 1) is pool  # returned, and the next run of its size takes it
    monkeypatch.setattr(graphs, "KEPT_POOL_BYTES", pool.n_bytes - 1)
    large, _ = _prefill(bundle, [5], 300, 1)
    assert graphs._pool_for(bundle, large, 1).keys[0] is large.layers[0].buffers[0] and len(bundle.graph_pools) == 1


@torch.inference_mode()
def test_a_step_whose_compiling_fails_runs_uncompiled_with_a_warning(monkeypatch):
    """As on a machine where Triton finds no C compiler: the step still computes, and the process
    stops trying to compile."""
    from carbon_app.model import decoder as decoder_module
    from carbon_app.model import graphs

    def no_compiler():
        def fail(*args):
            raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")
        return fail

    monkeypatch.setattr(decoder_module, "compiled_static_layer", no_compiler)
    monkeypatch.setattr(graphs, "_compile_failure", None)
    reference, _, lean = _reference_and_lean(ARCHITECTURES["llama-gqa"])
    prompt = torch.randint(0, 300, (1, 9))
    plain, static = preallocated_cache(reference.config, 20), preallocated_cache(reference.config, 20)
    lean(prompt, plain)
    lean(prompt, static)
    forward = graphs.StaticForward(lean, static, batch=1, graph=False, compiled=True)
    ids = torch.randint(0, 300, (1, 1))
    with pytest.warns(RuntimeWarning, match="runs uncompiled: RuntimeError: Failed to find C compiler"):
        torch.testing.assert_close(forward(ids), lean(ids, plain), rtol=0, atol=1e-5)
    assert not forward.compiled and not graphs.compile_enabled()


@pytest.mark.gpu
@pytest.mark.parametrize("options", [dict(temperature=0.0, samples=1), dict(temperature=0.8, top_k=40, seed=5,
                                                                           samples=4)])
@pytest.mark.parametrize("fused_from_rows", [None, 1])
def test_cuda_graph_decoding_gives_the_eager_designs(compact_model_dir, options, fused_from_rows, monkeypatch):
    """On a GPU the decode step is a replayed CUDA graph of compiled layers; the designs equal the eager
    forward's, with the static layer's attention written out and through scaled-dot-product attention.
    In fp32, as below: the compiled layers round bf16 differently from the eager ones."""
    from carbon_app.model import decoder as decoder_module
    from carbon_app.model.bundle import load_bundle

    monkeypatch.setattr(decoder_module, "FUSED_ATTENTION_FROM_ROWS", fused_from_rows)
    bundle = load_bundle(str(compact_model_dir), device="cuda", dtype=torch.float32)
    kwargs = dict(prompt="ACGTTGCAACGTAGCTAGGCTA", n_bases=300, **options)
    graphed = generate(bundle, **kwargs).sequences
    monkeypatch.setenv("CARBON_CUDA_GRAPHS", "0")
    assert generate(bundle, **kwargs).sequences == graphed


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["bp", "token"])
def test_cuda_graph_speculative_decoding_gives_the_eager_designs(compact_model_dir, mode, monkeypatch):
    """The target's verify passes and the draft's steps replay graphs too; greedy stays the target's.
    In fp32: the graph's masked attention and the eager steps' unmasked one are different kernels, and
    in bf16 their rounding differs enough to flip near-tied greedy choices (seen on an H100)."""
    from carbon_app.model.bundle import load_bundle

    target = load_bundle(str(compact_model_dir), device="cuda", dtype=torch.float32)
    draft = load_bundle(str(compact_model_dir), device="cuda", dtype=torch.float32)
    kwargs = dict(prompt="ACGTTGCAACGTAGCTAGGCTA", n_bases=300, mode=mode, temperature=0, draft=draft,
                  draft_always=True)
    graphed = generate(target, **kwargs).sequences
    monkeypatch.setenv("CARBON_CUDA_GRAPHS", "0")
    assert generate(target, **kwargs).sequences == graphed == generate(target, **dict(kwargs, draft=None)).sequences
