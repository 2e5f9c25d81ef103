"""FNS marginals against an independent, loop-based implementation of spec section 5."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from carbon_app.inference.marginals import (
    chain_logprobs,
    factorised_logprobs,
    kmer_digits,
    kmer_index,
    kmer_log_mask,
    log_marginals,
)
from carbon_app.inference.score import score_sequence

KMERS = ["".join(p) for p in itertools.product("ATCG", repeat=6)]  # the release's id order


def naive_marginals(kmer_probs: np.ndarray) -> np.ndarray:
    """[T, 4096] probabilities -> [T, 6, 4]: sum over the 6-mers with base b at position j."""
    out = np.zeros((kmer_probs.shape[0], 6, 4))
    for j in range(6):
        for b, base in enumerate("ATCG"):
            members = [i for i, kmer in enumerate(KMERS) if kmer[j] == base]
            out[:, j, b] = kmer_probs[:, members].sum(axis=1)
    return out


def test_marginals_of_a_carbon_layout_model_match_the_formula(carbon, carbon_model_dir):
    from transformers import LlamaForCausalLM

    seq = "ATGGCGTACGTTAGCNNATCGGATCCGATTACAGGCTAGC"  # 40 bases: an N token and a partial last token
    ours = score_sequence(carbon, seq).probs  # [L, 4]

    stock = LlamaForCausalLM.from_pretrained(str(carbon_model_dir), dtype=torch.float32).eval()
    assert stock.config.vocab_size == 155_776 and stock.config.tie_word_embeddings
    padded = seq + "A" * (-len(seq) % 6)
    ids = [151669] + [
        151671 if "N" in kmer else 151672 + KMERS.index(kmer)
        for kmer in (padded[i : i + 6] for i in range(0, len(padded), 6))
    ]
    with torch.no_grad():
        logits = stock(torch.tensor([ids])).logits[0, :-1].double()  # position t predicts token t+1
    probs = torch.softmax(logits[:, 151672 : 151672 + 4096], dim=-1).numpy()
    expected = naive_marginals(probs).reshape(-1, 4)[: len(seq)]
    assert np.abs(ours - expected).max() < 1e-5


def test_factorised_distribution_round_trip():
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(5, 4096, dtype=torch.float64) * 3, dim=-1)
    m = log_marginals(logp)
    f = factorised_logprobs(m)
    assert torch.allclose(torch.logsumexp(f, -1), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(log_marginals(f), m, atol=1e-12)  # same marginals
    # its argmax is the per-base argmax
    per_base = m.argmax(-1)
    assert torch.equal(f.argmax(-1), (per_base * 4 ** torch.arange(5, -1, -1)).sum(-1))


def test_mask_gives_conditional_marginals():
    torch.manual_seed(1)
    logits = torch.randn(4096, dtype=torch.float64)
    rows = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 1], [1, 0, 1, 0]]
    allowed = torch.tensor(rows, dtype=torch.bool)
    m = log_marginals(torch.log_softmax(logits + kmer_log_mask(allowed).double(), -1)).exp().numpy()
    ok = np.array([all(allowed[j, "ATCG".index(c)] for j, c in enumerate(kmer)) for kmer in KMERS])
    p = torch.softmax(logits, -1).numpy() * ok
    expected = naive_marginals((p / p.sum())[None])[0]
    assert np.abs(m - expected).max() < 1e-12
    assert (m[~allowed.numpy()] == 0).all()


def test_chain_terms_sum_to_token_loglikelihood():
    torch.manual_seed(2)
    logp = torch.log_softmax(torch.randn(7, 4096, dtype=torch.float64), -1)
    tokens = torch.randint(0, 4096, (7,))
    allowed = torch.zeros(7, 6, 4, dtype=torch.bool)
    digits = (tokens[:, None] // 4 ** torch.arange(5, -1, -1)) % 4
    allowed.scatter_(-1, digits[..., None], True)
    terms = chain_logprobs(logp, allowed)
    assert torch.allclose(terms.sum(-1), logp[torch.arange(7), tokens], atol=1e-12)
    assert torch.allclose(terms[:, 0], log_marginals(logp)[torch.arange(7), 0].gather(-1, digits[:, :1]).squeeze(-1))


@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 3)])
def test_vectorised_over_batch_shapes(batch_shape):
    logp = torch.log_softmax(torch.randn(*batch_shape, 4096), -1)
    assert log_marginals(logp).shape == (*batch_shape, 6, 4)
    assert factorised_logprobs(log_marginals(logp)).shape == (*batch_shape, 4096)


def test_marginals_carry_gradients_after_inference_mode_use():
    """Generation (inference mode) and training (autograd) share the cached base indicator."""
    with torch.inference_mode():
        log_marginals(torch.randn(2, 4096).log_softmax(-1))
    logits = torch.randn(3, 4096, requires_grad=True)
    log_marginals(logits.log_softmax(-1))[..., 0].sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_marginals_from_raw_logits_equal_those_of_the_normalised_log_probs():
    logits = torch.randn(7, 4096) * 6
    logits[:3, :1024] = float("-inf")  # base A excluded at the first position of three rows
    normalised = log_marginals(torch.log_softmax(logits, dim=-1))
    direct = log_marginals(logits, normalise=True)
    assert torch.equal(torch.isinf(normalised), torch.isinf(direct))
    finite = torch.isfinite(normalised)
    assert torch.allclose(normalised[finite], direct[finite], atol=1e-5)


def test_training_marginals_in_float32_match_the_float64_ones_and_stay_finite():
    """The loss's fast path: equal where both are representable, clamped (not -inf, not NaN) far below."""
    logprobs = torch.log_softmax(torch.randn(5, 4096) * 4, dim=-1)
    assert torch.allclose(log_marginals(logprobs, tails="clamp"), log_marginals(logprobs), atol=1e-5)
    far = torch.full((1, 4096), -200.0)
    far[0, 0] = 0.0  # every k-mer but AAAAAA ~200 nats down: float32 cannot hold those bases
    fast = log_marginals(far.requires_grad_(), tails="clamp")
    assert torch.isfinite(fast).all() and fast[0, 0, 0] == 0 and (fast[0, :, 1:] < -80).all()
    fast.sum().backward()
    assert torch.isfinite(far.grad).all()


def test_generation_marginals_drop_only_what_float32_cannot_hold():
    """tails="drop" (sampling's, with no wait for the GPU): the exact marginals wherever float32 holds a
    base, -inf where it cannot (there the exact ones are ~200 nats down), and excluded bases stay -inf."""
    logprobs = torch.log_softmax(torch.randn(5, 4096) * 4, dim=-1)
    assert torch.equal(log_marginals(logprobs, tails="drop"), log_marginals(logprobs))
    far = torch.full((2, 4096), -200.0)
    far[:, 0] = 0.0
    far[1, 1024:] = float("-inf")  # row 1: every k-mer not starting with A excluded
    dropped, exact = log_marginals(far, tails="drop"), log_marginals(far)
    assert (dropped[:, :, 0] == 0).all() and torch.isneginf(dropped[:, :, 1:]).all()
    assert (exact[0, :, 1:] < -190).all() and torch.isneginf(exact[1, 0, 1:]).all()
    with pytest.raises(ValueError, match="tails must be one of"):
        log_marginals(far, tails="precise")



def test_float32_marginals_keep_a_base_far_below_the_top_and_an_excluded_base_excluded():
    """Model logits are float32: marginals are summed in float32, and a row where a base sums to zero there
    (over ~100 nats below the top k-mer, or excluded) is redone in float64."""
    logits = torch.randn(5, 4096) * 4
    assert torch.allclose(log_marginals(logits, normalise=True), log_marginals(logits.double(), normalise=True)
                          .float(), atol=1e-5)
    far = torch.full((2, 4096), -150.0)
    far[:, 0] = 0.0  # AAAAAA on top; every other k-mer 150 nats down, beyond float32's exp
    far[1, 1024:2048] = float("-inf")  # row 1: base T excluded at the first position
    marginals = log_marginals(far)
    expected = log_marginals(far.double()).float()
    assert torch.equal(torch.isinf(marginals), torch.isinf(expected)) and torch.isinf(marginals[1, 0, 1])
    finite = torch.isfinite(expected)
    assert torch.allclose(marginals[finite], expected[finite], atol=1e-4)
    assert marginals[0, 0, 1] == pytest.approx(-150 + math.log(1024), abs=1e-3)  # 1,024 k-mers start with T


def test_a_rows_marginals_do_not_depend_on_its_batch_or_the_thread_count():
    """A delta must not move with what else is batched with it (a VCF split across Ray workers, a scan
    against one variant): each row's marginals are the same, to the last bit, however it is batched."""
    logits = torch.randn(3072, 4096) * 3
    alone_in_full = log_marginals(logits, normalise=True)
    threads = torch.get_num_threads()
    try:
        for count in sorted({1, threads}):
            torch.set_num_threads(count)
            for rows in (1, 7, 64, 300, 3072):
                assert torch.equal(log_marginals(logits[:rows], normalise=True), alone_in_full[:rows])
    finally:
        torch.set_num_threads(threads)

def test_kmer_digits_spell_the_release_order_and_invert():
    index = torch.arange(4096)
    digits = kmer_digits(index, 6)
    assert ["".join("ATCG"[d] for d in row) for row in digits.tolist()] == KMERS
    assert torch.equal(kmer_index(digits), index)
    assert torch.equal(kmer_digits(index.view(64, 64), 6).flatten(0, 1), digits)  # any leading shape
