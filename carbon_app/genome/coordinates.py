"""Variants at genome coordinates, in the forms people paste them, and their windows cut from a genome.

    chr17:41245466:G>A     chr17:41245466 G>A     chr17-41245466-G-A
    a VCF data line (CHROM POS ID REF ALT ...)
    17:g.41245466G>A       17:g.41245466_41245467del     chr11:c.20A>T (HGVS, core.hgvs; c. on a CDS)

Indels use VCF's convention (the anchor base before the event is in REF and
ALT: chr17:41245465:AG>A). The window is cut from the reference around the
variant by the engine's own centring rule, so a delta at coordinates equals
`score --sequence` on the same stretch of genome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..core.coding import CodingSequence
from ..core.hgvs import hgvs_change, hgvs_parts
from ..errors import InputError
from .reference import ContigBases, Reference

_CONTIG = r"(?P<contig>[A-Za-z0-9_.\-]*?[A-Za-z0-9_.])"
_FORMS = [
    re.compile(rf"^{_CONTIG}:(?P<pos>[\d,]+)\s*[:\s]\s*(?P<ref>[A-Za-z]+)\s*>\s*(?P<alt>[A-Za-z]+)$"),
    re.compile(rf"^{_CONTIG}-(?P<pos>\d+)-(?P<ref>[A-Za-z]+)-(?P<alt>[A-Za-z]+)$"),
]
FORMS_TEXT = ("chr17:41245466:G>A, chr17:41245466 G>A, chr17-41245466-G-A, a VCF data line, or in HGVS on a contig: "
              "17:g.41245466G>A, 17:g.41245466_41245467del, or chr11:c.20A>T with the CDS on that contig")
MOSTLY_N = 0.5  # a window more than half unsequenced (N) is not scored


class VariantProblem(InputError):
    """Why a variant cannot be scored, with a short code a VCF can carry (CARBON_PROBLEM)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
SOME_N = 0.05  # above this share the result says how much of its window is N


@dataclass(frozen=True)
class GenomicVariant:
    """A variant at 1-based position `pos` of contig `contig` (as typed): REF there becomes ALT."""

    contig: str
    pos: int
    ref: str
    alt: str
    hgvs: str = field(default="", compare=False)  # the HGVS name it was given by ('' for the other forms)

    def __str__(self) -> str:
        return f"{self.contig}:{self.pos}:{self.ref}>{self.alt}"

    @property
    def label(self) -> str:
        """How to show it: as given, with the change it names where it was given as an HGVS name."""
        return f"{self.hgvs} ({self})" if self.hgvs else str(self)


def parse_genomic(text: str, reference: Reference | None = None, cds: str | None = None) -> GenomicVariant:
    """One variant at genome coordinates from any of the usual forms, or InputError naming the forms. An HGVS
    name (`chr11:g.5227002T>A`, `chr11:c.20A>T` counted on `cds`, in that contig's coordinates) is placed on
    `reference`."""
    if text is None or not str(text).strip():
        raise InputError(f"the variant is empty; write it as {FORMS_TEXT}")
    raw = str(text).strip()
    named = hgvs_parts(raw)
    if named:
        return _placed(*named, reference, cds)
    fields = raw.split()
    if len(fields) >= 5 and fields[1].isdigit():  # a VCF data line (tabs, or spaces once pasted)
        contig, pos, _, ref, alt = fields[:5]
        if "," in alt:
            raise InputError(f"the VCF line has several ALT alleles ({alt}); score one, or the whole file with "
                             "score-vcf")
        if not pos.isdigit():
            raise InputError(f"the VCF line's POS '{pos}' is not a position")
        return _checked(contig, int(pos), ref, alt, raw)
    for form in _FORMS:
        match = form.match(raw)
        if match:
            pos = int(match.group("pos").replace(",", ""))
            return _checked(match.group("contig"), pos, match.group("ref"), match.group("alt"), raw)
    shown = " ".join(raw.split())[:60]
    raise InputError(f"the variant '{shown}' is not at genome coordinates; write it as {FORMS_TEXT}")


def _placed(contig: str, name: str, reference: Reference | None, cds: str | None) -> GenomicVariant:
    """An HGVS name on a contig of `reference`, as the change it makes there."""
    if not contig:
        raise InputError(f"'{name}' does not say which contig it is on: write it as chr11:{name}")
    if reference is None:
        raise InputError(f"'{contig}:{name}' is placed on a genome's bases, and no genome is given")
    try:
        bases = ContigBases(reference, reference.contig(contig))
    except InputError as exc:
        raise VariantProblem("unknown_contig", str(exc)) from None
    coding = CodingSequence.parse(cds, bases) if cds and cds.strip() else None
    return GenomicVariant(contig, *hgvs_change(name, bases, coding), hgvs=f"{contig}:{name}")


def _checked(contig: str, pos: int, ref: str, alt: str, raw: str) -> GenomicVariant:
    ref, alt = ref.upper(), alt.upper()
    if pos < 1:
        raise InputError(f"genome positions start at 1, not {pos}")
    for allele, name in ((ref, "reference"), (alt, "alternate")):
        if allele.startswith("<") or set(allele) & set("[]*."):
            raise VariantProblem("symbolic_allele", f"the {name} allele '{allele}' is symbolic; only sequence "
                                 "alleles can be scored")
        bad = next((b for b in allele if b not in "ACGT"), None)
        if bad:
            raise VariantProblem("not_ACGT", f"the {name} allele '{allele}' has '{bad}'; alleles are A, C, G and "
                                 "T only")
    if ref == alt:
        raise InputError(f"the variant {contig}:{pos}:{ref}>{alt} changes nothing (REF equals ALT)")
    return GenomicVariant(contig, pos, ref, alt)


@dataclass
class GenomeWindow:
    """The stretch of genome a variant is scored in: its bases, where they start, and what to say about it."""

    contig: str  # as the reference names it
    start: int  # 0-based position of `bases` in the contig
    bases: str
    notes: list[str]

    def local(self, variant: GenomicVariant) -> str:
        """The variant as POS:REF>ALT within `bases`."""
        return f"{variant.pos - self.start}:{variant.ref}>{variant.alt}"


def cut_window(reference: Reference, variant: GenomicVariant, span: int, extra: int = 0) -> GenomeWindow:
    """Bases around `variant` enough for any window of up to `span` bases centred on it (the engine then
    centres its windows in them exactly as it would in the whole contig), with REF checked; `extra`
    more bases each side hold the windows of the substitutions a score's context ranks it among.

    Near a contig's end the window runs off it: the stretch stops there and the engine slides its
    windows inward, as it does at a sequence's end; the notes say so.
    """
    try:
        contig = reference.contig(variant.contig)
    except InputError as exc:
        raise VariantProblem("unknown_contig", str(exc)) from None
    length = reference.lengths[contig]
    end0 = variant.pos - 1 + len(variant.ref)
    if end0 > length:
        raise VariantProblem("beyond_contig", f"{variant} lies beyond the end of {contig} ({length:,} bases) in "
                             f"{reference.name}")
    present = reference.fetch(contig, variant.pos - 1, end0)
    if present != variant.ref:
        raise VariantProblem("REF_mismatch", f"{reference.name} has '{present}' at {contig}:{variant.pos}, not "
                             f"'{variant.ref}' as {variant} says (is this the right genome build?)")
    # a whole span on each side: where one side is cut short by the contig's end, the engine slides its
    # windows the other way, as far as a span
    margin = span + len(variant.alt) + 1
    start = max(0, variant.pos - 1 - margin - extra)
    bases = reference.fetch(contig, start, end0 + margin + extra)
    notes = []
    flank = max((span - len(variant.ref)) // 2, 0)  # the centred window's bases either side (`variant_window`)
    if variant.pos - 1 < flank:
        notes.append(f"the window runs off the start of {contig}: it is slid inward")
    if length - end0 < flank:
        notes.append(f"the window runs off the end of {contig}: it is slid inward")
    core = bases[max(0, variant.pos - 1 - start - span // 2): variant.pos - 1 - start + span // 2]
    unknown = core.count("N") / max(len(core), 1)
    if unknown > MOSTLY_N:
        raise VariantProblem("mostly_N", f"the window around {variant} is {100 * unknown:.0f}% N (unsequenced) "
                             f"in {reference.name}: there is nothing to score it against")
    if unknown > SOME_N:
        notes.append(f"{100 * unknown:.0f}% of the window is N (unsequenced); N scores as the best of the four")
    return GenomeWindow(contig, start, bases, notes)
