"""Variants named in HGVS nomenclature, placed on the sequence they are scored in.

The name is read with mavehgvs's grammar (the MAVE-HGVS subset of HGVS, as
MaveDB uses it): substitutions, deletions, duplications, insertions and
deletion-insertions, in `c.` form (counted on a coding sequence: `c.20A>T`,
`c.92+1G>A`, `c.-5C>T`, `c.*3del`, `c.19_20del`) or `g.` form (1-based on the
sequence itself: `g.1206A>T`). A `c.` name needs the coding sequence it counts
on; its bases are on that CDS's strand, so on a minus-strand CDS they are
reverse-complemented onto the sequence. Each is turned into the VCF-style
change (POS, REF, ALT; an indel anchored on the base before it) that the
engine scores, with its reference bases checked against the sequence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from Bio.Seq import reverse_complement
from mavehgvs import MaveHgvsParseError
from mavehgvs import Variant as HgvsName

from ..errors import InputError
from .align import anchored
from .coding import CodingSequence

#: an HGVS name, with the reference sequence it is on where one is written (`NM_000518.5:c.20A>T`)
HGVS_NAME = re.compile(r"^\s*(?:(?P<on>[^\s:]+):)?(?P<name>[cgnmrop]\.\S*)\s*$")
HGVS_FORMS = "c.20A>T, c.92+1G>A, c.19_20del, c.19_20insT, c.20dup, c.20delinsTT or g.1206A>T"
LONGEST_NAME = 2_000  # characters: a long insertion's bases, and no more, before the grammar reads it


def hgvs_parts(text) -> tuple[str, str] | None:
    """(reference sequence named or '', the name) when `text` is written in HGVS nomenclature, else None."""
    match = HGVS_NAME.match(str(text)) if text is not None else None
    return (match.group("on") or "", match.group("name")) if match else None


def hgvs_change(name: str, sequence: Sequence, coding: CodingSequence | None = None) -> tuple[int, str, str]:
    """The (POS, REF, ALT) change, VCF-style and 1-based on `sequence` (a str, or a contig read base by base),
    that the HGVS `name` (`c.` needs `coding`, on `sequence`) describes; InputError naming what is wrong."""
    if len(name) > LONGEST_NAME:
        raise InputError(f"the HGVS name is {len(name):,} characters long; at most {LONGEST_NAME:,} are read")
    try:
        parsed = HgvsName(name)
    except MaveHgvsParseError:
        raise InputError(f"'{name}' is not an HGVS name this reads ({HGVS_FORMS})") from None
    if parsed.is_multi_variant():
        raise InputError(f"'{name}' holds several variants; score one at a time")
    if parsed.prefix == "p":
        raise InputError(f"'{name}' is a protein change, which does not say which bases changed: give the "
                         "c. or g. name")
    if parsed.prefix not in ("c", "g"):
        raise InputError(f"'{name}' is an HGVS {parsed.prefix}. name; give a c. name (with the coding sequence) "
                         "or a g. name (on the sequence given)")
    if parsed.variant_type == "equal":
        raise InputError(f"'{name}' says the sequence is unchanged; there is nothing to score")
    if parsed.prefix == "c" and coding is None:
        raise InputError(f"'{name}' is counted on a coding sequence (HGVS c.), and none is given: give the CDS "
                         "(the coding-sequence field, --cds, or a GenBank record with a CDS feature), or write the "
                         "variant as POS:REF>ALT or g.")
    ends = parsed.positions if isinstance(parsed.positions, tuple) else (parsed.positions,)
    sites = [_site(p, coding if parsed.prefix == "c" else None) for p in ends]
    for site in sites:
        if not 0 <= site < len(sequence):
            raise InputError(f"'{name}' lies outside the {len(sequence):,}-base sequence")
    lo, hi = min(sites), max(sites)  # on the sequence's own (plus) strand
    minus = parsed.prefix == "c" and coding.strand == -1

    def on_sequence(bases: str) -> str:  # bases as written (the CDS's strand) on the sequence's strand
        return reverse_complement(bases) if minus else bases

    kind = parsed.variant_type
    if kind == "sub":
        ref, alt = (on_sequence(b) for b in parsed.sequence)
        present = sequence[lo]
        if present != ref:
            raise InputError(f"'{name}' says the reference base is {parsed.sequence[0]}, but the sequence has "
                             f"{on_sequence(present)} there (position {lo + 1}"
                             f"{', read on the minus strand' if minus else ''})")
        if ref == alt:
            raise InputError(f"'{name}' changes nothing (the two bases are the same)")
        return lo + 1, ref, alt
    if kind == "ins":
        if hi - lo != 1:
            raise InputError(f"'{name}' inserts between two positions that are not neighbours; an insertion "
                             "lies between two adjacent bases (c.19_20insT)")
        return anchored(sequence, hi, hi, on_sequence(parsed.sequence))
    if kind == "dup":  # a copy beside the original: either side makes the same sequence
        return anchored(sequence, hi + 1, hi + 1, sequence[lo : hi + 1])
    return anchored(sequence, lo, hi + 1, on_sequence(parsed.sequence) if kind == "delins" else "")


def _site(position, coding: CodingSequence | None) -> int:
    """One end of a name's span as a 0-based position on the sequence."""
    if coding is None:  # g.: plain 1-based positions (the grammar allows no +/-, * or 0 in them)
        return position.position - 1
    return coding.sequence_position(position.position, bool(position.utr and position.position > 0),
                                    position.intronic_position or 0)
