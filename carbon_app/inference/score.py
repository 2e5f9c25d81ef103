"""Per-base scoring of sequences and reference-vs-alternate variant scoring.

The reference score (spec section 5): right-pad to whole k-mers, prefix
`<dna>`, one forward pass; the logits at token t give the marginals of the k
bases of token t+1. A base's log-probability is its marginal (an N: the best
of the four); padding positions are never scored. The optional `chain` method
splits each token's exact log-likelihood into per-base conditional terms.

Variant scores follow the Carbon evaluations (section 7): a window centred on
the variant, LL = sum of per-base log-probabilities over the window,
delta = LL(alt) - LL(ref), negative when the alternative is less likely.
Coordinates are 1-based and inclusive throughout, as in VCF.

One deliberate improvement over a single window: a 6-mer model reads a
window in one tokenization frame, and which base of its 6-mer a variant falls
on moves a single-window delta by about half a nat, often across zero. So the
delta is the mean over the k frames (the window start shifted by 0..k-1
bases), each frame's windows scored in one batched forward pass, and the
spread over the frames is reported beside it. `frames=1` gives the single
centred window of the Carbon evaluations.

A second one, for indels: LL(alt) - LL(ref) over whole windows counts an
insertion's own bases as extra terms (about -1.4 nats each) and a deletion's
as missing ones, so insertions always look damaging and deletions benign,
whatever they do to their surroundings. The delta is therefore taken over
the columns both alleles have (the flanks, and substituted bases); the indel's
own terms are reported beside it (`inserted_ll`, `deleted_ll`,
`delta_whole_window`). For substitutions the two are the same number.

Which bases of a repeat are an indel's own is a matter of how it was written
(one T deleted from a run of nine can be written at nine places), so every
variant is first put in one normal form (`Variant.normalized`: trimmed and
left-aligned, as `bcftools norm` writes it), its windows are centred on the
whole stretch it can slide along and its radius counted from that stretch
(`Variant.span`), and the delta is the mean over every placement's alignment
of the columns (`VariantPasses.alignments`): each placement pairs the run's
other bases differently, and none is the true one. Every writing of one change,
on either strand, gets one delta.

A third, chosen per model: the delta summed within a radius of the variant
(`delta_radius`, in bases either side of the REF allele; both strands read, so a
strand-averaged score counts the bases downstream on each). Over a whole
window every later base's prediction moves a little when one base changes; in
a small model those far moves are mostly noise, wide and near chance on
held-out variants (docs/demo-models.md, "Where a score's noise lies"), and
they drown the local change a variant makes. A model's card names the radius
its held-out figures were read with (`quality.delta_radius`, none for the whole
window: real Carbon checkpoints, as in section 7); the context is the whole
window either way. Carbon's own ClinVar protocol is the narrowest such reading:
the variant's base alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.align import normalized, placed_columns, placements, slide_span
from ..core.coding import CodingSequence
from ..core.dna import BASES, clean_sequence, mask_from_template, reverse_complement
from ..core.hgvs import hgvs_change, hgvs_name, hgvs_parts
from ..core.tokens import dna_prompt
from ..errors import InputError
from ..model.backend import Backend
from .marginals import base_logprobs_from_marginals, chain_logprobs, log_marginals
from .provenance import Provenance
from .spec import (
    ScoringSpec,
    check_method,
    context_room_bases,
    resolve_spec,
)


@dataclass
class SequenceScore:
    sequence: str
    logprobs: np.ndarray  # [L] log-probability of each base (natural log)
    probs: np.ndarray  # [L, 4] per-base marginals in A, T, C, G order
    method: str
    prompt_text: str
    prompt_ids: list[int]

    @property
    def total(self) -> float:
        return float(self.logprobs.sum())

    @property
    def mean(self) -> float:
        return float(self.logprobs.mean())


def variant_method(model, method: str | None) -> str:
    """`method` checked, or (None) the model's own (`ModelCard.method`)."""
    return check_method(model.card.method if method is None else method)


@torch.inference_mode()
def _score_batch(bundle: Backend, seqs: list[str], prefix: str, methods: tuple[str, ...],
                 wanted: list[range] | None = None) -> list[tuple[dict[str, torch.Tensor], torch.Tensor, list[int]]]:
    """({method: per-base log-probs [L]} for each of `methods`, marginals [L, 4], prompt ids) of each clean
    sequence: one forward pass read every way asked (wherever the backend runs it: the same reading of the
    same log-probs). With `wanted` (per sequence, the bases that will be read) a backend may compute the
    tokens holding those bases alone, and the other bases are NaN."""
    k = bundle.k
    prompts = [bundle.tokenizer.encode(dna_prompt(prefix, seq, k)) for seq in seqs]
    first = len(bundle.tokenizer.encode(dna_prompt(prefix))) - 1  # <dna>: its logits predict the first k-mer
    rows = None if wanted is None else [{base // k for base in bases} for bases in wanted]
    out = []
    for seq, prompt, blocks in zip(seqs, prompts, bundle.window_logprobs(prompts, first, rows), strict=True):
        n_tokens = len(prompt) - 1 - first
        allowed = torch.ones(n_tokens * k, 4, dtype=torch.bool)
        allowed[: len(seq)] = torch.from_numpy(mask_from_template(seq))
        allowed = allowed.reshape(n_tokens, k, 4)
        per_base: dict[str, list[torch.Tensor]] = {method: [] for method in methods}
        probs = []
        for start, kmer_logprobs in blocks:
            marginals = log_marginals(kmer_logprobs)
            block_allowed = allowed[start : start + len(kmer_logprobs)].to(kmer_logprobs.device)
            for method, parts in per_base.items():
                parts.append(base_logprobs_from_marginals(marginals, block_allowed) if method == "marginal"
                             else chain_logprobs(kmer_logprobs, block_allowed))
            probs.append(marginals.exp())
        out.append(({method: torch.cat(parts).flatten()[: len(seq)].double().cpu()
                     for method, parts in per_base.items()},
                    torch.cat(probs).reshape(-1, 4)[: len(seq)].double().cpu(), prompt))
    return out


def score_sequence(
    bundle: Backend,
    sequence: str,
    species: str | None = None,
    region: str | None = None,
    method: str = "marginal",
    tags: str | None = None,
) -> SequenceScore:
    """Per-base log-probabilities of `sequence` under the model (after the tags `species` and `region`
    name, or after the literal tag text `tags`, as a generation's prompt had them)."""
    check_method(method)
    seq = clean_sequence(sequence)
    prefix = tags if tags is not None else bundle.tags.prefix(species, region)
    room = context_room_bases(bundle, prefix)
    if len(seq) > room:
        raise InputError(
            f"the sequence is {len(seq):,} bases; this model scores at most {room:,} bases at once "
            f"(context {bundle.max_tokens:,} tokens): score a shorter window"
        )
    logprobs, probs, ids = _score_batch(bundle, [seq], prefix, (method,))[0]
    return SequenceScore(sequence=seq, logprobs=logprobs[method].numpy(), probs=probs.numpy(), method=method,
                         prompt_text=dna_prompt(prefix, seq, bundle.k), prompt_ids=ids)


# -- variants -------------------------------------------------------------------------

_VARIANT = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z]+)\s*>\s*([A-Za-z]+)\s*$")
_VARIANT_FORM = "POS:REF>ALT, e.g. 120:A>G, 57:AT>A or 88:C>CTT, or in HGVS (c.20A>T with a coding sequence, g.120A>G)"


@dataclass(frozen=True)
class Variant:
    """A change at 1-based position `pos`: the bases `ref` there become `alt`."""

    pos: int
    ref: str
    alt: str
    hgvs: str = field(default="", compare=False)  # the HGVS name it was given by ('' for POS:REF>ALT)
    given: str = field(default="", compare=False)  # how it was written where that is not this form ('': this)

    def __post_init__(self) -> None:
        if self.pos < 1:
            raise InputError(f"variant positions start at 1, not {self.pos}")
        for allele, name in ((self.ref, "reference"), (self.alt, "alternate")):
            bad = next((b for b in allele if b not in "ACGT"), None)
            if bad:
                what = f"is '{bad}'" if allele == bad else f"'{allele}' has '{bad}'"
                raise InputError(f"the {name} allele {what}; alleles are A, C, G and T only")
        if self.ref == self.alt:
            raise InputError(f"the variant {self} changes nothing (REF equals ALT)")

    @classmethod
    def parse(cls, text: str, sequence: str | None = None, coding: CodingSequence | None = None) -> Variant:
        """A variant as POS:REF>ALT or, on `sequence` (and `coding` for a c. name), as an HGVS name."""
        if text is None or not str(text).strip():
            raise InputError(f"the variant is empty; write it as {_VARIANT_FORM}")
        named = hgvs_parts(text)
        if named:
            on, name = named
            if on:
                raise InputError(f"'{text}' names a reference sequence ({on}); here the variant lies on the sequence "
                                 f"given: write {name}")
            if sequence is None:
                raise InputError(f"an HGVS name ({name}) is read on the sequence it lies in, and none is given")
            return cls(*hgvs_change(name, sequence, coding), hgvs=name)
        match = _VARIANT.match(str(text))
        if not match:
            shown = " ".join(str(text).split())[:60]  # one line, whatever was pasted
            if len(re.findall(r">", shown)) > 1 and re.search(r"[,;\s]", shown.strip()):
                raise InputError(f"'{shown}' holds several variants; score one at a time, as {_VARIANT_FORM}")
            raise InputError(f"the variant '{shown}' is not of the form {_VARIANT_FORM}")
        return cls(int(match.group(1)), match.group(2).upper(), match.group(3).upper())

    def __str__(self) -> str:
        return f"{self.pos}:{self.ref}>{self.alt}"

    @property
    def written(self) -> str:
        """How it was written: the text given, an HGVS name, else POS:REF>ALT."""
        return self.given or self.hgvs or str(self)

    @property
    def label(self) -> str:
        """How to show it: as written, with its normal form (`normalized`) where that is written otherwise."""
        return self.written if self.written == str(self) else f"{self.written} ({self})"

    def normalized(self, sequence) -> Variant:
        """Its one form on `sequence` (`core.align.normalized`: trimmed, an indel left-aligned along its repeat
        and anchored, as `bcftools norm` writes it), remembering how it was written: every equivalent writing of
        one change is scored as this one."""
        pos0, ref, alt = normalized(sequence, self.pos - 1, self.ref, self.alt)
        if (pos0 + 1, ref, alt) == (self.pos, self.ref, self.alt):
            return self
        return Variant(pos0 + 1, ref, alt, self.hgvs, self.given or self.hgvs or str(self))

    def span(self, sequence) -> tuple[int, int]:
        """0-based, half-open: the bases it touches wherever along its repeat it is placed (`slide_span`)."""
        return slide_span(sequence, self.pos - 1, self.ref, self.alt)


@dataclass
class VariantScore:
    variant: Variant
    delta: float  # LL(alt) - LL(ref) over the columns both alleles have, natural log, mean over the frames
    ll_ref: float  # of the whole window, mean over the frames
    ll_alt: float
    window_start: int  # 1-based, inclusive, in the input sequence: the span all frames lie in
    window_end: int
    ref_window: str  # that span, and the same with the variant applied
    alt_window: str
    ref_logprobs: list[float]  # per base of ref_window, mean over the frames that score it
    alt_logprobs: list[float]  # per base of alt_window
    aligned_ref_pos: list[int | None]  # 1-based sequence position of each aligned column (None: inserted)
    aligned_ref_logprobs: list[float | None]
    aligned_alt_logprobs: list[float | None]
    site_probs_ref: dict[str, float]  # A/C/G/T probabilities at the variant's first base, ref context
    site_probs_alt: dict[str, float]
    method: str
    strand_average: bool
    frame_deltas: list[float] = field(default_factory=list)  # one delta per tokenization frame
    delta_radius: int | None = None  # bases either side of the variant the delta sums (None: the whole window)
    frame_bases: int = 0  # bases in each frame's window
    delta_whole_window: float = 0.0  # LL(alt) - LL(ref) with an indel's own bases: = delta + inserted - deleted
    inserted_ll: float = 0.0  # log-probability of the bases only the alternate has (an insertion's)
    deleted_ll: float = 0.0  # log-probability of the bases only the reference has (a deletion's)
    species_tag: str = ""
    region_tag: str = ""
    prompt_text_ref: str = ""
    prompt_ids_ref: list[int] = field(default_factory=list)
    prompt_text_alt: str = ""
    prompt_ids_alt: list[int] = field(default_factory=list)
    spec: ScoringSpec | None = None  # the setup it was scored with, as used
    touched_start: int = 0  # 1-based, inclusive: the bases the change touches along its repeat (`Variant.span`)
    touched_end: int = 0
    provenance: Provenance | None = None  # the app, the model, its weights and the setup, as every file names them

    @property
    def hgvs_name(self) -> str:
        """Its HGVS g. name (3'-shifted, a duplication as `dup`: `core.hgvs.hgvs_name`), numbered as its window's
        positions are (on a genome, the contig's)."""
        return hgvs_name(self.ref_window, self.variant.pos - self.window_start, self.variant.ref, self.variant.alt,
                         lambda p: str(self.window_start + p))

    @property
    def aligned_delta(self) -> list[float | None]:
        return [None if r is None or a is None else a - r
                for r, a in zip(self.aligned_ref_logprobs, self.aligned_alt_logprobs, strict=True)]

    @property
    def frame_spread(self) -> float:
        """Standard deviation of the delta over the frames (0 for one frame)."""
        return float(np.std(self.frame_deltas)) if self.frame_deltas else 0.0

    @property
    def clear_effect(self) -> bool:
        """Whether every frame agrees on the direction: with frames of both signs there is no clear effect."""
        return bool(self.frame_deltas) and (min(self.frame_deltas) > 0 or max(self.frame_deltas) < 0)

    @property
    def direction(self) -> str:
        """'less' or 'more' (likely, the alternate than the reference) when every frame agrees, else 'unclear'."""
        if not self.clear_effect:
            return "unclear"
        return "less" if self.delta < 0 else "more"

    def to_dict(self) -> dict:
        from dataclasses import asdict

        data = asdict(self)
        data["variant"] = str(self.variant)  # POS:REF>ALT, normalised (`Variant.normalized`)
        data["given"] = self.variant.written  # as it was written
        data["hgvs"] = self.variant.hgvs  # the HGVS name it was given as, '' if none
        data["hgvs_name"] = self.hgvs_name  # its HGVS g. name, as HGVS writes it
        data["aligned_delta"] = self.aligned_delta
        data["frame_spread"] = self.frame_spread
        data["clear_effect"] = self.clear_effect
        data["direction"] = self.direction
        data["provenance"] = self.provenance.to_dict() if self.provenance else None
        return data


def variant_window(length: int, pos0: int, ref_len: int, window: int) -> tuple[int, int]:
    """0-based half-open [start, end) of a window of about `window` bases centred on the REF allele.

    Both flanks get the same number of bases (the window shrinks by one base
    when it cannot), and the window slides inward at the sequence ends. This
    makes the window of the reverse-complemented sequence the exact mirror,
    so strand-averaged scores do not depend on which strand was given.
    """
    if window >= length:
        return 0, length
    flank = max((window - ref_len) // 2, 0)
    size = ref_len + 2 * flank
    start = min(max(pos0 - flank, 0), length - size)
    return start, start + size


def frame_windows(length: int, pos0: int, ref_len: int, window: int, frames: int) -> tuple[int, int, list[int], int]:
    """Where a variant's frames are read: (span start, span end, each frame's window start within the
    span, bases per window), 0-based, half-open.

    The span is the centred window (`variant_window`) of `window + frames - 1`
    bases; each frame's window is `frames - 1` bases shorter, started 0..frames-1
    bases in, so each reads the span in another k-mer frame. Only windows that
    hold the whole REF allele count (near a sequence end that can be fewer).
    The set of windows of the mirrored span is the mirror of this set, which
    keeps strand averaging exact. Every path that scores a variant (the Variant
    tab, scans, batches) reads it in these windows, so they all agree.
    """
    start, end = variant_window(length, pos0, ref_len, window + frames - 1)
    offset, size = pos0 - start, end - start - (frames - 1)
    starts = [f for f in range(frames) if f <= offset and offset + ref_len <= f + size]
    if not starts:  # a span too short for every frame to hold the variant: one window, the whole span
        starts, size = [0], end - start
    return start, end, starts, size


@dataclass
class VariantPasses:
    """One variant's forward passes, read with each of `methods`: its reference and alternate window in each
    tokenization frame (and on both strands when the spec averages them), and the columns that align them.
    `score_variant` reads one delta from them; an evaluation reads several (other methods, other radii) from
    the same passes."""

    variant: Variant
    spec: ScoringSpec
    start: int  # 0-based, half-open span of the sequence all frames lie in
    end: int
    starts: list[int]  # each frame's window start within the span
    size: int  # bases in each frame's reference window
    ref_span: str
    alt_span: str
    columns: list[tuple[int | None, int | None]]  # (span index in REF, in ALT) of each aligned column, as shown
    # the columns of every placement of an indel along its repeat, 5' to 3' (`columns` is the first): the
    # alleles line up as well at each, so the delta is their mean
    alignments: list[list[tuple[int | None, int | None]]]
    scored: list  # per window: ({method: per-base log-probs}, marginals, prompt ids), forward strand first
    windows: list[str]
    touched: tuple[int, int]  # span indices (half-open) of the bases the change touches along its repeat

    @property
    def offset(self) -> int:
        return self.variant.pos - 1 - self.start

    def tracks(self, method: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each frame's per-base track of the reference and of the alternate window, strand-averaged."""
        tracks = [logprobs[method] for logprobs, _, _ in self.scored]
        if self.spec.strand_average:
            half = len(tracks) // 2
            tracks = [(f + r.flip(0)) / 2 for f, r in zip(tracks[:half], tracks[half:], strict=True)]
        return tracks[0::2], tracks[1::2]

    def frame_deltas(self, method: str, within: int | None) -> list[float]:
        """Each frame's delta over the columns both alleles have (flanks and substituted bases) within `within`
        bases of the bases the change touches (`touched`: an indel's along its whole repeat; None: the whole
        window), the mean over the indel's placements (`alignments`): an indel's own bases would otherwise add
        or remove whole per-base terms and swamp it, and which bases of a repeat count as its own is a matter
        of how it was written, not of what it does."""
        lo, hi = self.touched
        tracks = list(zip(self.starts, *self.tracks(method), strict=True))
        deltas = np.zeros(len(tracks))
        for columns in self.alignments:
            paired = torch.tensor([(r, a) for r, a in columns if r is not None and a is not None])
            for i, (f, ref_f, alt_f) in enumerate(tracks):
                keep = (paired[:, 0] >= f) & (paired[:, 0] < f + self.size)
                if within is not None:
                    keep &= (paired[:, 0] >= lo - within) & (paired[:, 0] < hi + within)
                inside = paired[keep]
                deltas[i] += float(alt_f[inside[:, 1] - f].sum() - ref_f[inside[:, 0] - f].sum())
        return [float(d) for d in deltas / len(self.alignments)]

    def delta(self, method: str, within: int | None) -> float:
        """The delta read with `method` within `within` bases: the mean over the frames."""
        return float(np.mean(self.frame_deltas(method, within)))


def variant_passes(bundle: Backend, sequence: str, variant: str | Variant, spec: ScoringSpec,
                   methods: tuple[str, ...] | None = None, delta_only: bool = False) -> VariantPasses:
    """The forward passes that score `variant` in `sequence` as `spec` (resolved) says, read with `methods`
    (default: the spec's own), checked: the variant against the sequence, its alleles against the context.
    `delta_only`: only the spec's delta will be read, so a server is asked for the bases within its radius
    alone (the tracks elsewhere are NaN)."""
    methods = (spec.method,) if methods is None else tuple(dict.fromkeys(methods))
    for method in methods:
        check_method(method)
    seq = clean_sequence(sequence, what="reference sequence")
    var = variant if isinstance(variant, Variant) else Variant.parse(variant, seq)
    pos0, lr = var.pos - 1, len(var.ref)
    if pos0 + lr > len(seq):
        where = f"position {var.pos}" if lr == 1 else f"positions {var.pos}-{var.pos + lr - 1}"
        raise InputError(f"variant {var} needs {where}, beyond the {len(seq):,}-base sequence")
    present = seq[pos0 : pos0 + lr]
    if present != var.ref:
        where = f"position {var.pos}" if lr == 1 else f"positions {var.pos}-{var.pos + lr - 1}"
        raise InputError(
            f"the reference has '{present}' at {where}, not '{var.ref}' as variant {var} says"
        )
    # one form for every writing of the change, placed by the whole stretch it can slide along: the windows are
    # centred on that stretch and the delta sums the bases within the radius of it, wherever it was written
    var = var.normalized(seq)
    pos0, lr, la = var.pos - 1, len(var.ref), len(var.alt)
    span_lo, span_hi = var.span(seq)
    # the spec's window is what the context holds beside a substitution; an insertion's longer alternate
    # window takes its extra bases from it
    room = context_room_bases(bundle, spec.prefix)
    if la >= room:  # not even the alternate allele alone fits beside the tags
        raise InputError(f"the {la:,}-base alternate allele does not fit the model's context ({room:,} bases "
                         "with the reference allele): score a shorter insertion")
    window = min(spec.window, room - max(la - lr, 0))
    if window < span_hi - span_lo:
        what = (f"{lr}-base reference allele" if span_hi - span_lo == lr else
                f"{span_hi - span_lo}-base repeat the change can slide along")
        raise InputError(f"the {what} does not fit the model's {window:,}-base window")
    start, end, starts, size = frame_windows(len(seq), span_lo, span_hi - span_lo, window, spec.frames)
    ref_span = seq[start:end]
    offset = pos0 - start
    alt_span = ref_span[:offset] + var.alt + ref_span[offset + lr :]
    alt_size = size + la - lr
    windows = [w for f in starts for w in (ref_span[f : f + size], alt_span[f : f + alt_size])]
    wanted = None
    if delta_only and spec.delta_radius is not None:  # the bases `frame_deltas` sums, in each window
        near, lo, hi = spec.delta_radius, span_lo - start, span_hi - start
        wanted = [range(max(0, lo - near - f), min(width, hi + near + longer - f))
                  for f in starts for width, longer in ((size, 0), (alt_size, la - lr))]
    if spec.strand_average:
        forward = windows
        windows = forward + [reverse_complement(w) for w in forward]
        if wanted is not None:  # the same bases, read from the other end
            wanted += [range(len(w) - bases.stop, len(w) - bases.start)
                       for w, bases in zip(forward, wanted, strict=True)]
    alignments = [placed_columns(at - start, removed, added, len(ref_span))
                  for at, removed, added in placements(seq, pos0, var.ref, var.alt)]
    return VariantPasses(var, spec, start, end, starts, size, ref_span, alt_span, alignments[0], alignments,
                         _score_batch(bundle, windows, spec.prefix, methods, wanted), windows,
                         (span_lo - start, span_hi - start))


def score_variant(bundle: Backend, sequence: str, variant: str | Variant, spec: ScoringSpec | None = None,
                  **settings) -> VariantScore:
    """Score `variant` in `sequence` as `spec` says (else `resolve_spec` of `settings`: window, frames,
    strand_average, method, delta_radius, species, region; the model's own for the rest): delta = LL(alt
    window) - LL(ref window), averaged over the spec's tokenization frames and strands and summed within its
    radius of the variant."""
    spec = resolve_spec(bundle, spec, **settings)
    passes = variant_passes(bundle, sequence, variant, spec)
    starts, columns, scored, offset = passes.starts, passes.columns, passes.scored, passes.offset
    ref_tracks, alt_tracks = passes.tracks(spec.method)
    whole = [float(alt_f.sum() - ref_f.sum()) for ref_f, alt_f in zip(ref_tracks, alt_tracks, strict=True)]
    own = []  # (inserted, deleted) bases' log-probability, mean over the placements, per frame
    for f, ref_f, alt_f in zip(starts, ref_tracks, alt_tracks, strict=True):
        terms = [(float(alt_f[torch.tensor([a for r, a in cols if r is None], dtype=torch.long) - f].sum()),
                  float(ref_f[torch.tensor([r for r, a in cols if a is None], dtype=torch.long) - f].sum()))
                 for cols in passes.alignments]
        own.append(tuple(np.mean(terms, axis=0)))
    frame_deltas = passes.frame_deltas(spec.method, spec.delta_radius)

    def mean_track(per_frame: list[torch.Tensor], length: int) -> torch.Tensor:
        """Per-base mean over the frames whose window covers each base of the span."""
        total, count = torch.zeros(length, dtype=torch.float64), torch.zeros(length, dtype=torch.float64)
        for f, track in zip(starts, per_frame, strict=True):
            total[f : f + len(track)] += track
            count[f : f + len(track)] += 1
        return total / count.clamp_min(1)

    ref_track = mean_track(ref_tracks, len(passes.ref_span))
    alt_track = mean_track(alt_tracks, len(passes.alt_span))
    forward = scored[: 2 * len(starts)]

    def site(marginals: list[torch.Tensor]) -> dict[str, float]:
        at = torch.stack([m[offset - f] for f, m in zip(starts, marginals, strict=True)]).mean(0)
        return {base: float(at[BASES.index(base)]) for base in "ACGT"}

    return VariantScore(
        variant=passes.variant,
        delta=float(np.mean(frame_deltas)),
        ll_ref=float(np.mean([float(t.sum()) for t in ref_tracks])),
        ll_alt=float(np.mean([float(t.sum()) for t in alt_tracks])),
        window_start=passes.start + 1,
        window_end=passes.end,
        ref_window=passes.ref_span,
        alt_window=passes.alt_span,
        ref_logprobs=ref_track.tolist(),
        alt_logprobs=alt_track.tolist(),
        aligned_ref_pos=[None if r is None else passes.start + r + 1 for r, _ in columns],
        aligned_ref_logprobs=[None if r is None else float(ref_track[r]) for r, _ in columns],
        aligned_alt_logprobs=[None if a is None else float(alt_track[a]) for _, a in columns],
        site_probs_ref=site([probs for _, probs, _ in forward[0::2]]),
        site_probs_alt=site([probs for _, probs, _ in forward[1::2]]),
        method=spec.method,
        strand_average=spec.strand_average,
        frame_deltas=frame_deltas,
        delta_radius=spec.delta_radius,
        frame_bases=passes.size,
        delta_whole_window=float(np.mean(whole)),
        inserted_ll=float(np.mean([i for i, _ in own])),
        deleted_ll=float(np.mean([d for _, d in own])),
        species_tag=bundle.tags.species_tag(spec.species),
        region_tag=bundle.tags.region_tag(spec.region),
        spec=spec,
        touched_start=passes.start + passes.touched[0] + 1,
        touched_end=passes.start + passes.touched[1],
        prompt_text_ref=dna_prompt(spec.prefix, passes.windows[0], bundle.k),
        prompt_ids_ref=forward[0][2],
        prompt_text_alt=dna_prompt(spec.prefix, passes.windows[1], bundle.k),
        prompt_ids_alt=forward[1][2],
        provenance=Provenance.of(bundle, spec),
    )
