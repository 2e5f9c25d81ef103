"""Gene structures from the packages' annotations: transcripts with exons and CDS.

Three sources, one shape: RefSeq GTF files (yeast, fly, Arabidopsis and the
augustus-doc human locus), GenBank CDS features (the emboss-test entries) and
the hg19 RefSeq exon table of Debian's subread-data (human chromosome 20,
exons only). The exon table's genes get the longest open reading frame of
their spliced exons as an inferred CDS (`with_inferred_cds`), flagged as
such: it labels the reading frame of training windows, never a held-out
variant set. Coordinates are 0-based, half-open, on the record's forward
strand; `strand` says which strand the transcript is read from.
"""

from __future__ import annotations

import gzip
import io
import itertools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from Bio.Seq import Seq

from carbon_app.core.dna import reverse_complement

_ATTRIBUTE = re.compile(r'(\S+) "([^"]*)"')


@dataclass
class Transcript:
    id: str
    gene: str
    strand: int  # 1 or -1
    exons: list[tuple[int, int]]  # sorted by start, forward-strand coordinates
    cds: list[tuple[int, int]] = field(default_factory=list)
    biotype: str = ""
    cds_inferred: bool = False  # the CDS is the longest open reading frame, not the annotation's

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


MIN_ORF = 300  # bases, stop codon included: 100 codons (TransDecoder's default) rarely occur by chance
_ORF = re.compile(r"M[^*]*\*")  # an ATG to the first in-frame stop after it


def longest_orf(mrna: str) -> tuple[int, int] | None:
    """(start, end) in `mrna` of its longest ATG-to-stop open reading frame, the stop codon included, on
    the given strand; None when none reaches MIN_ORF bases."""
    best: tuple[int, int] | None = None
    for frame in range(3):
        usable = (len(mrna) - frame) // 3 * 3
        protein = str(Seq(mrna[frame : frame + usable]).translate())
        for match in _ORF.finditer(protein):  # the first ATG of each stop-to-stop stretch: its longest ORF
            start, end = frame + 3 * match.start(), frame + 3 * match.end()
            if end - start >= MIN_ORF and (best is None or end - start > best[1] - best[0]):
                best = (start, end)
    return best


def with_inferred_cds(transcript: Transcript, genome: str) -> Transcript:
    """The transcript with the longest open reading frame of its spliced exons as its CDS (flagged
    `cds_inferred`), where it has no CDS of its own and one reaches MIN_ORF; else unchanged. For the
    exon table's gene unions: the exons of all of a gene's isoforms, joined, keep the frame wherever
    the isoforms share it, and where they do not the frame meets a stop and the ORF ends."""
    if transcript.cds or not (orf := longest_orf(transcript.spliced(genome))):
        return transcript
    bases = transcript.positions(transcript.exons)[orf[0] : orf[1]]
    return replace(transcript, cds=_merge([(at, at + 1) for at in bases]), cds_inferred=True)


def inferred_frame_check(transcripts: list[Transcript], genome: str) -> Counter:
    """How well `with_inferred_cds` finds an annotated reading frame when it sees what the exon table gives:
    each gene's isoforms merged into one union of exons, CDS dropped. Counts the bases the inferred CDS
    labels ("inferred") and those of them at a codon place some isoform's CDS gives them ("agree"); the
    annotated CDS bases ("annotated") and those the inferred CDS gives the same place ("found")."""
    counts: Counter = Counter()
    by_gene: dict[tuple, list[Transcript]] = defaultdict(list)
    for transcript in transcripts:
        if transcript.cds and not transcript.cds_inferred:
            by_gene[(transcript.gene, transcript.strand)].append(transcript)
    for (gene, strand), isoforms in by_gene.items():
        annotated: dict[int, set[int]] = defaultdict(set)
        for isoform in isoforms:
            for at, place in isoform.codon_positions().items():
                annotated[at].add(place)
        union = Transcript(gene, gene, strand, _merge([exon for t in isoforms for exon in t.exons]))
        inferred = with_inferred_cds(union, genome).codon_positions() if union.exons else {}
        counts["genes"] += 1
        counts["inferred"] += len(inferred)
        counts["agree"] += sum(place in annotated.get(at, ()) for at, place in inferred.items())
        counts["annotated"] += len(annotated)
        counts["found"] += sum(inferred.get(at) in places for at, places in annotated.items())
    return counts
