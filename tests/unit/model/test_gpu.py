"""The engine on a CUDA device (skipped where there is none: CI never has one).

Tolerances: bf16 carries 8 bits of mantissa, so bf16-against-fp32 figures are
compared to 0.1 nats per base (a base's log-probability, typically -1.4);
exact identities (greedy against stock `generate`, speculative greedy against
the target alone) are checked in fp32 on the GPU, where both sides run the same
kernels in the same order of operations.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from carbon_app.app.service import AppConfig, Service
from carbon_app.core.dna import IUPAC
from carbon_app.core.tokens import dna_prompt
from carbon_app.errors import ModelError
from carbon_app.inference.generate import generate
from carbon_app.inference.sampling import DnaLogitsProcessor, SamplingParams
from carbon_app.inference.score import score_sequence
from carbon_app.model.bundle import load_bundle
from carbon_app.model.checkpoint import transformers_model
from carbon_app.model.manager import ModelManager

pytestmark = pytest.mark.gpu

SEQUENCE = "ATGGTGCACCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTGGATGAAGTTGGTGGTGAGGCCCTGGGCAGG" * 4


@pytest.fixture(scope="module")
def on_gpu(compact_model_dir):
    return load_bundle(str(compact_model_dir), device=torch.device("cuda"), dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def on_gpu_fp32(compact_model_dir):
    return load_bundle(str(compact_model_dir), device=torch.device("cuda"), dtype=torch.float32)


def test_fns_marginals_in_bf16_on_the_gpu_follow_fp32_on_the_cpu(on_gpu, compact_model_dir):
    """The GPU's bf16 path adds no error beyond bf16's own: against CPU fp32, its per-base log-probs
    stray no more than the same model in bf16 on the CPU does (x1.5 and 0.02 nats for the kernels' other
    summation order). The compact model's large random weights give peaked, large logits, where bf16's
    8-bit mantissa costs more than on a trained model's."""
    on_cpu = load_bundle(str(compact_model_dir), device=torch.device("cpu"), dtype=torch.float32)
    cpu_bf16 = load_bundle(str(compact_model_dir), device=torch.device("cpu"), dtype=torch.bfloat16)
    assert on_gpu.dna_head.dtype == cpu_bf16.dna_head.dtype == torch.float32  # the k-mer head stays fp32
    gpu, cpu, bf16 = (score_sequence(b, SEQUENCE) for b in (on_gpu, on_cpu, cpu_bf16))
    gpu_error, bf16_error = np.abs(gpu.logprobs - cpu.logprobs), np.abs(bf16.logprobs - cpu.logprobs)
    print(f"|log p| error against CPU fp32, mean/max: GPU bf16 {gpu_error.mean():.4f}/{gpu_error.max():.4f}, "
          f"CPU bf16 {bf16_error.mean():.4f}/{bf16_error.max():.4f}")
    assert gpu_error.mean() <= 1.5 * bf16_error.mean() + 0.02 and gpu_error.max() <= 1.5 * bf16_error.max() + 0.02
    assert np.abs(gpu.probs - cpu.probs).mean() < 0.02


@pytest.mark.parametrize("mode", ["bp", "token"])
def test_exact_base_counts_masks_and_seeds_on_the_gpu(on_gpu, mode):
    mask = "ACGTRYSWKMBDHVN" * 7 + "NNNNN"  # 110 bases: not a whole number of 6-mers
    runs = [generate(on_gpu, "ACGTTGCA", len(mask), mask=mask, mode=mode, temperature=0.9, seed=17, samples=3)
            for _ in range(2)]
    assert runs[0].sequences == runs[1].sequences
    for design in runs[0].sequences:
        assert len(design) == len(mask)
        assert all(base in IUPAC[code] for base, code in zip(design, mask, strict=True))


@pytest.mark.parametrize("mode", ["bp", "token"])
def test_decode_steps_never_make_the_host_wait_for_the_gpu(on_gpu, mode):
    """The host queues token after token while the GPU works, so its own time per token hides behind the
    GPU's: no step reads a GPU value back (torch's sync debug mode raises at any call that would wait),
    sampling, masks and the per-base marginals a design reports included."""
    from carbon_app.inference.generate import decode_kmers, plan_generation
    from carbon_app.inference.marginals import log_marginals
    from carbon_app.inference.request import DesignRequest
    from carbon_app.inference.sampling import SamplingParams, StepNoise

    plan = plan_generation(on_gpu, DesignRequest.from_options("ACGTTGCA", 120, mask="N" * 60 + "RYSWKM" * 10))
    steps = decode_kmers(on_gpu, plan.prompt_ids, torch.from_numpy(plan.allowed).to("cuda"),
                         SamplingParams(mode=mode, temperature=0.9), 1,
                         StepNoise(3, 1, on_gpu.tokenizer.n_kmers, on_gpu.device))
    warm = [next(steps) for _ in range(3)]  # the prefill, the masks' table and the graph's capture may wait
    torch.cuda.set_sync_debug_mode("error")
    try:
        rest = [(kmers, log_marginals(logprobs, tails="drop")) for kmers, logprobs in steps]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(warm) + len(rest) == plan.n_tokens


def test_greedy_equals_stock_generate_restricted_to_dna_on_the_gpu(on_gpu_fp32):
    bundle, prompt, tokens = on_gpu_fp32, "ACGTTGCAACGTAGCTAGGCTA"[:18], 40
    ids = torch.tensor([bundle.tokenizer.encode(dna_prompt("", prompt))], device="cuda")
    dna_only = DnaLogitsProcessor(bundle.tokenizer.kmer_start_id, bundle.tokenizer.n_kmers,
                                  SamplingParams(mode="token", temperature=0), ids.shape[1])
    reference = transformers_model(bundle.path, bundle.device, bundle.dtype)
    stock = reference.generate(ids, logits_processor=[dna_only], max_new_tokens=tokens, min_new_tokens=tokens,
                               do_sample=False, pad_token_id=0, eos_token_id=None)
    ours = generate(bundle, prompt, tokens * 6, mode="token", temperature=0)
    assert ours.sequences[0] == bundle.tokenizer.decode(stock[0, ids.shape[1]:].tolist())


@pytest.mark.parametrize("mode", ["bp", "token"])
def test_speculative_greedy_is_the_target_alone_on_the_gpu(on_gpu_fp32, compact_model_dir, mode):
    draft = load_bundle(str(compact_model_dir), device=torch.device("cuda"), dtype=torch.float32)
    alone = generate(on_gpu_fp32, "ACGTTGCA", 301, mode=mode, temperature=0)
    drafted = generate(on_gpu_fp32, "ACGTTGCA", 301, mode=mode, temperature=0, draft=draft, draft_always=True)
    assert drafted.sequences == alone.sequences and drafted.speculative.acceptance_rate > 0.9


def test_a_real_gpu_out_of_memory_is_a_message_and_the_model_keeps_working(compact_model_dir, tmp_path):
    service = Service(ModelManager(device="cuda"), AppConfig(models=[str(compact_model_dir)], output_dir=tmp_path))
    name = str(compact_model_dir)

    def design(samples: int, n_bases: int):
        *_, (final, _) = service.design_stream(name, "ATGGTGCAC", n_bases, False, seed=3, samples=samples)
        return final.sequences

    before = design(2, 60)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 2**20) / total)
    try:  # a real allocation failure, not a budget refusal: the budget does not know of the cap
        with pytest.raises(ModelError, match="the GPU ran out of memory during .*still work"):
            design(64, 2400)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert design(2, 60) == before and service.manager.loads == 1 and service.running == 0


def test_a_memory_budget_refuses_a_large_gpu_request_before_any_work(compact_model_dir, tmp_path, monkeypatch):
    weights = ModelManager(device="cuda").get(str(compact_model_dir)).n_bytes
    monkeypatch.setenv("CARBON_MEMORY_BUDGET_GB", str((weights + 4 * 2**20) / 2**30))
    service = Service(ModelManager(device="cuda"), AppConfig(models=[str(compact_model_dir)], output_dir=tmp_path))
    allocated = torch.cuda.memory_allocated()
    with pytest.raises(ModelError, match="needs about .* MiB of working memory"):
        list(service.design_stream(str(compact_model_dir), "ATG", 2400, False, seed=1, samples=64))
    assert torch.cuda.memory_allocated() <= allocated + weights + 2**20
