"""Scores at genome coordinates: one variant, or a batch whose substitutions share their windows.

A batch is a plain function over a list of variants: substitutions are grouped
into clusters on each contig and every cluster is scored through the scan's
shared windows (a window serves each substitution whose frames it reads);
indels and multi-base changes are scored one by one. Either way each variant
is read in exactly the windows a single `score_at` would read it in, so the
deltas are the same.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core.dna import BASES, reverse_complement
from ..inference.scan import substitution_deltas
from ..inference.score import (
    DEFAULT_WINDOW,
    VariantScore,
    _check_method,
    context_room_bases,
    resolve_frames,
    score_variant,
)
from ..model.bundle import ModelBundle
from .coordinates import GenomicVariant, VariantProblem, cut_window, parse_genomic
from .reference import Reference

_COMPLEMENT = {"A": "T", "C": "G", "G": "C", "T": "A"}


@dataclass
class GenomicScore:
    """A variant's score at coordinates: the engine's result on the cut window, placed back on the genome."""

    variant: GenomicVariant
    reference: str
    contig: str  # as the reference names it
    offset: int  # 0-based contig position of the cut window's first base
    score: VariantScore
    notes: list[str] = field(default_factory=list)

    @property
    def delta(self) -> float:
        return self.score.delta

    @property
    def window_start(self) -> int:
        return self.offset + self.score.window_start

    @property
    def window_end(self) -> int:
        return self.offset + self.score.window_end

    def to_dict(self) -> dict:
        data = self.score.to_dict()
        data.update(genome=self.reference, contig=self.contig, genomic_variant=str(self.variant),
                    genome_window_start=self.window_start, genome_window_end=self.window_end, notes=self.notes,
                    aligned_ref_pos=[None if p is None else p + self.offset for p in self.score.aligned_ref_pos])
        return data


def _span(bundle: ModelBundle, window: int, frames: int, prefix: str) -> int:
    return min(window, context_room_bases(bundle, prefix)) + frames - 1


def score_at(bundle: ModelBundle, reference: Reference, variant: str | GenomicVariant,
             window: int = DEFAULT_WINDOW, strand_average: bool = False, species: str | None = None,
             region: str | None = None, method: str = "marginal", frames: int | None = None) -> GenomicScore:
    """Score one variant at genome coordinates (any form `parse_genomic` reads)."""
    var = variant if isinstance(variant, GenomicVariant) else parse_genomic(variant)
    frames = resolve_frames(bundle, frames)
    span = _span(bundle, window, frames, bundle.tags.prefix(species, region))
    cut = cut_window(reference, var, span)
    scored = score_variant(bundle, cut.bases, cut.local(var), window=window, strand_average=strand_average,
                           species=species, region=region, method=method, frames=frames)
    return GenomicScore(var, reference.name, cut.contig, cut.start, scored, cut.notes)


@dataclass
class Outcome:
    """What became of one variant of a batch: its delta, or the problem that stopped it."""

    delta: float | None = None
    problem: str | None = None  # a short code (VCF's CARBON_PROBLEM)
    message: str | None = None  # the sentence for a person
    notes: list[str] = field(default_factory=list)


def score_batch(bundle: ModelBundle, reference: Reference, variants: list[GenomicVariant],
                window: int = DEFAULT_WINDOW, strand_average: bool = False, species: str | None = None,
                region: str | None = None, method: str = "marginal", frames: int | None = None,
                progress: Callable[[int], None] | None = None) -> list[Outcome]:
    """An Outcome per variant, in order; a variant that cannot be scored is named, never fatal.
    `progress(n)` is told each time n more variants are done."""
    _check_method(method)
    frames = resolve_frames(bundle, frames)
    prefix = bundle.tags.prefix(species, region)
    span = _span(bundle, window, frames, prefix)
    outcomes = [Outcome() for _ in variants]
    substitutions: dict[str, list[int]] = defaultdict(list)  # contig -> indices of variants
    for i, var in enumerate(variants):
        try:
            cut = cut_window(reference, var, span)
        except VariantProblem as exc:
            outcomes[i] = Outcome(problem=exc.code, message=str(exc))
            _tell(progress, 1)
            continue
        outcomes[i].notes = cut.notes
        if len(var.ref) == 1 and len(var.alt) == 1:
            substitutions[cut.contig].append(i)
            continue
        scored = score_variant(bundle, cut.bases, cut.local(var), window=window, strand_average=strand_average,
                               species=species, region=region, method=method, frames=frames)
        outcomes[i].delta = scored.delta
        _tell(progress, 1)
    for contig, indices in substitutions.items():
        for cluster in _clusters(sorted(indices, key=lambda i: variants[i].pos), variants, span):
            _score_cluster(bundle, reference, contig, cluster, variants, outcomes, window, frames, prefix, method,
                           strand_average, span)
            _tell(progress, len(cluster))
    return outcomes


def _tell(progress, n: int) -> None:
    if progress:
        progress(n)


def _clusters(indices: list[int], variants: list[GenomicVariant], span: int) -> list[list[int]]:
    """Runs of substitutions close enough (within a window) to share windows."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and variants[i].pos - variants[runs[-1][-1]].pos <= span:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _score_cluster(bundle, reference, contig, cluster, variants, outcomes, window, frames, prefix, method,
                   strand_average, span) -> None:
    """The substitutions of one cluster from one stretch of genome, through the scan's shared windows."""
    margin = span + 2  # as in cut_window: room for windows slid inward at a contig's end
    start = max(0, variants[cluster[0]].pos - 1 - margin)
    bases = reference.fetch(contig, start, variants[cluster[-1]].pos + margin)
    wanted: dict[int, str] = defaultdict(str)  # position in `bases` -> alternates asked for there
    for i in cluster:
        wanted[variants[i].pos - 1 - start] += variants[i].alt
    positions = sorted(wanted)
    row = {p: r for r, p in enumerate(positions)}
    with warnings.catch_warnings():  # a base not asked for is NaN in every frame, by design
        warnings.simplefilter("ignore", RuntimeWarning)
        forward = np.nanmean(substitution_deltas(bundle, bases, positions, window, frames, prefix, method,
                                                 alternates=wanted)[0], 0)
        if strand_average:  # the same windows read from the other strand: positions mirrored, bases complemented
            mirrored = {len(bases) - 1 - p: "".join(_COMPLEMENT[b] for b in alts) for p, alts in wanted.items()}
            back = np.nanmean(substitution_deltas(bundle, reverse_complement(bases), sorted(mirrored), window, frames,
                                                  prefix, method, alternates=mirrored)[0], 0)[::-1]
    for i in cluster:
        r, alt = row[variants[i].pos - 1 - start], variants[i].alt
        delta = forward[r, BASES.index(alt)]
        if strand_average:
            delta = (delta + back[r, BASES.index(_COMPLEMENT[alt])]) / 2
        outcomes[i].delta = float(delta)
