"""Gene structures from the packages' annotations: transcripts with exons and CDS.

Three sources, one shape: RefSeq GTF files (yeast, fly, Arabidopsis and the
augustus-doc human locus), GenBank CDS features (the emboss-test entries) and
the hg19 RefSeq exon table of Debian's subread-data (human chromosome 20,
exons only, so no CDS). Coordinates are 0-based, half-open, on the record's
forward strand; `strand` says which strand the transcript is read from.
"""

from __future__ import annotations

import gzip
import io
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..core.dna import reverse_complement

_ATTRIBUTE = re.compile(r'(\S+) "([^"]*)"')


@dataclass
class Transcript:
    id: str
    gene: str
    strand: int  # 1 or -1
    exons: list[tuple[int, int]]  # sorted by start, forward-strand coordinates
    cds: list[tuple[int, int]] = field(default_factory=list)
    biotype: str = ""

    @property
    def start(self) -> int:
        return self.exons[0][0]

    @property
    def end(self) -> int:
        return self.exons[-1][1]

    @property
    def coding(self) -> bool:
        return bool(self.cds)

    def introns(self) -> list[tuple[int, int]]:
        return [(a[1], b[0]) for a, b in itertools.pairwise(self.exons) if b[0] > a[1]]

    def positions(self, parts: list[tuple[int, int]]) -> list[int]:
        """The forward-strand index of every base of `parts`, in transcript order."""
        forward = [i for start, end in parts for i in range(start, end)]
        return forward if self.strand == 1 else forward[::-1]

    def codon_positions(self) -> dict[int, int]:
        """Forward-strand index -> the base's place in its codon (0, 1, 2), for every base of the CDS."""
        return {at: i % 3 for i, at in enumerate(self.positions(self.cds))}

    def spliced(self, genome: str, parts: list[tuple[int, int]] | None = None) -> str:
        """The exons (or `parts`) joined and read on the transcript's strand: the mature mRNA."""
        seq = "".join(genome[start:end] for start, end in (self.exons if parts is None else parts))
        return seq if self.strand == 1 else reverse_complement(seq)


def open_text(path: Path):
    return io.TextIOWrapper(gzip.open(path)) if str(path).endswith(".gz") else open(path)


def _merge(parts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(parts):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def read_gtf(path: Path) -> dict[str, list[Transcript]]:
    """Transcripts per sequence id from a GTF file (exon and CDS lines grouped by transcript_id)."""
    exons: dict[tuple, list] = defaultdict(list)
    cds: dict[tuple, list] = defaultdict(list)
    info: dict[tuple, tuple] = {}
    biotypes: dict[str, str] = {}
    with open_text(path) as handle:
        for line in handle:
            if line.startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 9:
                continue
            attributes = dict(_ATTRIBUTE.findall(cols[8]))
            gene = attributes.get("gene_id", "")
            if cols[2] == "gene":
                biotypes[gene] = attributes.get("gene_biotype", "")
                continue
            transcript = attributes.get("transcript_id")
            if cols[2] not in ("exon", "CDS", "stop_codon") or not transcript:
                continue
            key = (cols[0], transcript)
            part = (int(cols[3]) - 1, int(cols[4]))
            # GTF's CDS stops before the stop codon, which has a line of its own
            (exons if cols[2] == "exon" else cds)[key].append(part)
            info[key] = (gene, -1 if cols[6] == "-" else 1)
    out: dict[str, list[Transcript]] = defaultdict(list)
    for key, (gene, strand) in info.items():
        parts = exons.get(key) or cds[key]
        out[key[0]].append(Transcript(key[1], gene, strand, _merge(parts), _merge(cds.get(key, [])),
                                      biotypes.get(gene, "protein_coding" if key in cds else "")))
    return out


def read_exon_table(path: Path) -> dict[str, list[Transcript]]:
    """One exons-only transcript per gene from a subread exon table (GeneID, Chr, Start, End, Strand).

    The table lists the exons of all of a gene's transcripts; overlapping
    ones are merged, so the gaps left are introns of every isoform.
    """
    parts: dict[tuple, list] = defaultdict(list)
    with open_text(path) as handle:
        next(handle)
        for line in handle:
            gene, chrom, start, end, strand = line.split()
            parts[(chrom, gene, strand)].append((int(start) - 1, int(end)))
    out: dict[str, list[Transcript]] = defaultdict(list)
    for (chrom, gene, strand), exons in parts.items():
        out[chrom].append(Transcript(gene, gene, -1 if strand == "-" else 1, _merge(exons)))
    return out


def genbank_transcripts(entry) -> list[Transcript]:
    """A transcript per CDS feature of a Biopython GenBank record; its CDS parts stand in for exons."""
    out = []
    for n, feature in enumerate(f for f in entry.features if f.type == "CDS"):
        if feature.location is None or "pseudo" in feature.qualifiers or any(
                part.ref or int(part.end) > len(entry.seq) for part in feature.location.parts):
            continue  # a pseudogene, or a CDS that runs into another entry
        parts = _merge([(int(p.start), int(p.end)) for p in feature.location.parts])
        name = (feature.qualifiers.get("gene") or feature.qualifiers.get("locus_tag") or [f"cds{n + 1}"])[0]
        out.append(Transcript(f"{entry.name}:{name}", name, -1 if feature.location.strand == -1 else 1,
                              parts, list(parts), "protein_coding"))
    return out
