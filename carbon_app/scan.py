"""In-silico saturation mutagenesis: every single-base substitution of a region, scored.

All substitutions share one window (the region and its flanks), so the
reference is scored once and each alternate reuses what cannot change:

- bases before the substituted token keep their reference scores (a base is
  predicted from earlier tokens only);
- the substituted token's own bases are read from the reference pass, which
  already holds the distribution over that token;
- only the tokens after it are recomputed, from the reference KV cache cut at
  the substituted token, for the (up to 18) substitutions of that token as one
  batch.

delta = LL(alt window) - LL(ref window), exactly as `score_variant` computes
it for the same window; tests check the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from .dna import BASES, clean_sequence, mask_from_template
from .errors import InputError
from .marginals import base_logprobs_from_marginals, chain_logprobs, kmer_digits, kmer_index, log_marginals
from .models import ModelBundle
from .score import DEFAULT_WINDOW, _check_method, context_room_bases, variant_window
from .tokens import DNA_OPEN

MAX_SCAN_POSITIONS = 2000


@dataclass
class ScanResult:
    start: int  # region, 1-based inclusive, in the input sequence
    end: int
    region: str
    window_start: int
    window_end: int
    deltas: np.ndarray  # [L, 4] delta per position and alternate base, columns A, T, C, G; NaN at the reference
    ll_ref: float
    method: str
    prompt_text: str

    def rows(self) -> list[tuple[int, str, str, float]]:
        """(position, ref, alt, delta) for every substitution, alternates in A C G T order."""
        out = []
        for i, ref in enumerate(self.region):
            for alt in "ACGT":
                value = self.deltas[i, BASES.index(alt)]
                if alt != ref and not np.isnan(value):
                    out.append((self.start + i, ref, alt, float(value)))
        return out

    def to_tsv(self) -> str:
        lines = ["position\tref\talt\tdelta_loglik"]
        lines += [f"{pos}\t{ref}\t{alt}\t{delta:.6f}" for pos, ref, alt, delta in self.rows()]
        return "\n".join(lines) + "\n"


def _per_base(kmer_logits: torch.Tensor, allowed: torch.Tensor, method: str) -> torch.Tensor:
    """[n, 4^k] k-mer logits and [n, k, 4] present bases -> [n, k] per-base log-probs.

    The marginal method (the bulk of a scan) takes the marginals straight from
    the logits, without a log-softmax pass over every k-mer.
    """
    if method == "chain":
        return chain_logprobs(torch.log_softmax(kmer_logits, dim=-1), allowed)
    return base_logprobs_from_marginals(log_marginals(kmer_logits, normalise=True), allowed)


@torch.inference_mode()
def scan_substitutions(
    bundle: ModelBundle,
    sequence: str,
    start: int,
    end: int,
    window: int = DEFAULT_WINDOW,
    species: str | None = None,
    region: str | None = None,
    method: str = "marginal",
) -> ScanResult:
    """Score all 3 x L substitutions of positions `start`..`end` (1-based, inclusive)."""
    _check_method(method)
    seq = clean_sequence(sequence, what="sequence")
    for value, name in ((start, "start"), (end, "end")):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"the scan {name} must be a whole number, not {value!r}")
    if not 1 <= start <= end <= len(seq):
        raise InputError(f"the scan region {start}-{end} must lie within the {len(seq):,}-base sequence "
                         "(1-based, start <= end)")
    if end - start + 1 > MAX_SCAN_POSITIONS:
        raise InputError(f"the scan region has {end - start + 1:,} positions; at most {MAX_SCAN_POSITIONS:,}")
    prefix = bundle.tags.prefix(species, region)
    room = context_room_bases(bundle, prefix)
    if end - start + 1 > room:
        raise InputError(f"the scan region has {end - start + 1:,} positions, more than the {room:,} bases "
                         "the model reads at once")
    lo, hi = variant_window(len(seq), start - 1, end - start + 1, min(int(window), room))
    win = seq[lo:hi]
    k = bundle.k
    padded = win + "A" * (-len(win) % k)
    n_tokens = len(padded) // k
    prompt_text = prefix + DNA_OPEN + padded
    ids = torch.tensor([bundle.tokenizer.encode(prompt_text)], device=bundle.device)
    first = ids.shape[1] - n_tokens - 1  # index of <dna>
    real = torch.zeros(n_tokens * k, dtype=torch.bool, device=bundle.device)
    real[: len(win)] = True
    real = real.reshape(n_tokens, k)
    allowed = torch.ones(n_tokens * k, 4, dtype=torch.bool)
    allowed[: len(win)] = torch.from_numpy(mask_from_template(win))
    allowed = allowed.reshape(n_tokens, k, 4).to(bundle.device)

    # the largest batch: 3 alternates at each of the k positions of the first token, re-reading the rest
    largest = 3 * k * n_tokens
    bundle.check_memory(ids.shape[1] + largest, max(ids.shape[1], largest), n_tokens + largest,
                        f"a scan of {end - start + 1:,} positions in a {len(win):,}-base window")
    cache = DynamicCache(config=bundle.model.config)
    hidden = bundle.hidden_states(ids[:, :-1], cache)[0, first:]  # [n_tokens, H]: predicts token i
    ref_kmer_logits = bundle.kmer_logits(hidden)
    ref_per_base = _per_base(ref_kmer_logits, allowed, method).masked_fill(~real, 0.0)  # [n_tokens, k]
    ref_token_sums = ref_per_base.sum(dim=1)
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    kmer_ids = ids[0, first + 1 :]

    deltas = np.full((end - start + 1, 4), np.nan)
    for t in range((start - 1 - lo) // k, (end - 1 - lo) // k + 1):
        variants = []  # (window position, alternate base index)
        for j in range(k):
            q = t * k + j
            if start - 1 <= lo + q <= end - 1 and win[q] in "ACGT":
                variants += [(q, b) for b in range(4) if BASES[b] != win[q]]
        if not variants:
            continue
        batch = len(variants)
        alt_allowed = allowed[t].unsqueeze(0).repeat(batch, 1, 1)
        alt_digits = kmer_digits(kmer_ids[t] - bundle.tokenizer.kmer_start_id, k).unsqueeze(0).repeat(batch, 1)
        for row, (q, b) in enumerate(variants):
            alt_allowed[row, q % k] = False
            alt_allowed[row, q % k, b] = True
            alt_digits[row, q % k] = b
        # the substituted token, scored from the reference pass
        own = _per_base(ref_kmer_logits[t].expand(batch, -1), alt_allowed, method).masked_fill(~real[t], 0.0)
        change = own.sum(dim=1) - ref_token_sums[t]
        if t + 1 < n_tokens:  # the tokens after it, recomputed from the cache cut before it
            keep = first + 1 + t
            cut = DynamicCache(ddp_cache_data=[(key[:, :, :keep].expand(batch, -1, -1, -1),
                                                value[:, :, :keep].expand(batch, -1, -1, -1)) for key, value in kv])
            alt_token = bundle.tokenizer.kmer_start_id + kmer_index(alt_digits)
            suffix = torch.cat([alt_token.unsqueeze(1), kmer_ids[t + 1 : n_tokens - 1].expand(batch, -1)], dim=1)
            later_hidden = bundle.hidden_states(suffix, cut)  # predicts tokens t+1 .. n_tokens-1
            later_logits = bundle.kmer_logits(later_hidden).flatten(0, 1)
            later_allowed = allowed[t + 1 :].expand(batch, -1, -1, -1).flatten(0, 1)
            later_per_base = _per_base(later_logits, later_allowed, method)
            later_per_base = later_per_base.reshape(batch, -1, k).masked_fill(~real[t + 1 :], 0.0)
            change = change + later_per_base.sum(dim=(1, 2)) - ref_token_sums[t + 1 :].sum()
        for row, (q, b) in enumerate(variants):
            deltas[lo + q - (start - 1), b] = float(change[row])
    return ScanResult(
        start=start, end=end, region=seq[start - 1 : end], window_start=lo + 1, window_end=hi, deltas=deltas,
        ll_ref=float(ref_per_base.sum()), method=method, prompt_text=prompt_text,
    )
