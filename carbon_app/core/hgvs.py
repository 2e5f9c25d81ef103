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
from collections.abc import Callable, Sequence
from typing import Protocol

from Bio.Seq import reverse_complement
from mavehgvs import MaveHgvsParseError
from mavehgvs import Variant as HgvsName

from ..errors import InputError
from .align import anchored, five_prime, three_prime


class CodingPositions(Protocol):
    """What a `c.` name is counted on (`coding.CodingSequence` is one): this module reads no more of it, and
    coding.py, which names its changes with `hgvs_name`, is not imported back."""

    strand: int

    def sequence_position(self, number: int, after_stop: bool = False, into_intron: int = 0) -> int: ...

#: an HGVS name, with the reference sequence it is on where one is written (`NM_000518.5:c.20A>T`)
HGVS_NAME = re.compile(r"^\s*(?:(?P<on>[^\s:]+):)?(?P<name>[cgnmrop]\.\S*)\s*$")
HGVS_FORMS = "c.20A>T, c.92+1G>A, c.19_20del, c.19_20insT, c.20dup, c.20delinsTT or g.1206A>T"
LONGEST_NAME = 2_000  # characters: a long insertion's bases, and no more, before the grammar reads it


def hgvs_parts(text) -> tuple[str, str] | None:
    """(reference sequence named or '', the name) when `text` is written in HGVS nomenclature, else None."""
    match = HGVS_NAME.match(str(text)) if text is not None else None
    return (match.group("on") or "", match.group("name")) if match else None


def hgvs_change(name: str, sequence: Sequence, coding: CodingPositions | None = None) -> tuple[int, str, str]:
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


def _site(position, coding: CodingPositions | None) -> int:
    """One end of a name's span as a 0-based position on the sequence."""
    if coding is None:  # g.: plain 1-based positions (the grammar allows no +/-, * or 0 in them)
        return position.position - 1
    return coding.sequence_position(position.position, bool(position.utr and position.position > 0),
                                    position.intronic_position or 0)


def hgvs_name(sequence: Sequence, pos0: int, ref: str, alt: str, position: Callable[[int], str] | None = None,
              strand: int = 1, prefix: str = "g.") -> str:
    """The HGVS name of the change `ref` at 0-based `pos0` becoming `alt` (VCF anchoring allowed) on `sequence`,
    as HGVS, Mutalyzer and VEP write it: an insertion or deletion at its 3'-most placement on the `strand` it is
    named on (a deletion in a run of T's is the run's last T), an insertion that copies the bases before it a
    `dup`; `position` names a 0-based position (default 1-based on the sequence, `g.`); bases on the minus
    strand are written reverse-complemented. `g.1844del`, `c.22del`, `c.20dup`, `c.19_20insT`, `c.20A>T`."""
    name = position or (lambda p: str(p + 1))
    lo, gone, new = (three_prime if strand == 1 else five_prime)(sequence, pos0, ref, alt)

    def bases(text: str) -> str:
        return reverse_complement(text) if strand == -1 else text

    def span(first: int, last: int) -> str:  # two 0-based positions, in the strand's reading order
        first, last = sorted((first, last), key=lambda p: p * strand)
        return name(first) if first == last else f"{name(first)}_{name(last)}"

    if gone and new:
        if len(gone) == len(new) == 1:
            return f"{prefix}{name(lo)}{bases(gone)}>{bases(new)}"
        return f"{prefix}{span(lo, lo + len(gone) - 1)}delins{bases(new)}"
    if gone:
        return f"{prefix}{span(lo, lo + len(gone) - 1)}del"
    # an insertion between lo - 1 and lo: a copy of the bases just before it (in the strand's reading order)
    copied = (lo - len(new), lo) if strand == 1 else (lo, lo + len(new))
    if 0 <= copied[0] and copied[1] <= len(sequence) and sequence[copied[0] : copied[1]] == new:
        return f"{prefix}{span(copied[0], copied[1] - 1)}dup"
    return f"{prefix}{span(lo - 1, lo)}ins{bases(new)}"
