"""Factorised Nucleotide Supervision (FNS): between k-mer and base distributions.

A Carbon model predicts a distribution over the 4^k k-mers of the next token.
Its base-level view is k four-way *marginals*: the probability of base b at
within-token position j is the total probability of the k-mers with b at j.
The way back is the *factorised* distribution, the product of the k
marginals, which is again a distribution over k-mers: its argmax is the
per-base argmax and a draw from it is k independent base draws, so greedy
search, sampling and speculative decoding work on it unchanged.

All functions are vectorised over leading batch dimensions and over the
vocabulary; none loops over k-mers. K-mer index v has digits (A=0 T=1 C=2
G=3) with the first base most significant, i.e. row-major over [4]*k.
"""

from __future__ import annotations

import torch


def k_of(n_kmers: int) -> int:
    k = (n_kmers.bit_length() - 1) // 2
    if 4**k != n_kmers:
        raise ValueError(f"{n_kmers} is not a power of 4")
    return k


def kmer_digits(kmers: torch.Tensor, k: int) -> torch.Tensor:
    """K-mer indices [...] -> their base digits [..., k], first base first."""
    return kmers.unsqueeze(-1) // 4 ** torch.arange(k - 1, -1, -1, device=kmers.device) % 4


def kmer_index(digits: torch.Tensor) -> torch.Tensor:
    """Base digits [..., k] -> k-mer indices [...] (the inverse of `kmer_digits`)."""
    k = digits.shape[-1]
    return (digits * 4 ** torch.arange(k - 1, -1, -1, device=digits.device)).sum(-1)


def _marginal_sums(shifted: torch.Tensor, k: int, work: torch.dtype) -> torch.Tensor:
    """[..., 4^k] k-mer log-probs less their row's top -> [..., k, 4] sums of their probabilities.

    Summed by reductions over the k-mer axes, two positions per pass, not by a matrix product with a
    k-mer/base indicator: a GEMM's summation order follows the batch's shape and the thread count, so a
    row's sums (hence a variant's delta, in its last digits) would move with whatever else is in the
    batch; these reductions give every row the same sums however it is batched (tested).
    """
    probs = shifted.to(work).exp().reshape(-1, 4**k)
    columns = []
    for j in range(0, k, 2):
        width = min(2, k - j)  # positions j and j+1 (j alone for the last of an odd k)
        block = probs.view(-1, 4**j, 4**width, 4 ** (k - j - width)).sum(dim=(1, 3))
        if width == 1:
            columns.append(block)
        else:
            block = block.view(-1, 4, 4)
            columns += [block.sum(dim=2), block.sum(dim=1)]
    return torch.stack(columns, dim=-2).reshape(*shifted.shape[:-1], k, 4)


def _logs(sums: torch.Tensor, top: torch.Tensor, normalise: bool) -> torch.Tensor:
    if normalise:  # the shift by `top` cancels
        return (sums / sums[..., :1, :].sum(dim=-1, keepdim=True)).log()
    return sums.log() + top.to(sums.dtype).unsqueeze(-1)


TAILS = ("exact", "clamp", "drop")


def log_marginals(kmer_logprobs: torch.Tensor, normalise: bool = False, tails: str = "exact") -> torch.Tensor:
    """[..., 4^k] normalised k-mer log-probs -> [..., k, 4] per-base log-marginals.

    With `normalise`, raw k-mer logits may be given instead (one log-softmax
    pass over all k-mers saved: the four sums of any position add up to the
    normaliser).

    The probabilities are summed per position after subtracting the row's
    largest log-prob, in the input's precision (float32 for model logits: sums
    as exact as the logits they come from, at about half the cost of float64).
    A float32 sum holds bases down to ~100 nats below the row's top k-mer; a row
    where some base sums to zero (further down than that, or excluded by a
    mask) is redone in float64, which holds ~700 nats, so such a base gets its
    value and an excluded base stays exactly -inf.

    `tails` says what becomes of such a base: "exact", that redo (scoring);
    "clamp", the smallest float32 instead, finite and with a gradient
    (training's loss); "drop", -inf, as if excluded (generation: a base ~100
    nats below the best is never drawn, p < 1e-43, and the redo's test would
    make the host wait for the GPU at every generated token).
    """
    if tails not in TAILS:
        raise ValueError(f"tails must be one of {TAILS}, not {tails!r}")
    k = k_of(kmer_logprobs.shape[-1])
    work = torch.float64 if kmer_logprobs.dtype == torch.float64 else torch.float32
    top = kmer_logprobs.detach().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)
    shifted = kmer_logprobs - top
    sums = _marginal_sums(shifted, k, work)
    if tails == "clamp":
        return _logs(sums.clamp_min(torch.finfo(work).tiny), top, normalise).to(kmer_logprobs.dtype)
    out = _logs(sums, top, normalise).to(kmer_logprobs.dtype)
    if tails == "exact" and work != torch.float64:
        lost = (sums == 0).flatten(-2).any(dim=-1)
        if lost.any():
            out[lost] = _logs(_marginal_sums(shifted[lost], k, torch.float64), top[lost], normalise).to(out.dtype)
    return out


def factorised_logprobs(base_logprobs: torch.Tensor) -> torch.Tensor:
    """[..., k, 4] per-base log-probs -> [..., 4^k] log-probs of their product.

    Built as an outer sum, one position at a time, so -inf entries (excluded
    bases) stay -inf without NaNs.
    """
    k = base_logprobs.shape[-2]
    acc = base_logprobs[..., 0, :]
    for j in range(1, k):
        acc = (acc.unsqueeze(-1) + base_logprobs[..., j, :].unsqueeze(-2)).flatten(-2)
    return acc


def kmer_log_mask(allowed: torch.Tensor) -> torch.Tensor:
    """[..., k, 4] bool (allowed bases per position) -> [..., 4^k] of 0 / -inf."""
    zeros = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    return factorised_logprobs(zeros.masked_fill(~allowed, float("-inf")))


def base_logprobs_from_marginals(marginals: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Log-probability of the base present at each position, reference FNS scoring.

    `marginals` [..., k, 4] log-marginals, `allowed` [..., k, 4] bool: the
    base(s) a position holds. A/C/G/T select their own entry; an ambiguous
    position (N) scores as the best of the bases it allows, as the reference
    scorer does.
    """
    return marginals.masked_fill(~allowed, float("-inf")).amax(dim=-1)


def chain_logprobs(kmer_logprobs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Exact chain-rule split of a k-mer's log-probability into per-base terms.

    term j = log p(b_j | b_0..b_{j-1}, context), so the k terms of a token sum
    to its log-likelihood. `kmer_logprobs` [T, 4^k], `allowed` [T, k, 4] as in
    `base_logprobs_from_marginals`; an ambiguous position takes its most likely
    allowed base and conditions the later positions on it.
    """
    tokens, n_kmers = kmer_logprobs.shape
    k = k_of(n_kmers)
    rows = torch.arange(tokens, device=kmer_logprobs.device)
    remaining = kmer_logprobs  # log-probs of the k-mers that extend the prefix chosen so far
    terms = []
    for j in range(k):
        remaining = remaining.reshape(tokens, 4, -1)
        next_base = torch.logsumexp(remaining, dim=-1)  # [T, 4]
        conditional = next_base - torch.logsumexp(next_base, dim=-1, keepdim=True)
        masked = conditional.masked_fill(~allowed[:, j], float("-inf"))
        term, chosen = masked.max(dim=-1)
        terms.append(term)
        remaining = remaining[rows, chosen]
    return torch.stack(terms, dim=-1)
