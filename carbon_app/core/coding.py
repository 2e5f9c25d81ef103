"""A coding sequence inside a longer sequence, and what a substitution does to its protein.

A CDS is given as a start (read on to the first in-frame stop, without
introns: for mRNA or a single exon), as exons (`51..142,273..495`, 1-based,
inclusive), `complement(...)` for the minus strand, or taken from a GenBank
record's CDS feature. A substitution's consequence is named as
saturation-editing studies class it: synonymous, missense (with the amino
acids, HGVS p. notation), stop-gain, stop-loss, start-loss, or non-coding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from Bio.Data.CodonTable import standard_dna_table
from Bio.Seq import Seq, reverse_complement  # not core.dna's: dna.py imports this module
from Bio.SeqUtils import seq3

from ..errors import InputError

_RANGE = re.compile(r"^<?(\d+)(?:\.\.>?(\d+))?$")
#: the classes in the order plots and tables show them
CLASSES = ("synonymous", "missense", "stop-gain", "stop-loss", "start-loss", "non-coding")


@dataclass(frozen=True)
class Consequence:
    kind: str  # one of CLASSES
    codon: int | None = None  # 1-based codon number in the CDS
    ref_codon: str = ""
    alt_codon: str = ""
    ref_aa: str = ""  # one-letter, '*' for a stop
    alt_aa: str = ""

    @property
    def protein_change(self) -> str:
        """HGVS p. notation (p.Glu7Val, p.Gln40Ter, p.Leu3=), or '' outside the CDS."""
        if self.codon is None:
            return ""
        ref, alt = seq3(self.ref_aa, custom_map={"*": "Ter"}), seq3(self.alt_aa, custom_map={"*": "Ter"})
        return f"p.{ref}{self.codon}{'=' if self.ref_aa == self.alt_aa else alt}"

    def __str__(self) -> str:
        if self.codon is None:
            return self.kind
        return f"{self.kind} {self.protein_change} ({self.ref_codon}>{self.alt_codon})"


@dataclass(frozen=True)
class CodingSequence:
    """The 0-based positions of a CDS's bases in a sequence, in reading order (minus strand: descending)."""

    positions: tuple[int, ...]
    strand: int = 1
    description: str = ""

    @classmethod
    def parse(cls, text: str, sequence: str) -> CodingSequence:
        """A CDS from the text a person types, checked against the sequence it lies in."""
        raw = "".join(str(text).split())
        body, strand = raw, 1
        if raw.lower().startswith("complement(") and raw.endswith(")"):
            body, strand = raw[len("complement(") : -1], -1
        if body.lower().startswith("join(") and body.endswith(")"):
            body = body[len("join(") : -1]
        parts = []
        for piece in body.split(","):
            match = _RANGE.match(piece)
            if not match:
                raise InputError(f"the coding sequence '{text}' is not a start or exon ranges (e.g. 51, or "
                                 "51..142,273..495, or complement(...) for the minus strand)")
            first, last = int(match.group(1)), match.group(2)
            parts.append((first, int(last) if last else None))
        if len(parts) > 1 and any(last is None for _, last in parts):
            raise InputError(f"the coding sequence '{text}' mixes a bare start with ranges: give every exon "
                             "as FIRST..LAST")
        for first, last in parts:
            end = last if last is not None else first
            if not 1 <= first <= end <= len(sequence):
                raise InputError(f"the coding sequence part '{first}..{end}' must lie within the "
                                 f"{len(sequence):,}-base sequence (1-based, first <= last)")
        if parts[0][1] is None:  # a bare start: read on to the first in-frame stop
            first = parts[0][0]
            span = range(first - 1, len(sequence)) if strand == 1 else range(first - 1, -1, -1)
            return cls(tuple(span), strand, f"from {first}").until_stop(sequence)
        positions = [p for first, last in parts for p in range(first - 1, last)]
        if strand == -1:
            positions.reverse()
        return cls(tuple(positions), strand, raw)

    @classmethod
    def from_feature(cls, feature) -> CodingSequence:
        """From a Biopython CDS feature (its location iterates in reading order, joins and strands included)."""
        label = next((feature.qualifiers[key][0] for key in ("gene", "product", "locus_tag")
                      if key in feature.qualifiers), "")
        positions = tuple(int(p) for p in feature.location)
        return cls(positions, feature.location.strand or 1, " ".join(["GenBank CDS", label, str(feature.location)]))

    def until_stop(self, sequence: str) -> CodingSequence:
        """Cut after the first in-frame stop codon (the rest is not coding)."""
        stops = set(standard_dna_table.stop_codons)
        for i in range(0, len(self.positions) - 2, 3):
            if self._codon(sequence, i // 3) in stops:
                return CodingSequence(self.positions[: i + 3], self.strand, self.description)
        return CodingSequence(self.positions[: len(self.positions) // 3 * 3], self.strand, self.description)

    def _codon(self, sequence: str, index: int, change: tuple[int, str] | None = None) -> str:
        bases = []
        for p in self.positions[3 * index : 3 * index + 3]:
            base = change[1] if change and change[0] == p else sequence[p]
            bases.append(reverse_complement(base) if self.strand == -1 else base)
        return "".join(bases)

    def consequence(self, sequence: str, pos0: int, alt: str) -> Consequence:
        """What substituting `alt` at `pos0` (0-based, in `sequence`) does to the protein."""
        try:
            index = self.positions.index(pos0)
        except ValueError:
            return Consequence("non-coding")
        codon = index // 3
        ref_codon = self._codon(sequence, codon)
        alt_codon = self._codon(sequence, codon, (pos0, alt))
        if len(ref_codon) < 3:
            return Consequence("non-coding")
        ref_aa, alt_aa = (str(Seq(c).translate()) if "N" not in c else "X" for c in (ref_codon, alt_codon))
        if codon == 0 and ref_aa == "M" and alt_aa != "M":
            kind = "start-loss"
        elif ref_aa == alt_aa:
            kind = "synonymous"
        elif alt_aa == "*":
            kind = "stop-gain"
        elif ref_aa == "*":
            kind = "stop-loss"
        else:
            kind = "missense"
        return Consequence(kind, codon + 1, ref_codon, alt_codon, ref_aa, alt_aa)
