"""Generation: exact base counts, masks, base-exact prompts, seeds, modes, tags."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from carbon_app.core.dna import IUPAC, satisfies
from carbon_app.errors import InputError
from carbon_app.inference.generate import generate
from carbon_app.inference.marginals import log_marginals
from carbon_app.model.checkpoint import transformers_model


@given(prompt=st.text("ACGT", max_size=20), template=st.text(list(IUPAC) + [c.lower() for c in IUPAC], min_size=1,
                                                              max_size=40),
       mode=st.sampled_from(["bp", "token"]), temperature=st.sampled_from([0.0, 0.7, 1.0, 1.5]),
       seed=st.integers(0, 2**31), samples=st.integers(1, 3))
def test_masked_generations_are_exact_and_satisfy_their_templates(compact, prompt, template, mode, temperature, seed,
                                                                   samples):
    n = len(template)
    out = generate(compact, prompt, n, mask=template, mode=mode, temperature=temperature, seed=seed, samples=samples)
    for seq in out.sequences:
        assert len(seq) == n
        assert satisfies(seq, template), (seq, template)


def test_same_seed_same_output_and_greedy_repeats(carbon):
    options = dict(mask="NNNNNRRRRRYYYYYSSSSSWWWWW", species="plant", seed=11, samples=4)
    first = generate(carbon, "ACGTTGCA", 25, **options)
    assert generate(carbon, "ACGTTGCA", 25, **options).sequences == first.sequences
    assert generate(carbon, "ACGTTGCA", 25, **{**options, "seed": 12}).sequences != first.sequences
    greedy = [generate(carbon, "ACGTTGCAG", 31, temperature=0, seed=s).sequences for s in (1, 2)]
    assert greedy[0] == greedy[1]


def test_leftover_prompt_bases_are_fixed_positions_not_a_padded_context(compact):
    """A 6m+r prompt continues from its real last bases: the same as giving the
    whole 6-mers as context and fixing the r bases with a mask."""
    prompt = "ACGTTGCATGCA" + "GGT"  # 12 + 3
    for mode in ("bp", "token"):
        direct = generate(compact, prompt, 20, temperature=0, mode=mode)
        assert direct.fixed_bases == "GGT" and direct.prompt_text.endswith("<dna>ACGTTGCATGCA")
        via_mask = generate(compact, prompt[:12], 23, mask="GGT" + "N" * 20, temperature=0, mode=mode)
        assert via_mask.sequences[0] == "GGT" + direct.sequences[0]
    stock = compact.tokenizer.encode("<dna>" + prompt)  # the stock tokenizer's GGTAAA, never sent
    assert direct.prompt_ids == stock[:-1]


def test_output_is_dna_only_and_prompt_is_shown_exactly(carbon):
    out = generate(carbon, "atgc" * 5, 50, species="mammal", region="protein_coding", seed=3, samples=2)
    assert all(set(s) <= set("ACGT") for s in out.sequences)
    assert out.prompt_text == "<mammalian_species><protein_coding_region><dna>" + ("ATGC" * 5)[:18]
    assert carbon.tokenizer.encode(out.prompt_text) == out.prompt_ids
    assert out.prompt_ids[-4] == 151669 and 151670 not in out.prompt_ids
    assert len(out.base_probs[0]) == 50 and all(0 < p <= 1 for p in out.base_probs[0])


def test_greedy_bp_is_the_per_base_argmax_of_the_marginals(compact):
    out = generate(compact, "ACGTAC", 6, temperature=0, mode="bp")
    ids = torch.tensor([compact.tokenizer.encode("<dna>ACGTAC")])
    with torch.no_grad():
        logits = compact.kmer_logits(compact.hidden_states(ids)[0, -1])
    best = log_marginals(torch.log_softmax(logits, -1)).argmax(-1)
    assert out.sequences[0] == "".join("ATCG"[i] for i in best.tolist())


def test_token_mode_top_k_1_and_tiny_top_p_are_greedy(compact):
    greedy = generate(compact, "ACGTAC", 30, temperature=0, mode="token").sequences
    assert generate(compact, "ACGTAC", 30, temperature=1.0, top_k=1, mode="token", seed=5).sequences == greedy
    assert generate(compact, "ACGTAC", 30, temperature=1.0, top_p=1e-6, mode="token", seed=5).sequences == greedy


def test_bp_sampling_draws_each_base_from_its_marginal(compact):
    """Six independent base draws: base frequencies match the marginals."""
    ids = torch.tensor([compact.tokenizer.encode("<dna>ACGTAC")])
    with torch.no_grad():
        logits = compact.kmer_logits(compact.hidden_states(ids)[0, -1])
    marginals = log_marginals(torch.log_softmax(logits, -1)).exp().numpy()  # [6, 4]
    counts = np.zeros((6, 4))
    for seed in range(16):
        for seq in generate(compact, "ACGTAC", 6, temperature=1.0, seed=seed, samples=64).sequences:
            for j, base in enumerate(seq):
                counts[j, "ATCG".index(base)] += 1
    freq = counts / counts.sum(axis=1, keepdims=True)
    # 1024 draws per position: 4.5 standard errors of the largest possible variance
    assert np.abs(freq - marginals).max() < 4.5 * np.sqrt(0.25 / 1024)


@pytest.mark.parametrize(
    "kwargs, message",
    [  # every check of a design request, once, here where the engine makes it
        (dict(n_bases=0), "the number of bases must be at least 1, not 0"),
        (dict(n_bases=12.5), "the number of bases must be a whole number, not 12.5"),
        (dict(n_bases=10_000), "10,000 bases do not fit: the model's context is 512 tokens"),
        (dict(), "give the number of bases"),
        (dict(n_bases=5, mask="NNNN"), "the mask has 4 positions but 5 bases"),
        (dict(n_bases=5, mask="NNXNN"), "'X' at position 3"),
        (dict(prompt="ACGTACGN", n_bases=5), "'N' at position 8, among its last 2 bases.*must be A, C, G or T"),
        (dict(prompt="ACGU", n_bases=5), "looks like RNA"),
        (dict(n_bases=5, mode="kmer"), "mode must be 'bp' .* or 'token'"),
        (dict(n_bases=5, temperature=-0.1), "temperature must be between 0 and 10"),
        (dict(n_bases=5, temperature=11), "temperature must be between 0 and 10"),
        (dict(n_bases=5, temperature=float("nan")), "temperature must be between 0 and 10"),
        (dict(n_bases=5, temperature=None), "the temperature is empty"),
        (dict(n_bases=5, temperature="warm"), "the temperature must be a number, not 'warm'"),
        (dict(n_bases=5, top_p=0), "top-p must be above 0 and at most 1"),
        (dict(n_bases=5, top_p=1.5), "top-p must be above 0 and at most 1"),
        (dict(n_bases=5, top_k=-2), r"top-k \(0 = off\) must be at least 0, not -2"),
        (dict(n_bases=5, top_k=2.5), r"top-k \(0 = off\) must be a whole number, not 2.5"),
        (dict(n_bases=5, samples=0), "the number of samples must be between 1 and 64, not 0"),
        (dict(n_bases=5, samples=65), "the number of samples must be between 1 and 64, not 65"),
        (dict(n_bases=5, seed=-1), "the seed must be between 0 and 9,223,372,036,854,775,807, not -1"),
        (dict(n_bases=5, seed=2**63), "the seed must be between 0 and"),
        (dict(n_bases=5, seed=1.5), "the seed must be a whole number, not 1.5"),
        (dict(n_bases=5, species="martian"), "unknown species 'martian'"),
    ],
)
def test_bad_requests_name_the_problem(compact, kwargs, message):
    prompt = kwargs.pop("prompt", "ACGT")
    n = kwargs.pop("n_bases", None)
    with pytest.raises(InputError, match=message):
        generate(compact, prompt, n, **kwargs)


def test_mask_alone_sets_the_length_and_ambiguous_prompt_kmers_become_oov(compact):
    out = generate(compact, "NNNNNNACGTAC", mask="ATGNNNTAA", seed=1)
    assert len(out.sequences[0]) == 9 and satisfies(out.sequences[0], "ATGNNNTAA")
    assert out.prompt_ids[1] == compact.tokenizer.oov_id


def test_streaming_yields_growing_partial_results(compact):
    from carbon_app.inference.generate import generate_stream

    parts = list(generate_stream(compact, "ACGTAC", 60, seed=4, stream_every=3))
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    lengths = [len(p.sequences[0]) for p in parts]
    assert lengths == sorted(lengths) and lengths[-1] == 60
    assert parts[-1].sequences == generate(compact, "ACGTAC", 60, seed=4).sequences


@pytest.mark.parametrize("mode", ["bp", "token"])
def test_stock_generate_with_the_dna_processor_matches_the_engine(compact, mode):
    """The same rules as a transformers logits processor: stock greedy search
    gives our output, masks included, and never leaves DNA."""
    from carbon_app.core.dna import mask_from_template
    from carbon_app.inference.sampling import DnaLogitsProcessor, SamplingParams

    template = "NNNNNNRRRRRRYYYYYYACGTNN"
    ours = generate(compact, "ACGTACGGT" * 2, 24, mask=template, mode=mode, temperature=0)
    allowed = torch.from_numpy(mask_from_template(template).reshape(4, 6, 4))
    processor = DnaLogitsProcessor(compact.tokenizer.kmer_start_id, compact.tokenizer.n_kmers,
                                   SamplingParams(mode=mode, temperature=0), len(ours.prompt_ids), allowed)
    ids = torch.tensor([ours.prompt_ids])
    reference = transformers_model(compact.path, compact.device, compact.dtype)
    stock = reference.generate(ids, max_new_tokens=4, do_sample=False, logits_processor=[processor],
                               pad_token_id=0, eos_token_id=None)
    assert compact.tokenizer.decode(stock[0, ids.shape[1]:].tolist()) == ours.sequences[0]


def test_a_request_is_checked_once_into_typed_values_and_the_engine_runs_only_those(compact):
    """The request layer takes a form's strings and floats; what it returns is typed and frozen, the
    engine's own result equals the notebook call's, and settings made in code must already be numbers."""
    import dataclasses

    from carbon_app.inference.generate import run_design
    from carbon_app.inference.request import DesignRequest
    from carbon_app.inference.sampling import SamplingParams

    request = DesignRequest.from_options(" acgtacg ", "24.0", mask="", mode="token", temperature="0.7", top_k="5",
                                         top_p=0.95, seed="11", samples=2.0, max_homopolymer="", gc_window=None,
                                         species="")
    assert (request.prompt, request.n_bases, request.mask, request.seed, request.samples) == \
        ("ACGTACG", 24, None, 11, 2)
    assert request.sampling == SamplingParams("token", 0.7, 5, 0.95) and request.constraints is None
    assert request.species is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.seed = 3  # type: ignore[misc]
    *_, ours = run_design(compact, request)
    assert ours.sequences == generate(compact, "ACGTACG", 24, mode="token", temperature=0.7, top_k=5, top_p=0.95,
                                      seed=11, samples=2).sequences
    assert DesignRequest.from_options("", None, mask="NNNRY", seed=1).n_bases == 5  # the mask sets the length
    assert DesignRequest.from_options("", None, protein="MK*", seed=1).n_bases == 9  # so does a protein
    assert DesignRequest.from_options("", 5).seed >= 0  # none given: one is drawn (and reported)
    with pytest.raises(TypeError, match="checked"):
        SamplingParams("bp", "0.9")
    with pytest.raises(InputError, match="the temperature must be between 0 and 10"):
        SamplingParams("bp", 11.0)
    with pytest.raises(InputError, match="top-k"):
        DesignRequest.from_options("", 5, top_k="2.5")
