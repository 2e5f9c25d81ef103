"""A coding sequence inside a longer sequence, and what a substitution does to its protein.

A CDS is given as a start (read on to the first in-frame stop, without
introns: for mRNA or a single exon), as exons (`51..142,273..495`, 1-based,
inclusive), `complement(...)` for the minus strand, or taken from a GenBank
record's CDS feature. A substitution's consequence is named as
saturation-editing studies class it: synonymous, missense (with the amino
acids, HGVS p. notation), stop-gain, stop-loss, start-loss, or non-coding;
an insertion or deletion as frameshift (`p.Glu7fs`) or in-frame; a change at
the first or last two bases of an intron between two of the CDS's exons as
splice-site, and one within 3 exonic or 8 intronic bases of such a boundary
as splice-region (Ensembl VEP's definitions). Each is also written in HGVS c.
notation (`c.20A>T`, `c.92+1G>A`, `c.19_20del`, `c.-5C>T`, `c.*3G>A`), on the
CDS's strand. Introns and exons outside the CDS (UTRs) are not known from a
CDS, so positions beyond its ends are counted in plain bases (`c.-N`,
`c.*N`). An insertion or deletion is named at its 3'-most placement on the
CDS's strand, and an insertion that copies the bases before it is a `dup`, as
HGVS, Mutalyzer and VEP write them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from Bio.Data.CodonTable import standard_dna_table
from Bio.Seq import Seq, reverse_complement  # not core.dna's: dna.py imports this module
from Bio.SeqUtils import seq3

from ..errors import InputError
from .align import shared_ends
from .hgvs import hgvs_name

_RANGE = re.compile(r"^<?(\d+)(?:\.\.>?(\d+))?$")
#: the classes in the order plots and tables show them
CLASSES = ("synonymous", "missense", "stop-gain", "stop-loss", "start-loss", "frameshift", "in-frame deletion",
           "in-frame insertion", "splice-site", "splice-region", "non-coding")
INDEL_CLASSES = ("frameshift", "in-frame deletion", "in-frame insertion")
SPLICE_SITE_BASES = 2  # the canonical donor (GT) and acceptor (AG) bases at each end of an intron
SPLICE_REGION_EXONIC, SPLICE_REGION_INTRONIC = 3, 8


@dataclass(frozen=True)
class Consequence:
    kind: str  # one of CLASSES
    codon: int | None = None  # 1-based codon number in the CDS
    ref_codon: str = ""
    alt_codon: str = ""
    ref_aa: str = ""  # one-letter, '*' for a stop
    alt_aa: str = ""
    hgvs_c: str = ""  # the change in HGVS c. notation, on the CDS's strand
    protein: str = ""  # HGVS p. notation where it is not a single residue's change (p.Glu7fs, p.Glu7_Val8del)
    splice_region: bool = False  # within 3 exonic or 8 intronic bases of an intron's end (besides its kind)

    @property
    def protein_change(self) -> str:
        """HGVS p. notation (p.Glu7Val, p.Gln40Ter, p.Leu3=, p.Glu7fs), or '' outside the CDS."""
        if self.protein:
            return self.protein
        if self.codon is None:
            return ""
        ref, alt = _three(self.ref_aa), _three(self.alt_aa)
        return f"p.{ref}{self.codon}{'=' if self.ref_aa == self.alt_aa else alt}"

    def __str__(self) -> str:
        parts = [self.kind]
        if self.protein_change:
            parts.append(self.protein_change)
        if self.ref_codon and self.alt_codon and not self.protein:
            parts.append(f"({self.ref_codon}>{self.alt_codon})")
        if self.splice_region and self.kind != "splice-region":
            parts.append("in a splice region")
        if self.hgvs_c:
            parts.append(f"[{self.hgvs_c}]")
        return " ".join(parts)


def _three(aa: str) -> str:
    return seq3(aa, custom_map={"*": "Ter"})


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
        for (_, last), (first, _) in zip(parts, parts[1:], strict=False):
            if first <= last:
                raise InputError(f"the exons of the coding sequence '{text}' overlap or are out of order "
                                 f"({last} is not before {first}): list them from the lowest position up")
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

    # -- where a base lies: exons, introns, HGVS c. positions -------------------------------

    @functools.cached_property
    def exons(self) -> list[tuple[int, int]]:
        """The CDS's exons in reading order, each as (index in the CDS of its first base, of its last)."""
        blocks, first = [], 0
        for i in range(1, len(self.positions) + 1):
            if i == len(self.positions) or self.positions[i] != self.positions[i - 1] + self.strand:
                blocks.append((first, i - 1))
                first = i
        return blocks

    def c_position(self, pos0: int) -> str:
        """The HGVS c. position of sequence position `pos0` (0-based): `20`, `92+1`, `93-2`, `-5`, `*3`."""
        index = self._index.get(pos0)
        if index is not None:
            return str(index + 1)
        t = pos0 * self.strand  # transcript order: rising along the CDS's own strand
        first, last = self.positions[0] * self.strand, self.positions[-1] * self.strand
        if t < first:
            return f"-{first - t}"
        if t > last:
            return f"*{t - last}"
        for (_, end), (start, _) in zip(self.exons, self.exons[1:], strict=False):
            up, down = self.positions[end] * self.strand, self.positions[start] * self.strand
            if up < t < down:
                return f"{end + 1}+{t - up}" if t - up <= down - t else f"{start + 1}-{down - t}"
        raise AssertionError("a position inside the CDS's span lies in an exon or an intron")

    def sequence_position(self, number: int, after_stop: bool = False, into_intron: int = 0) -> int:
        """The 0-based sequence position of HGVS c. position `number` (`*number` with `after_stop`), moved
        `into_intron` bases into the intron beside it (`92+1`: 92, 1; `93-2`: 93, -2): `c_position`'s inverse."""
        if after_stop:
            t, written = self.positions[-1] * self.strand + number, f"*{number}"
        elif number < 0:
            t, written = self.positions[0] * self.strand + number, str(number)
        elif 1 <= number <= len(self.positions):
            t, written = self.positions[number - 1] * self.strand, str(number)
        else:
            raise InputError(f"c.{number} lies beyond the coding sequence's {len(self.positions):,} bases "
                             f"(c.1 to c.{len(self.positions)}; c.*N counts past its stop)")
        if into_intron:
            written += f"{into_intron:+d}"
            index = number - 1 if 1 <= number <= len(self.positions) and not after_stop else None
            ends = [end for _, end in self.exons[:-1]] if into_intron > 0 else [start for start, _ in self.exons[1:]]
            if index not in ends:
                side = "last base of an exon followed" if into_intron > 0 else "first base of an exon preceded"
                raise InputError(f"c.{written} counts into an intron from c.{number}, which is not the {side} by "
                                 "one of the coding sequence's introns")
            t += into_intron
            if (t * self.strand) in self._index:
                raise InputError(f"c.{written} runs past its intron into the next exon")
        return t * self.strand  # may lie off the sequence, beyond a UTR: the caller, which has it, checks

    def splice_place(self, pos0: int) -> str | None:
        """'splice-site' (an intron's first or last two bases), 'splice-region' (within 3 exonic or 8 intronic
        bases of an intron's end) or None, for the introns between the CDS's exons."""
        t = pos0 * self.strand
        region = False
        for (_, end), (start, _) in zip(self.exons, self.exons[1:], strict=False):
            up, down = self.positions[end] * self.strand, self.positions[start] * self.strand
            if up < t < down:
                into = min(t - up, down - t)  # bases into the intron from its nearer end
                if into <= SPLICE_SITE_BASES:
                    return "splice-site"
                region |= into <= SPLICE_REGION_INTRONIC
            elif up - SPLICE_REGION_EXONIC < t <= up or down <= t < down + SPLICE_REGION_EXONIC:
                region = True
        return "splice-region" if region else None

    @functools.cached_property
    def _index(self) -> dict[int, int]:
        return {p: i for i, p in enumerate(self.positions)}

    def _strand_bases(self, bases: str) -> str:
        return reverse_complement(bases) if self.strand == -1 else bases

    def hgvs_c(self, sequence, pos0: int, ref: str, alt: str) -> str:
        """A change on `sequence` (`ref` at `pos0` onward becomes `alt`, plus strand, VCF-style anchoring allowed)
        in HGVS c. notation on the CDS's strand, 3'-shifted on that strand: `c.20A>T`, `c.22del`, `c.20dup`,
        `c.19_20insT`, `c.19_21delinsAA`."""
        return hgvs_name(sequence, pos0, ref, alt, self.c_position, self.strand, "c.")

    def change_consequence(self, sequence: str, pos0: int, ref: str, alt: str) -> Consequence:
        """What any change (`ref` at `pos0`, 0-based, becoming `alt`: a substitution, an indel or several
        bases) does: splice site, frameshift, in-frame, or a substitution's own consequence."""
        if len(ref) == len(alt) == 1:
            return self.consequence(sequence, pos0, alt)
        hgvs = self.hgvs_c(sequence, pos0, ref, alt)
        head, tail = shared_ends(ref, alt)
        # the bases it removes or replaces (not a VCF anchor); an insertion: its anchor, the base before it
        touched = range(pos0 + head, pos0 + len(ref) - tail) if len(ref) - tail > head else range(pos0, pos0 + 1)
        places = {self.splice_place(p) for p in touched}
        index = self._index
        coding = [index[p] for p in touched if p in index]
        span_lo, span_hi = sorted((self.positions[0], self.positions[-1]))
        outside = [p for p in touched if p not in index]
        across_intron = any(span_lo < p < span_hi for p in outside)
        if "splice-site" in places or (coding and across_intron and len(ref) != len(alt)):
            return Consequence("splice-site", hgvs_c=hgvs)  # an intron's end, or a change across an exon's edge
        region = "splice-region" in places
        if not coding:
            return Consequence("splice-region" if region else "non-coding", hgvs_c=hgvs)
        if outside and len(ref) != len(alt):  # across the CDS's first or last base, into a UTR
            if min(coding) < 3:
                return Consequence("start-loss", 1, hgvs_c=hgvs, splice_region=region, protein="p.Met1?")
            return Consequence("stop-loss", len(self.positions) // 3, hgvs_c=hgvs, splice_region=region,
                               protein=f"p.Ter{len(self.positions) // 3}ext*?")
        cds = "".join(self._strand_bases(sequence[p]) for p in self.positions)
        shift = len(alt) - len(ref)
        start, end = min(coding), max(coding)  # the changed stretch, in CDS order
        # the CDS with the change made: its bases before and after the stretch kept, the stretch read anew from
        # the few bases around the change (a contig is read base by base, never copied whole)
        lo, hi = sorted((self.positions[start], self.positions[end]))
        base, stop = min(lo, pos0), max(hi + 1, pos0 + len(ref))
        edited = sequence[base:pos0] + alt + sequence[pos0 + len(ref) : stop]
        new_cds = cds[:start] + self._strand_bases(edited[lo - base : hi + 1 + shift - base]) + cds[end + 1 :]
        ref_protein = str(Seq(cds[: len(cds) // 3 * 3]).translate())
        first_aa = start // 3
        alt_protein = str(Seq(new_cds[: len(new_cds) // 3 * 3]).translate())
        if shift % 3:  # named by the first residue it changes (HGVS), which may lie past the changed bases
            changed = min(shared_ends(ref_protein, alt_protein)[0], len(ref_protein) - 1)
            changed = max(changed, first_aa)
            return Consequence("frameshift", changed + 1, hgvs_c=hgvs, splice_region=region,
                               protein=f"p.{_three(ref_protein[changed])}{changed + 1}fs")
        ref_stop = ref_protein.find("*") if "*" in ref_protein else len(ref_protein)
        alt_stop = alt_protein.find("*")
        if alt_stop != -1 and alt_stop < ref_stop + shift // 3:  # a stop before the one the CDS ends with
            return Consequence("stop-gain", alt_stop + 1, hgvs_c=hgvs, splice_region=region,
                               protein=f"p.{_three(ref_protein[alt_stop])}{alt_stop + 1}Ter")
        # the residues that differ: what lies between the two proteins' shared start and shared end
        ref_p, alt_p = ref_protein[:ref_stop], alt_protein[: ref_stop + shift // 3]
        i, j = shared_ends(ref_p, alt_p)
        gone, added = ref_p[i : len(ref_p) - j], alt_p[i : len(alt_p) - j]

        def named(k: int) -> str:
            return f"{_three(ref_p[k])}{k + 1}"

        if not gone and not added:
            return Consequence("synonymous", first_aa + 1, hgvs_c=hgvs, splice_region=region,
                               protein=f"p.{named(first_aa)}=")
        span = named(i) if len(gone) <= 1 else f"{named(i)}_{named(i + len(gone) - 1)}"
        if gone and added:
            kind = "missense" if len(gone) == len(added) else ("in-frame deletion" if shift < 0 else
                                                               "in-frame insertion")
            change = (f"p.{span}{''.join(_three(a) for a in added)}" if len(gone) == len(added) == 1
                      else f"p.{span}delins{''.join(_three(a) for a in added)}")
        elif gone:
            kind, change = "in-frame deletion", f"p.{span}del"
        else:
            kind, change = "in-frame insertion", f"p.{named(i - 1)}_{named(i)}ins{''.join(_three(a) for a in added)}"
        return Consequence(kind, i + 1, hgvs_c=hgvs, splice_region=region, protein=change)

    def consequence(self, sequence: str, pos0: int, alt: str) -> Consequence:
        """What substituting `alt` at `pos0` (0-based, in `sequence`) does to the protein."""
        hgvs = self.hgvs_c(sequence, pos0, sequence[pos0], alt)
        place = self.splice_place(pos0)
        index = self._index.get(pos0)
        if index is None:
            return Consequence(place or "non-coding", hgvs_c=hgvs)
        codon = index // 3
        ref_codon = self._codon(sequence, codon)
        alt_codon = self._codon(sequence, codon, (pos0, alt))
        if len(ref_codon) < 3:
            return Consequence("non-coding", hgvs_c=hgvs)
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
        return Consequence(kind, codon + 1, ref_codon, alt_codon, ref_aa, alt_aa, hgvs_c=hgvs,
                           splice_region=place == "splice-region")
