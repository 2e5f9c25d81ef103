"""Scores at genome coordinates: one variant, or a batch whose substitutions share their windows.

A batch is a plain function over a list of variants: substitutions are grouped
into clusters on each contig and every cluster is scored through the scan's
shared windows (a window serves each substitution whose frames it reads);
indels and multi-base changes are scored one by one. Either way each variant
is read in exactly the windows a single `score_at` would read it in, so the
deltas are the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from ..core.align import normalized
from ..core.coding import CodingSequence
from ..core.dna import BASES
from ..core.stopping import checkpoint
from ..errors import BackendError
from ..inference.annotate import VariantReport, describe_stages, last
from ..inference.context import ScoreContext, rank_in, score_context
from ..inference.scan import mean_substitution_deltas
from ..inference.score import Variant, VariantScore, frame_windows, variant_passes
from ..inference.spec import ScoringSpec, resolve_spec
from ..model.backend import Backend
from .coordinates import GenomeWindow, GenomicVariant, VariantProblem, cut_window, parse_genomic
from .reference import ContigBases, Reference


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

    @property
    def placed(self) -> VariantScore:
        """The engine's result with its positions on the contig (1-based), as plots and tables show it."""
        s = self.score
        given = self.variant.hgvs or str(self.variant)
        return replace(s, variant=Variant(self.offset + s.variant.pos, s.variant.ref, s.variant.alt,
                                          self.variant.hgvs, given if s.variant.given else ""),
                       window_start=self.window_start, window_end=self.window_end,
                       touched_start=self.offset + s.touched_start, touched_end=self.offset + s.touched_end,
                       aligned_ref_pos=[None if p is None else p + self.offset for p in s.aligned_ref_pos])

    def to_dict(self) -> dict:
        """The result with every position on the contig (`placed`), the genome and contig named."""
        data = self.placed.to_dict()
        data.update(genome=self.reference, contig=self.contig, genomic_variant=str(self.variant),
                    hgvs=self.variant.hgvs, genome_window_start=self.window_start,
                    genome_window_end=self.window_end, notes=self.notes)
        return data


def _span(spec: ScoringSpec) -> int:
    """Bases a variant's windows reach over, all frames together."""
    return spec.window + spec.frames - 1


def score_at(bundle: Backend, reference: Reference, variant: str | GenomicVariant,
             spec: ScoringSpec | None = None, **settings) -> GenomicScore:
    """Score one variant at genome coordinates (any form `parse_genomic` reads), as `spec` says (else
    `resolve_spec` of `settings`: the model's own for what is not given)."""
    return describe_at(bundle, reference, variant, spec=spec, **settings)[0]


def describe_at(bundle: Backend, reference: Reference, variant: str | GenomicVariant, cds: str | None = None,
                context=0, progress: Callable[[float], None] | None = None, spec: ScoringSpec | None = None,
                **settings) -> tuple[GenomicScore, VariantReport]:
    """One variant at coordinates, scored as `spec` says (else `resolve_spec` of `settings`), with its
    consequence when `cds` (in contig coordinates, as `CodingSequence.parse` reads it) is given and its
    context when `context` > 0 bases either side."""
    spec = resolve_spec(bundle, spec, context=context, **settings)
    return last(describe_at_stages(bundle, reference, variant, spec, cds, progress))


def describe_at_stages(bundle: Backend, reference: Reference, variant: str | GenomicVariant, spec: ScoringSpec,
                       cds: str | None = None, progress: Callable[[float], None] | None = None
                       ) -> Iterator[tuple[GenomicScore, VariantReport]]:
    """`describe_at` in stages, as `describe_stages`: the score as soon as it is known, then with its context."""
    var = variant if isinstance(variant, GenomicVariant) else parse_genomic(variant, reference, cds)
    cut = cut_window(reference, var, _span(spec), extra=spec.context)
    contig = ContigBases(reference, cut.contig)
    coding = CodingSequence.parse(cds, contig) if cds and cds.strip() else None  # checked before any work
    consequence = coding.change_consequence(contig, var.pos - 1, var.ref, var.alt) if coding else None
    for report in describe_stages(bundle, cut.bases, cut.local(var), spec, None, progress):
        report.consequence = consequence  # in contig coordinates, which the cut window's report cannot know
        yield GenomicScore(var, reference.name, cut.contig, cut.start, report.score, cut.notes), report


@dataclass
class Outcome:
    """What became of one variant of a batch: its delta, or the problem that stopped it."""

    delta: float | None = None
    problem: str | None = None  # a short code (VCF's CARBON_PROBLEM)
    message: str | None = None  # the sentence for a person
    notes: list[str] = field(default_factory=list)
    context: ScoreContext | None = None  # the delta ranked among the substitutions near it, when asked
    normal: str | None = None  # its normal form on the contig, POS:REF>ALT (`Variant.normalized`)
    window: tuple[int, int] | None = None  # the contig span its windows lie in (1-based, inclusive), as scored


def score_batch(bundle: Backend, reference: Reference, variants: list[GenomicVariant],
                spec: ScoringSpec | None = None, progress: Callable[[int], None] | None = None,
                **settings) -> list[Outcome]:
    """An Outcome per variant, in order, each scored as `spec` says (else `resolve_spec` of `settings`); a
    variant that cannot be scored is named, never fatal. With the spec's `context` > 0 each delta is also
    ranked among the substitutions within that many bases. `progress(n)` is told each time n more variants
    are done."""
    spec = resolve_spec(bundle, spec, **settings)
    if not bundle.capabilities.holds_cache:
        return _score_read_alone(bundle, reference, variants, spec, progress)
    radius, span = spec.context, _span(spec)
    outcomes = [Outcome() for _ in variants]
    substitutions: dict[str, list[int]] = defaultdict(list)  # contig -> indices of variants
    for i, var in enumerate(variants):
        checkpoint()
        try:
            cut = cut_window(reference, var, span, extra=radius)
        except VariantProblem as exc:
            outcomes[i] = Outcome(problem=exc.code, message=str(exc))
            _tell(progress, 1)
            continue
        outcomes[i].notes, outcomes[i].normal = cut.notes, _normal_form(cut, var)
        if len(var.ref) == 1 and len(var.alt) == 1:
            substitutions[cut.contig].append(i)
            continue
        report = last(describe_stages(bundle, cut.bases, cut.local(var), spec))
        outcomes[i].delta, outcomes[i].context = report.score.delta, report.context
        outcomes[i].window = (cut.start + report.score.window_start, cut.start + report.score.window_end)
        _tell(progress, 1)
    for contig, indices in substitutions.items():
        for cluster in _clusters(sorted(indices, key=lambda i: variants[i].pos), variants, span + 2 * radius):
            told = 0  # a cluster can hold a whole chunk: its variants are told as its windows are read

            def partly(fraction: float, size: int = len(cluster)) -> None:
                nonlocal told
                now = min(size, int(fraction * size))
                if now > told:
                    _tell(progress, now - told)
                    told = now

            _score_cluster(bundle, reference, contig, cluster, variants, outcomes, spec, partly if progress else None)
            if len(cluster) > told:
                _tell(progress, len(cluster) - told)
    return outcomes


def _score_read_alone(bundle: Backend, reference: Reference, variants: list[GenomicVariant], spec: ScoringSpec,
                      progress) -> list[Outcome]:
    """A batch on a backend that lends no KV cache (a server): each variant read in its own windows, as
    `score_at` reads it (the scan's shared windows need the cache; the deltas are the same), and of each
    window only the tokens its delta sums, as many variants at once as the backend's `each` runs; with the
    spec's context, each delta is ranked among the substitutions that close, each read the same way. A
    variant the backend fails on (a server's error, a timeout) is flagged with the reason and the batch
    goes on."""
    span, radius = _span(spec), spec.context

    def one(var: GenomicVariant) -> Outcome:
        checkpoint()
        try:
            cut = cut_window(reference, var, span, extra=radius)
            passes = variant_passes(bundle, cut.bases, cut.local(var), spec, delta_only=True)
            outcome = Outcome(delta=passes.delta(spec.method, spec.delta_radius), notes=cut.notes,
                              window=(cut.start + passes.start + 1, cut.start + passes.end),
                              normal=_normal_form(cut, var))
            scored = passes.variant  # its normal form
            if radius and len(scored.ref) == len(scored.alt):  # an indel is not ranked among substitutions
                ranked = score_context(bundle, cut.bases, scored.pos, len(scored.ref), scored.alt, outcome.delta,
                                       spec)
                outcome.context = replace(ranked, start=cut.start + ranked.start, end=cut.start + ranked.end)
        except VariantProblem as exc:
            return Outcome(problem=exc.code, message=str(exc))
        except BackendError as exc:
            return Outcome(problem="server_error", message=str(exc), notes=cut.notes)
        finally:
            _tell(progress, 1)
        return outcome

    return bundle.each(one, variants)


def _normal_form(cut: GenomeWindow, var: GenomicVariant) -> str:
    """`var`'s normal form (`core.align.normalized`) as POS:REF>ALT on its contig: the stretch cut around it
    holds a whole span either side, room for any repeat a window's scoring would read along."""
    at, ref, alt = normalized(cut.bases, var.pos - 1 - cut.start, var.ref, var.alt)
    return f"{cut.start + at + 1}:{ref}>{alt}"


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


def _score_cluster(bundle, reference, contig, cluster, variants, outcomes, spec: ScoringSpec,
                   progress: Callable[[float], None] | None = None) -> None:
    """The substitutions of one cluster from one stretch of genome, through the scan's shared windows
    (with a context radius, every substitution within it too, each scored once however many variants
    rank against it). Each is read in the spec's windows centred on it, as `score_at` reads it: the
    stretch holds every one of them whole, so which variants share a cluster never changes a delta."""
    radius = spec.context
    margin = _span(spec) + 2 + radius  # as in cut_window: room for windows slid inward at a contig's end
    start = max(0, variants[cluster[0]].pos - 1 - margin)
    bases = reference.fetch(contig, start, variants[cluster[-1]].pos + margin)
    wanted: dict[int, str] = defaultdict(str)  # position in `bases` -> alternates asked for there
    for i in cluster:
        pos = variants[i].pos - 1 - start
        wanted[pos] += variants[i].alt
        for near in range(max(0, pos - radius), min(len(bases), pos + radius + 1)) if radius else ():
            wanted[near] = BASES
    positions = sorted(wanted)
    deltas = np.full((len(bases), 4), np.nan)
    deltas[positions] = mean_substitution_deltas(bundle, bases, positions, spec, wanted, progress)
    length = reference.lengths[contig]
    for i in cluster:
        pos, alt = variants[i].pos - 1 - start, variants[i].alt
        outcomes[i].delta = float(deltas[pos, BASES.index(alt)])
        first, last, _, _ = frame_windows(length, variants[i].pos - 1, 1, spec.window, spec.frames)
        outcomes[i].window = (first + 1, last)  # where score_at reads it: the same centring on the contig
        if radius:
            # ranked on the contig: the stretch's first base is its base `start`
            outcomes[i].context = rank_in(deltas, start, start + pos, 1, alt, outcomes[i].delta, radius)
