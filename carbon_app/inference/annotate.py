"""One variant, described as a biologist reads it: its delta, its consequence for a protein, its context.

The delta comes from `score_variant`; when a coding sequence is known the
substitution's consequence is named (synonymous, missense p.Glu7Val, ...);
with a context radius the delta is ranked among every possible substitution
that close (`context.score_context`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ..core.coding import CodingSequence, Consequence
from ..core.dna import clean_sequence
from ..model.backend import Backend
from .context import ScoreContext, score_context
from .scan import ScanResult
from .score import Variant, VariantScore, score_variant
from .spec import ScoringSpec, resolve_spec

T = TypeVar("T")


@dataclass
class VariantReport:
    score: VariantScore
    consequence: Consequence | None = None
    context: ScoreContext | None = None
    unranked: str = ""  # why a context was asked for and not given (an indel is not ranked among substitutions)

    def to_dict(self) -> dict:
        data = self.score.to_dict()
        if self.consequence:
            data["consequence"] = {"kind": self.consequence.kind, "protein_change": self.consequence.protein_change,
                                   "ref_codon": self.consequence.ref_codon, "alt_codon": self.consequence.alt_codon,
                                   "hgvs_c": self.consequence.hgvs_c, "text": str(self.consequence)}
        if self.context:
            data["context"] = self.context.to_dict()
        if self.unranked:
            data["unranked"] = self.unranked
        return data


def consequence_of(coding: CodingSequence | None, sequence, variant: Variant, offset: int = 0) -> Consequence | None:
    """A variant's consequence in `coding` (positions in `sequence`; the variant `offset` bases into it): a
    substitution's, an indel's (frameshift, in-frame) or a splice site's; None where no coding sequence is known."""
    if coding is None:
        return None
    return coding.change_consequence(sequence, offset + variant.pos - 1, variant.ref, variant.alt)


def describe_stages(bundle: Backend, sequence: str, variant: str | Variant, spec: ScoringSpec,
                    coding: CodingSequence | None = None,
                    progress: Callable[[float], None] | None = None) -> Iterator[VariantReport]:
    """The report as soon as its delta is known and, when the spec's `context` > 0, once more with the delta
    ranked among the substitutions that close, each read with the same spec.

    Ranking scores every substitution within the radius in its own windows:
    about 150 of them for 25 bases, some twenty-five times the work of the delta
    itself, so a page shows the delta while the ranking runs.
    """
    if not isinstance(variant, Variant):  # a c. name counts on the coding sequence
        variant = Variant.parse(variant, clean_sequence(sequence, what="reference sequence"), coding)
    scored = score_variant(bundle, sequence, variant, spec)
    report = VariantReport(scored, consequence_of(coding, sequence, scored.variant))
    ranked = spec.context > 0
    if ranked and len(scored.variant.ref) != len(scored.variant.alt):
        # an indel's delta counts other bases than a substitution's: ranked among them it would be placed unfairly
        report.unranked = (f"an indel is not ranked among the substitutions within {spec.context:,} bases (its "
                           "delta is not of the same kind)")
        ranked = False
    yield report
    if ranked:
        var = scored.variant
        report.context = score_context(bundle, sequence, var.pos, len(var.ref), var.alt, scored.delta, spec, progress)
        yield report


def describe_variant(bundle: Backend, sequence: str, variant: str | Variant, coding: CodingSequence | None = None,
                     context: int = 0, progress: Callable[[float], None] | None = None,
                     spec: ScoringSpec | None = None, **settings) -> VariantReport:
    """`score_variant`, with the consequence where `coding` is given and the context when `context` > 0
    (bases either side; ranked with the same spec), as `spec` says (else `resolve_spec` of `settings`)."""
    spec = resolve_spec(bundle, spec, context=context, **settings)
    return last(describe_stages(bundle, sequence, variant, spec, coding, progress))


def last(stages: Iterable[T]) -> T:
    """The final stage of a staged result."""
    for stage in stages:
        final = stage
    return final


def scan_consequences(scan: ScanResult, sequence: str, coding: CodingSequence | None) -> list[Consequence]:
    """The consequence of each of a scan's substitutions (in `scan.rows()` order); [] without a coding sequence."""
    if coding is None:
        return []
    return [coding.consequence(sequence, pos - 1, alt) for pos, _, alt, _ in scan.rows()]
