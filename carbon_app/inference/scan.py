"""In-silico saturation mutagenesis: every single-base substitution of a region, scored.

All substitutions share one window (the region and its flanks), so the
reference is scored once and each alternate reuses what cannot change:

- bases before the substituted token keep their reference scores (a base is
  predicted from earlier tokens only);
- the substituted token's own bases are read from the reference pass, which
  already holds the distribution over that token;
- only the tokens after it are recomputed, as branches of the reference KV
  cache cut at the substituted token: the (up to 18) substitutions of that
  token lie side by side in one row, each attending to the shared prefix and
  to itself (`Decoder.continuations`), so the prefix is never copied for each.

delta = LL(alt window) - LL(ref window), averaged over the k tokenization
frames, in exactly the windows `score_variant` reads for that substitution
(`frame_windows`: centred on it, one per frame), so a substitution gets the
same delta whatever region it is scanned in and from the Variant tab; tests
check they agree. Neighbouring positions share windows (a window serves the
k positions whose frames it reads), so a region of L positions costs L + k - 1
windows, each scored once and re-read after each substituted token. Windows
go through the model in batches, and so do the substitutions that share a
token index across windows (a batch of scattered variants gains most).
A delta summed within a radius of its substitution (`score_variant`'s
`delta_radius`) recomputes only the tokens that reach that far: a scan at a radius
of 12 bases re-reads three tokens after each substituted one, not the rest of
its window.
"""

from __future__ import annotations

import threading
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np
import torch

from ..core.dna import BASES, clean_sequence, mask_from_template, reverse_complement
from ..core.stopping import checkpoint
from ..core.tokens import dna_prompt
from ..core.validate import whole_number
from ..errors import InputError
from ..model.backend import Backend
from ..model.bundle import ModelBundle
from ..model.kv import preallocated_cache
from .marginals import base_logprobs_from_marginals, chain_logprobs, kmer_digits, kmer_index, log_marginals
from .provenance import Provenance
from .score import Variant, frame_windows, variant_passes
from .spec import MAX_SCAN_POSITIONS, ScoringSpec, resolve_spec


@dataclass
class ScanResult:
    start: int  # region, 1-based inclusive, in the input sequence
    end: int
    region: str
    window_start: int  # the span every frame's window lies in
    window_end: int
    deltas: np.ndarray  # [L, 4] delta per position and alternate base, columns A, T, C, G; NaN at the reference
    method: str
    prompt_text: str  # of the first frame's window
    frame_deltas: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 4)))  # [frames, L, 4]
    frame_bases: int = 0
    delta_radius: int | None = None  # bases either side of each substitution its delta sums (None: the whole window)
    spec: ScoringSpec | None = None  # the setup it was scored with, as used
    provenance: Provenance | None = None  # the app, the model, its weights and the setup, as its table names them

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
        """The rows as a table, its provenance in the leading ## lines; with `consequences` (one per row) a
        consequence column too."""
        lines = [*(self.provenance.comment_lines() if self.provenance else []),
                 "position\tref\talt\tdelta_loglik" + ("\tconsequence" if consequences else "")]
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


def scan_substitutions(bundle: Backend, sequence: str, start: int, end: int, spec: ScoringSpec | None = None,
                       progress: Callable[[float], None] | None = None, **settings) -> ScanResult:
    """Score all 3 x L substitutions of positions `start`..`end` (1-based, inclusive) as `spec` says (else
    `resolve_spec` of `settings`: the settings given, the model's own for the rest), each delta the mean over
    its frames (and strands, with `strand_average`) and summed within the spec's radius of its substitution;
    exactly the delta `score_variant` gives each; `progress(fraction)` is told of work done."""
    spec = resolve_spec(bundle, spec, **settings)
    seq = clean_sequence(sequence, what="sequence")
    start = whole_number(start, "the scan start", 1)
    end = whole_number(end, "the scan end", 1)
    if not 1 <= start <= end <= len(seq):
        raise InputError(f"the scan region {start}-{end} must lie within the {len(seq):,}-base sequence "
                         "(1-based, start <= end)")
    if end - start + 1 > MAX_SCAN_POSITIONS:
        raise InputError(f"the scan region has {end - start + 1:,} positions; at most {MAX_SCAN_POSITIONS:,}")
    positions = list(range(start - 1, end))
    what = f"a scan of {end - start + 1:,} positions"
    frame_deltas, prompt_text, span_lo, span_hi, size = substitution_deltas(
        bundle, seq, positions, spec,
        progress if not spec.strand_average else progress and (lambda done: progress(0.5 * done)), what=what)
    with warnings.catch_warnings():  # a column of NaN in every frame: the reference base, NaN by design
        warnings.simplefilter("ignore", RuntimeWarning)
        deltas = np.nanmean(frame_deltas, axis=0)
    if spec.strand_average:  # the same substitutions on the other strand, in the mirrored windows
        deltas = (deltas + _other_strand(bundle, seq, positions, spec, None,
                                         progress and (lambda done: progress(0.5 + 0.5 * done)), what)) / 2
    return ScanResult(
        start=start, end=end, region=seq[start - 1 : end], window_start=span_lo + 1, window_end=span_hi,
        deltas=deltas, method=spec.method, prompt_text=prompt_text, frame_deltas=frame_deltas,
        frame_bases=size, delta_radius=spec.delta_radius, spec=spec, provenance=Provenance.of(bundle, spec),
    )


def substitution_deltas(bundle: Backend, seq: str, positions, spec: ScoringSpec,
                        progress: Callable[[float], None] | None = None, what: str = "a scan",
                        alternates: dict[int, str] | None = None) -> tuple[np.ndarray, str, int, int, int]:
    """Every substitution at `positions` (0-based, in order) on this strand (the spec's strand averaging is
    its callers'), each read in the windows `score_variant` reads it in (`frame_windows`) as `spec` says and
    summed within its radius:
    ([frames, len(positions), 4] deltas per frame, NaN at the reference
    base, for frames that do not hold a position and for alternates not asked for; the first window's
    prompt; the span all windows lie in; bases per window).
    `alternates` limits a position to the bases asked for (a batch of variants seldom wants all three).

    Where the engine holds the model's KV cache (in this process) a window serves every position whose
    frames it reads, so neighbouring positions share windows: L clustered positions cost about L + k - 1
    windows, each scored once and re-read after each substituted token. Scattered positions cost their own
    windows, no more. A backend that lends no cache (a server) reads each substitution alone
    (`_substitutions_read_alone`): the same deltas.
    """
    positions = list(positions)
    row = {pos0: i for i, pos0 in enumerate(positions)}
    serves: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # window -> (position, frame)
    span_lo, span_hi, size = len(seq), 0, 0
    for pos0 in positions:
        lo, hi, starts, size = frame_windows(len(seq), pos0, 1, spec.window, spec.frames)
        span_lo, span_hi = min(span_lo, lo), max(span_hi, hi)
        for f in starts:
            serves[(lo + f, lo + f + size)].append((pos0, f))
    frame_deltas = np.full((spec.frames, len(positions), 4), np.nan)
    ordered = sorted(serves.items())
    prompt_text = dna_prompt(spec.prefix, seq[ordered[0][0][0] : ordered[0][0][1]], bundle.k) if ordered else ""
    if not bundle.capabilities.holds_cache:
        _substitutions_read_alone(bundle, seq, positions, spec, alternates, frame_deltas, progress)
        return frame_deltas, prompt_text, span_lo, span_hi, size
    # a window's row: `<dna>` and the tokens its pass reads
    per_pass = max(1, bundle.pass_tokens // (1 + _tokens_read(
        -(-size // bundle.k), max(p - lo for (lo, _), wanted in ordered for p, _ in wanted), bundle.k,
        spec.delta_radius))) if ordered else 1
    groups: list[list[tuple[tuple[int, int], list[tuple[int, int]]]]] = []  # windows of one length, batched
    for item in ordered:
        (lo, hi), _ = item
        if groups and len(groups[-1]) < per_pass and groups[-1][0][0][1] - groups[-1][0][0][0] == hi - lo:
            groups[-1].append(item)
        else:
            groups.append([item])
    done = 0
    for group in groups:
        checkpoint()  # a pass of windows is the unit a stop waits for
        if progress:
            progress(done / len(ordered))
        asked = [(lo, hi, {p: (alternates or {}).get(p, BASES) for p, _ in wanted}) for (lo, hi), wanted in group]
        scored = _scan_windows(bundle, seq, asked, spec, what)
        for (_, wanted), deltas in zip(group, scored, strict=True):
            for pos0, f in wanted:
                frame_deltas[f, row[pos0]] = deltas[pos0]
            done += 1
    if progress and ordered:
        progress(1.0)
    return frame_deltas, prompt_text, span_lo, span_hi, size


def _substitutions_read_alone(bundle: Backend, seq: str, positions: list[int], spec: ScoringSpec,
                              alternates: dict[int, str] | None, frame_deltas: np.ndarray, progress) -> None:
    """On a backend that lends no KV cache to branch from (a server): each substitution read alone, in the
    windows `score_variant` reads it in and of those only the tokens its delta sums (`variant_passes`), the
    positions as many at once as the backend's `each` runs. A position's alternates share their reference
    rows, and a server's prefix cache the rest, so the deltas are those of the shared windows
    (`frame_deltas`, filled)."""
    asked = [(i, pos0) for i, pos0 in enumerate(positions) if seq[pos0] in "ACGT"]
    done, lock = 0, threading.Lock()

    def one(job: tuple[int, int]) -> None:
        nonlocal done
        i, pos0 = job
        checkpoint()
        for alt in (alternates or {}).get(pos0, BASES):
            if alt != seq[pos0]:
                passes = variant_passes(bundle, seq, Variant(pos0 + 1, seq[pos0], alt), spec, delta_only=True)
                frame_deltas[passes.starts, i, BASES.index(alt)] = passes.frame_deltas(spec.method, spec.delta_radius)
        with lock:
            done += 1
            if progress:
                progress(done / len(asked))

    bundle.each(one, asked)


def mean_substitution_deltas(bundle: Backend, seq: str, positions: list[int], spec: ScoringSpec,
                             alternates: dict[int, str] | None = None,
                             progress: Callable[[float], None] | None = None) -> np.ndarray:
    """[len(positions), 4] deltas (A T C G columns) of the substitutions at `positions` (0-based, sorted),
    each the mean over its frames and, with the spec's `strand_average`, over both strands: the reverse
    complement read in the same windows, positions mirrored and bases complemented, as `score_variant` reads
    it; summed within the spec's radius of each."""
    share = 0.5 if spec.strand_average else 1.0
    with warnings.catch_warnings():  # a base not asked for is NaN in every frame, by design
        warnings.simplefilter("ignore", RuntimeWarning)
        forward = np.nanmean(substitution_deltas(
            bundle, seq, positions, spec, progress=progress and (lambda done: progress(share * done)),
            alternates=alternates)[0], 0)
    if not spec.strand_average:
        return forward
    back = _other_strand(bundle, seq, positions, spec, alternates,
                         progress and (lambda done: progress(0.5 + 0.5 * done)))
    return (forward + back) / 2


def _other_strand(bundle: Backend, seq: str, positions: list[int], spec: ScoringSpec,
                  alternates: dict[int, str] | None, progress, what: str = "a scan") -> np.ndarray:
    """[len(positions), 4] frame-mean deltas of the substitutions at `positions` read on the reverse strand
    (mirrored windows, complemented bases), in the forward strand's columns."""
    mirrored = {len(seq) - 1 - p: reverse_complement((alternates or {}).get(p, BASES)) for p in positions}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        back = np.nanmean(substitution_deltas(bundle, reverse_complement(seq), sorted(mirrored), spec,
                                              progress=progress, what=what, alternates=mirrored)[0], 0)[::-1]
    complement_columns = [BASES.index(reverse_complement(b)) for b in BASES]
    return back[:, complement_columns]


def _token_sums(kmer_logits: torch.Tensor, allowed: torch.Tensor, tokens: torch.Tensor, real: torch.Tensor,
                method: str) -> torch.Tensor:
    """[..., 4^k] k-mer logits, [..., k, 4] present bases, [...] the k-mer index of each token and [..., k]
    which of its bases are real -> [...] each token's log-likelihood (float64), its per-base terms summed.

    Under the chain rule a token whose bases are all real and plain (one present base each) has terms that
    sum to its k-mer's log-probability, read straight from the logits: one logsumexp instead of a
    log-softmax and k more over the 4^k k-mers (the bulk of a scan's head work)."""
    real = real.expand(allowed.shape[:-1])
    if method != "chain":
        per_base = _per_base(kmer_logits.flatten(0, -2), allowed.flatten(0, -3), method).reshape(real.shape)
        return per_base.masked_fill(~real, 0.0).double().sum(dim=-1)
    # (a token with an ambiguous base may have no k-mer id: its gathered value is replaced below)
    sums = (kmer_logits.gather(-1, tokens.clamp(0, kmer_logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
            - torch.logsumexp(kmer_logits, dim=-1)).double()
    other = ~((allowed.sum(dim=-1) == 1) & real).all(dim=-1)  # an ambiguous base or a padded end
    if other.any():
        terms = _per_base(kmer_logits[other], allowed[other], method)
        sums[other] = terms.masked_fill(~real[other], 0.0).double().sum(dim=-1)
    return sums


def _tokens_read(n_tokens: int, farthest: int, k: int, delta_radius: int | None) -> int:
    """Of a window's `n_tokens`, the tokens its substitutions' deltas read: all, or with a radius none past the
    farthest substitution's reach (`farthest`, its base's index in the window; the model is causal, so the
    tokens after it change nothing before it)."""
    return n_tokens if delta_radius is None else min(n_tokens, 1 + (farthest + delta_radius) // k)


#: Tokens of one window's branches laid side by side in a row of one pass. Their block-diagonal attention is
#: computed whole, so long branches (a whole-window scan's hundred tokens) go one to a row: 64 measured as
#: fast as the old one-branch-a-row passes there, and a radius scan's one-token branches all share a row.
BRANCH_TOKENS = 64


def _branch_passes(jobs: list[tuple[int, int, int]], new: int, pass_tokens: int) -> Iterator[list[list[int]]]:
    """The substitutions `jobs` (window, position, base; in window order) of one token, `new` tokens re-read
    each, as forward passes: each pass a list of units, a unit the indices of jobs of one window read as
    branches of its cache side by side (at most BRANCH_TOKENS tokens), a pass at most `pass_tokens` tokens
    with every unit padded to the widest."""
    per_unit = max(1, BRANCH_TOKENS // max(new, 1))
    units = []
    for _, group in groupby(range(len(jobs)), key=lambda i: jobs[i][0]):
        indices = list(group)
        units += [indices[i : i + per_unit] for i in range(0, len(indices), per_unit)]
    batch: list[list[int]] = []
    widest = 0
    for unit in units:
        if batch and (len(batch) + 1) * max(widest, len(unit)) * max(new, 1) > pass_tokens:
            yield batch
            batch, widest = [], 0
        batch.append(unit)
        widest = max(widest, len(unit))
    if batch:
        yield batch


def _branch_slots(units: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Where a pass's jobs (its units, concatenated) sit as branches: ([units, widest] the job in each slot,
    a short unit's spare slots repeating its first job, whose result is not read; [jobs] each job's slot,
    flattened)."""
    widest = max(len(unit) for unit in units)
    slots, back, at = [], [], 0
    for u, unit in enumerate(units):
        slots.append([at + min(j, len(unit) - 1) for j in range(widest)])
        back += [u * widest + j for j in range(len(unit))]
        at += len(unit)
    return torch.tensor(slots, device=device), torch.tensor(back, device=device)


@torch.inference_mode()
def _scan_windows(bundle: ModelBundle, seq: str, windows: list[tuple[int, int, dict[int, str]]], spec: ScoringSpec,
                  what: str) -> list[dict[int, np.ndarray]]:
    """The substitutions asked for in each of `windows` (all of one length: (lo, hi, {position (0-based,
    inside [lo, hi)): alternate bases})), scored in that window. For each window: {position: delta per
    alternate [4], NaN at the reference base and at bases not asked for}.

    The reference windows go through the model as one batch. Every substitution is then re-read as a
    branch of its own window's cache cut before its token (`continuations`: a window's branches side by
    side, each seeing the prefix and itself), batched with the substitutions of every window that share
    that token index (windows are centred on their variants, so most share one of two).
    With the spec's `delta_radius`, only the bases within it count, and only the tokens that hold them are re-read.
    """
    k, config = bundle.k, bundle.decoder.config
    kmer_start = bundle.tokenizer.kmer_start_id
    prefix, method, delta_radius = spec.prefix, spec.method, spec.delta_radius
    texts = [dna_prompt(prefix, seq[lo:hi], k) for lo, hi, _ in windows]
    ids = torch.tensor([bundle.tokenizer.encode(text) for text in texts], device=bundle.device)
    size = windows[0][1] - windows[0][0]
    n_tokens = -(-size // k)
    first = ids.shape[1] - n_tokens - 1  # index of <dna>
    real = torch.zeros(n_tokens * k, dtype=torch.bool, device=bundle.device)
    real[:size] = True
    real = real.reshape(n_tokens, k)
    allowed = torch.ones(len(windows), n_tokens * k, 4, dtype=torch.bool)
    for r, (lo, hi, _) in enumerate(windows):
        allowed[r, :size] = torch.from_numpy(mask_from_template(seq[lo:hi]))
    allowed = allowed.reshape(len(windows), n_tokens, k, 4).to(bundle.device)

    rows, width = len(windows), ids.shape[1]
    # the windows' cache, and per pass of substitutions one layer's prefix beside their branches
    bundle.check_fits(rows * width + bundle.pass_tokens, max(rows * width, bundle.pass_tokens),
                      rows * n_tokens + bundle.pass_tokens, f"{what} in {size:,}-base windows")
    by_token: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # token -> (window, position in it, base)
    for r, (lo, _, positions) in enumerate(windows):
        for pos0, bases in positions.items():
            q = pos0 - lo
            if seq[pos0] in "ACGT":
                by_token[q // k] += [(r, q, b) for b in range(4) if BASES[b] != seq[pos0] and BASES[b] in bases]
    # the tokens any delta reads: with a radius, none past the last substitution's reach (the model is causal,
    # so the tokens after it change nothing before it): about half of each centred window
    needed = _tokens_read(n_tokens, max((q for jobs in by_token.values() for _, q, _ in jobs), default=0), k,
                          delta_radius)
    cache = preallocated_cache(config, width)
    hidden = bundle.hidden_states(ids[:, : first + needed], cache)[:, first:]  # [rows, needed, H]: predicts token i
    ref_kmer_logits = bundle.kmer_logits(hidden)
    kmer_ids = ids[:, first + 1 : first + 1 + needed]  # [rows, needed]
    allowed, real = allowed[:, :needed], real[:needed]
    # per-token sums in float64: a window's log-likelihood is ~-1,000, where float32 steps by ~6e-5, and a
    # delta is a difference of two such sums
    ref_token_sums = _token_sums(ref_kmer_logits, allowed, kmer_ids - kmer_start, real, method)  # [rows, needed]

    deltas = [{p: np.full(4, np.nan) for p in positions} for _, _, positions in windows]
    base_at = torch.arange(needed * k, device=bundle.device).reshape(needed, k)
    # the bases that count: every one after the substitution, or those within `delta_radius` of it (the ones
    # before it read the same context either way: their terms do not change)
    reach = n_tokens * k if delta_radius is None else delta_radius
    for t, jobs in sorted(by_token.items()):
        last = min(needed - 1, max(q + reach for _, q, _ in jobs) // k)  # the last token holding a counted base
        new = last - t  # tokens each substitution re-reads: its own, then the reference's up to `last`
        # half a pass of branch tokens: each also attends over its window's prefix, about as long again in a
        # centred window (a whole-window scan measured 3% slower on a CPU with whole passes)
        for units in _branch_passes(jobs, new, bundle.pass_tokens // 2):
            checkpoint()  # one pass of substitutions is all a stop waits for
            chunk = [jobs[i] for unit in units for i in unit]
            which = torch.tensor([r for r, _, _ in chunk], device=bundle.device)
            alt_allowed = allowed[which, t].clone()  # [batch, k, 4]
            alt_digits = kmer_digits(kmer_ids[which, t] - kmer_start, k)
            for i, (_, q, b) in enumerate(chunk):
                alt_allowed[i, q % k] = False
                alt_allowed[i, q % k, b] = True
                alt_digits[i, q % k] = b
            last_base = torch.tensor([q + reach for _, q, _ in chunk], device=bundle.device)
            counted = real & (base_at <= last_base[:, None, None])  # [batch, needed, k]
            # the substituted token, scored from the reference pass
            alt_kmer = kmer_index(alt_digits)
            own = _token_sums(ref_kmer_logits[which, t], alt_allowed, alt_kmer, counted[:, t], method)
            before = ref_token_sums[which, t] if delta_radius is None else _token_sums(
                ref_kmer_logits[which, t], allowed[which, t], kmer_ids[which, t] - kmer_start, counted[:, t], method)
            change = own - before
            if new:  # the tokens after it, recomputed as branches of its window's cache cut before it
                # a token with an ambiguous base is <oov>, and stays so with another of its bases substituted
                # (ambiguous positions are not scanned): only a plain token's id follows its bases
                ref_token = kmer_ids[which, t]
                alt_token = torch.where(ref_token == bundle.tokenizer.oov_id, ref_token, kmer_start + alt_kmer)
                suffix = torch.cat([alt_token.unsqueeze(1), kmer_ids[which, t + 1 : last]], dim=1)  # [batch, new]
                slots, back = _branch_slots(units, bundle.device)
                later_hidden = bundle.continuations(cache, first + 1 + t, which[slots[:, 0]], suffix[slots])
                later_hidden = later_hidden.flatten(0, 1)[back]  # [batch, new, hidden]: predicts tokens t+1 .. last
                later_ids = kmer_ids[which, t + 1 : last + 1] - kmer_start
                later_counted = counted[:, t + 1 : last + 1]
                later = _token_sums(bundle.kmer_logits(later_hidden), allowed[which, t + 1 : last + 1],
                                    later_ids, later_counted, method)
                before = (ref_token_sums[which, t + 1 : last + 1] if delta_radius is None else
                          _token_sums(ref_kmer_logits[which, t + 1 : last + 1], allowed[which, t + 1 : last + 1],
                                      later_ids, later_counted, method))
                change = change + (later - before).sum(dim=1)
            for i, (r, q, b) in enumerate(chunk):
                deltas[r][windows[r][0] + q][b] = float(change[i])
    return deltas
