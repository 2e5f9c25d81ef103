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

delta = LL(alt window) - LL(ref window), averaged over the k tokenization
frames, in exactly the windows `score_variant` reads for that substitution
(`frame_windows`: centred on it, one per frame), so a substitution gets the
same delta whatever region it is scanned in and from the Variant tab; tests
check they agree. Neighbouring positions share windows (a window serves the
k positions whose frames it reads), so a region of L positions costs L + k - 1
windows, each scored once and re-read after each substituted token.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.dna import BASES, clean_sequence, mask_from_template, reverse_complement
from ..core.tokens import dna_prompt
from ..core.validate import whole_number
from ..errors import InputError
from ..model.bundle import ModelBundle
from ..model.kv import branch, preallocated_cache
from .marginals import base_logprobs_from_marginals, chain_logprobs, kmer_digits, kmer_index, log_marginals
from .score import (
    DEFAULT_WINDOW,
    _check_method,
    context_room_bases,
    frame_windows,
    resolve_frames,
)

MAX_SCAN_POSITIONS = 2000


@dataclass
class ScanResult:
    start: int  # region, 1-based inclusive, in the input sequence
    end: int
    region: str
    window_start: int  # the span every frame's window lies in
    window_end: int
    deltas: np.ndarray  # [L, 4] delta per position and alternate base, columns A, T, C, G; NaN at the reference
    ll_ref: float  # of the first frame's window
    method: str
    prompt_text: str  # of the first frame's window
    frame_deltas: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 4)))  # [frames, L, 4]
    frame_bases: int = 0

    @property
    def spread(self) -> np.ndarray:
        """[L, 4] standard deviation of each delta over the frames that scored it."""
        with np.errstate(invalid="ignore"):
            return np.nanstd(self.frame_deltas, axis=0) if len(self.frame_deltas) else np.zeros_like(self.deltas)

    def rows(self) -> list[tuple[int, str, str, float]]:
        """(position, ref, alt, delta) for every substitution, alternates in A C G T order."""
        out = []
        for i, ref in enumerate(self.region):
            for alt in "ACGT":
                value = self.deltas[i, BASES.index(alt)]
                if alt != ref and not np.isnan(value):
                    out.append((self.start + i, ref, alt, float(value)))
        return out

    def to_tsv(self, consequences: list | None = None) -> str:
        """The rows as a table; with `consequences` (one per row) a consequence column too."""
        lines = ["position\tref\talt\tdelta_loglik" + ("\tconsequence" if consequences else "")]
        for i, (pos, ref, alt, delta) in enumerate(self.rows()):
            lines.append(f"{pos}\t{ref}\t{alt}\t{delta:.6f}" + (f"\t{consequences[i]}" if consequences else ""))
        return "\n".join(lines) + "\n"


def _per_base(kmer_logits: torch.Tensor, allowed: torch.Tensor, method: str) -> torch.Tensor:
    """[n, 4^k] k-mer logits and [n, k, 4] present bases -> [n, k] per-base log-probs.

    The marginal method (the bulk of a scan) takes the marginals straight from
    the logits, without a log-softmax pass over every k-mer.
    """
    if method == "chain":
        return chain_logprobs(torch.log_softmax(kmer_logits, dim=-1), allowed)
    return base_logprobs_from_marginals(log_marginals(kmer_logits, normalise=True), allowed)


def scan_substitutions(
    bundle: ModelBundle,
    sequence: str,
    start: int,
    end: int,
    window: int = DEFAULT_WINDOW,
    species: str | None = None,
    region: str | None = None,
    method: str = "marginal",
    frames: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> ScanResult:
    """Score all 3 x L substitutions of positions `start`..`end` (1-based, inclusive), each delta the
    mean over `frames` tokenization frames (default k); `progress(fraction)` is told of work done."""
    _check_method(method)
    seq = clean_sequence(sequence, what="sequence")
    start = whole_number(start, "the scan start", 1)
    end = whole_number(end, "the scan end", 1)
    if not 1 <= start <= end <= len(seq):
        raise InputError(f"the scan region {start}-{end} must lie within the {len(seq):,}-base sequence "
                         "(1-based, start <= end)")
    if end - start + 1 > MAX_SCAN_POSITIONS:
        raise InputError(f"the scan region has {end - start + 1:,} positions; at most {MAX_SCAN_POSITIONS:,}")
    window = whole_number(window, "the window (bases)", 1)
    frames = resolve_frames(bundle, frames)
    prefix = bundle.tags.prefix(species, region)
    window = min(window, context_room_bases(bundle, prefix))
    frame_deltas, ll_ref, prompt_text, span_lo, span_hi, size = substitution_deltas(
        bundle, seq, range(start - 1, end), window, frames, prefix, method, progress,
        what=f"a scan of {end - start + 1:,} positions")
    with warnings.catch_warnings():  # a column of NaN in every frame: the reference base, NaN by design
        warnings.simplefilter("ignore", RuntimeWarning)
        deltas = np.nanmean(frame_deltas, axis=0)
    return ScanResult(
        start=start, end=end, region=seq[start - 1 : end], window_start=span_lo + 1, window_end=span_hi,
        deltas=deltas, ll_ref=ll_ref, method=method, prompt_text=prompt_text, frame_deltas=frame_deltas,
        frame_bases=size,
    )


def substitution_deltas(bundle: ModelBundle, seq: str, positions, window: int, frames: int, prefix: str,
                        method: str, progress: Callable[[float], None] | None = None, what: str = "a scan",
                        alternates: dict[int, str] | None = None) -> tuple[np.ndarray, float, str, int, int, int]:
    """Every substitution at `positions` (0-based, in order), each read in the windows `score_variant`
    reads it in (`frame_windows`): ([frames, len(positions), 4] deltas per frame, NaN at the reference
    base, for frames that do not hold a position and for alternates not asked for; the first window's
    reference log-likelihood and prompt; the span all windows lie in; bases per window).
    `alternates` limits a position to the bases asked for (a batch of variants seldom wants all three).

    A window serves every position whose frames it reads, so neighbouring positions share windows:
    L clustered positions cost about L + k - 1 windows, each scored once and re-read after each
    substituted token. Scattered positions cost their own windows, no more.
    """
    positions = list(positions)
    row = {pos0: i for i, pos0 in enumerate(positions)}
    serves: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # window -> (position, frame)
    span_lo, span_hi, size = len(seq), 0, 0
    for pos0 in positions:
        lo, hi, starts, size = frame_windows(len(seq), pos0, 1, window, frames)
        span_lo, span_hi = min(span_lo, lo), max(span_hi, hi)
        for f in starts:
            serves[(lo + f, lo + f + size)].append((pos0, f))
    frame_deltas = np.full((frames, len(positions), 4), np.nan)
    ll_ref, prompt_text = 0.0, ""
    for i, ((lo, hi), wanted) in enumerate(sorted(serves.items())):
        if progress:
            progress(i / len(serves))
        wanted_here = {p: (alternates or {}).get(p, BASES) for p, _ in wanted}
        deltas, ll, text = _scan_window(bundle, seq, lo, hi, wanted_here, prefix, method, what)
        for pos0, f in wanted:
            frame_deltas[f, row[pos0]] = deltas[pos0]
        if i == 0:
            ll_ref, prompt_text = ll, text
    return frame_deltas, ll_ref, prompt_text, span_lo, span_hi, size


def mean_substitution_deltas(bundle: ModelBundle, seq: str, positions: list[int], window: int, frames: int,
                             prefix: str, method: str, alternates: dict[int, str] | None = None,
                             strand_average: bool = False, progress: Callable[[float], None] | None = None
                             ) -> np.ndarray:
    """[len(positions), 4] deltas (A T C G columns) of the substitutions at `positions` (0-based, sorted),
    each the mean over its frames and, with `strand_average`, over both strands: the reverse complement
    read in the same windows, positions mirrored and bases complemented, as `score_variant` reads it."""
    with warnings.catch_warnings():  # a base not asked for is NaN in every frame, by design
        warnings.simplefilter("ignore", RuntimeWarning)
        share = 0.5 if strand_average else 1.0
        forward = np.nanmean(substitution_deltas(
            bundle, seq, positions, window, frames, prefix, method,
            progress=progress and (lambda done: progress(share * done)), alternates=alternates)[0], 0)
        if not strand_average:
            return forward
        mirrored = {len(seq) - 1 - p: reverse_complement((alternates or {}).get(p, BASES)) for p in positions}
        back = np.nanmean(substitution_deltas(
            bundle, reverse_complement(seq), sorted(mirrored), window, frames, prefix, method,
            progress=progress and (lambda done: progress(0.5 + 0.5 * done)), alternates=mirrored)[0], 0)[::-1]
    complement_columns = [BASES.index(reverse_complement(b)) for b in BASES]
    return (forward + back[:, complement_columns]) / 2


@torch.inference_mode()
def _scan_window(bundle: ModelBundle, seq: str, lo: int, hi: int, positions: dict[int, str], prefix: str,
                 method: str, what: str) -> tuple[dict[int, np.ndarray], float, str]:
    """The substitutions {position (0-based, inside window [lo, hi)): alternate bases} scored in that
    one window: {position: delta per alternate [4], NaN at the reference base and at bases not asked
    for}, the reference's log-likelihood and the prompt text."""
    win = seq[lo:hi]
    k = bundle.k
    n_tokens = -(-len(win) // k)
    prompt_text = dna_prompt(prefix, win, k)
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
                        f"{what} in {len(win):,}-base windows")
    cache = preallocated_cache(bundle.model.config, ids.shape[1])
    hidden = bundle.hidden_states(ids[:, :-1], cache)[0, first:]  # [n_tokens, H]: predicts token i
    ref_kmer_logits = bundle.kmer_logits(hidden)
    ref_per_base = _per_base(ref_kmer_logits, allowed, method).masked_fill(~real, 0.0)  # [n_tokens, k]
    ref_token_sums = ref_per_base.sum(dim=1)
    kmer_ids = ids[0, first + 1 :]

    deltas = {p: np.full(4, np.nan) for p in positions}
    for t in sorted({(p - lo) // k for p in positions}):
        variants = []  # (window position, alternate base index)
        for j in range(k):
            q = t * k + j
            if lo + q in deltas and win[q] in "ACGT":
                variants += [(q, b) for b in range(4) if BASES[b] != win[q] and BASES[b] in positions[lo + q]]
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
            cut = branch(bundle.model.config, cache, keep, batch, n_tokens - t)
            alt_token = bundle.tokenizer.kmer_start_id + kmer_index(alt_digits)
            suffix = torch.cat([alt_token.unsqueeze(1), kmer_ids[t + 1 : n_tokens - 1].expand(batch, -1)], dim=1)
            later_hidden = bundle.hidden_states(suffix, cut)  # predicts tokens t+1 .. n_tokens-1
            later_logits = bundle.kmer_logits(later_hidden).flatten(0, 1)
            later_allowed = allowed[t + 1 :].expand(batch, -1, -1, -1).flatten(0, 1)
            later_per_base = _per_base(later_logits, later_allowed, method)
            later_per_base = later_per_base.reshape(batch, -1, k).masked_fill(~real[t + 1 :], 0.0)
            change = change + later_per_base.sum(dim=(1, 2)) - ref_token_sums[t + 1 :].sum()
        for row, (q, b) in enumerate(variants):
            deltas[lo + q][b] = float(change[row])
    return deltas, float(ref_per_base.sum()), prompt_text
