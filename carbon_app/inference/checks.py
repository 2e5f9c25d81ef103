"""What a biologist checks first in a designed sequence: length, mask, GC, the longest ORF."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from Bio.Seq import Seq

from ..core.dna import reverse_complement, satisfies


@dataclass
class SequenceReport:
    length: int
    expected_length: int
    mask_satisfied: bool | None  # None when no mask was given
    gc_content: float
    orf_start: int | None  # 1-based, on the reported strand's coordinates of the given sequence
    orf_end: int | None
    orf_strand: str | None  # "+" or "-"
    orf_length_aa: int
    orf_protein: str

    def to_dict(self) -> dict:
        return asdict(self)


def longest_orf(seq: str, table: int = 1) -> tuple[int | None, int | None, str | None, str]:
    """Longest ATG..stop open reading frame on either strand (standard code), as
    (start, end, strand, protein); an ORF may run off the end of the sequence."""
    best: tuple[int | None, int | None, str | None, str] = (None, None, None, "")
    length = len(seq)
    for strand, text in (("+", seq), ("-", reverse_complement(seq))):
        for frame in range(3):
            usable = (length - frame) // 3 * 3
            protein = str(Seq(text[frame : frame + usable]).translate(table=table))
            aa = 0
            while aa < len(protein):
                if protein[aa] == "M":
                    stop = protein.find("*", aa)
                    stop = len(protein) if stop == -1 else stop
                    if stop - aa > len(best[3]):
                        begin, finish = frame + 3 * aa, frame + 3 * stop + (3 if stop < len(protein) else 0)
                        if strand == "+":
                            coords = (begin + 1, finish)
                        else:
                            coords = (length - finish + 1, length - begin)
                        best = (*coords, strand, protein[aa:stop])
                    aa = stop + 1
                else:
                    aa += 1
    return best


def report(seq: str, expected_length: int, mask: str | None = None) -> SequenceReport:
    gc = (seq.count("G") + seq.count("C")) / len(seq) if seq else 0.0
    start, end, strand, protein = longest_orf(seq)
    return SequenceReport(
        length=len(seq),
        expected_length=expected_length,
        mask_satisfied=None if mask is None else satisfies(seq, mask),
        gc_content=gc,
        orf_start=start,
        orf_end=end,
        orf_strand=strand,
        orf_length_aa=len(protein),
        orf_protein=protein,
    )
