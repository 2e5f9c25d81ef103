"""The demo-model pipeline on small real objects: labels, splits, template mix, training, Markov baseline."""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from carbon_app.core.dna import BASES, reverse_complement
from tests.conftest import random_dna
from training import data as demo_data
from training.annotation import Transcript, read_exon_table, read_gtf
from training.data import (
    WINDOW,
    Record,
    _choose_tags,
    _group_of_taxonomy,
    _is_human_chr17,
    parse_mix,
    sample_eval_windows,
    sample_training_windows,
    split_bounds,
    write_dataset,
)
from training.evaluate import MarkovModel, accuracy, auroc
from training.losses import (
    UNKNOWN_BEFORE,
    bases_before,
    holds_stop,
    marked_bases,
    single_substitutions,
    splice_contrast_loss,
    splice_side_tokens,
    stop_contrast_loss,
    stop_loss,
    stop_table,
)
from training.variant_sets import (
    coding_variants,
    splice_dinucleotide_change,
    splice_dinucleotide_shares,
    splice_variants,
    variant_sets,
)


def test_gtf_transcripts_keep_exons_cds_stop_codon_and_biotype(tmp_path):
    gtf = tmp_path / "x.gtf.gz"
    rows = [
        ("gene", 101, 400, "+", 'gene_id "g1"; transcript_id ""; gene_biotype "protein_coding";'),
        ("exon", 101, 200, "+", 'gene_id "g1"; transcript_id "t1";'),
        ("CDS", 151, 200, "+", 'gene_id "g1"; transcript_id "t1";'),
        ("exon", 301, 400, "+", 'gene_id "g1"; transcript_id "t1";'),
        ("CDS", 301, 347, "+", 'gene_id "g1"; transcript_id "t1";'),
        ("stop_codon", 348, 350, "+", 'gene_id "g1"; transcript_id "t1";'),
        ("gene", 501, 573, "-", 'gene_id "g2"; transcript_id ""; gene_biotype "tRNA";'),
        ("exon", 501, 573, "-", 'gene_id "g2"; transcript_id "t2";'),
    ]
    lines = ["#gtf-version 2.2"] + [f"chr1\tRefSeq\t{f}\t{a}\t{b}\t.\t{st}\t.\t{attr}" for f, a, b, st, attr in rows]
    gtf.write_bytes(gzip.compress("\n".join(lines).encode()))
    t1, t2 = sorted(read_gtf(gtf)["chr1"], key=lambda t: t.id)
    assert t1.exons == [(100, 200), (300, 400)] and t1.cds == [(150, 200), (300, 350)]  # the stop codon joins
    assert t1.introns() == [(200, 300)] and t1.biotype == "protein_coding" and t1.strand == 1
    assert t2.strand == -1 and t2.biotype == "tRNA" and not t2.coding
    table = tmp_path / "exons.txt.gz"
    table.write_bytes(gzip.compress(b"GeneID\tChr\tStart\tEnd\tStrand\n7\tchr20\t11\t20\t-\n7\tchr20\t15\t30\t-\n"
                                    b"7\tchr20\t51\t60\t-\n"))
    (gene,) = read_exon_table(table)["chr20"]
    assert gene.exons == [(10, 30), (50, 60)] and gene.strand == -1 and gene.biotype == ""


def _coding_gene(strand: int) -> tuple[str, Transcript]:
    """A 2-exon gene ATG CAG | intron GT...AG | TGG AAA TAA, on either strand of a random genome."""
    rng = random.Random(7)
    flank = "".join(rng.choice("ACGT") for _ in range(300))
    body = [rng.choice("ACT") for _ in range(296)]  # no G but two deep ones: no stray splice signals,
    body[118] = body[178] = "G"  # and a matched control for each G of the GT ... AG;
    body[117], body[119], body[177], body[179] = "C", "T", "A", "C"  # one deep GT (intron 120), one AG (179)
    intron = "GT" + "".join(body) + "AG"
    gene = "ATGCAG" + intron + "TGGAAATAA"
    genome = flank + gene + flank
    exons = [(300, 306), (606, 615)]
    if strand == -1:
        genome = reverse_complement(genome)
        exons = sorted((len(genome) - b, len(genome) - a) for a, b in exons)
    return genome, Transcript("t", "g", strand, exons, list(exons), "protein_coding")


@pytest.mark.parametrize("strand", [1, -1])
def test_stop_gain_synonymous_and_splice_variants_are_what_they_say(strand):
    from Bio.Seq import Seq

    genome, transcript = _coding_gene(strand)
    found = coding_variants(transcript, genome)
    # codons 2-4 only (not the start, not the stop): CAG -> TAG; TGG -> TAG, TGA; AAA -> TAA;
    # synonymous: CAG -> CAA, AAA -> AAG
    assert len(found["stop_gain"]) == 4 and len(found["synonymous"]) == 2
    cds_positions = transcript.positions(transcript.cds)
    for kind, variants in found.items():
        for v in variants:
            assert genome[v["pos"] - 1] == v["ref"]
            mutated = genome[: v["pos"] - 1] + v["alt"] + genome[v["pos"] :]
            before = str(Seq(transcript.spliced(genome, transcript.cds)).translate())
            after = str(Seq(transcript.spliced(mutated, transcript.cds)).translate())
            assert v["pos"] - 1 in cds_positions
            assert (after.index("*") < len(after) - 1) if kind == "stop_gain" else (after == before)
    splice = splice_variants(transcript, genome, random.Random(0))
    assert len(splice["splice_site"]) == 4 * 3
    intron_ends = {p for a, b in transcript.introns() for p in (a, a + 1, b - 2, b - 1)}
    assert {v["pos"] - 1 for v in splice["splice_site"]} == intron_ends
    assert all(min(abs(v["pos"] - 1 - p) for p in intron_ends) >= 99 for v in splice["deep_intronic"])
    # controls matched pair by pair: the same base change, four distinct deep positions
    changes = {kind: [(v["ref"], v["alt"]) for v in found] for kind, found in splice.items()}
    assert changes["deep_intronic"] == changes["splice_site"] == changes["deep_same_dinucleotide"]
    assert len({v["pos"] for v in splice["deep_intronic"]}) == 4
    # and the same base of the same dinucleotide broken deep in the intron: the G and T of its one deep GT,
    # the A and G of its one deep AG (intron places, read along the transcript)
    (intron,) = transcript.introns()
    where = transcript.positions([intron])
    assert [where.index(v["pos"] - 1) for v in splice["deep_same_dinucleotide"]] == [
        place for place in (120, 121, 179, 180) for _ in range(3)]


def test_the_evaluation_reads_every_method_and_radius_from_one_scoring_of_each_variant(compact, monkeypatch):
    from training.evaluate import model_delta, model_deltas

    context = "ATGGTGCATCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTGGATGAAGTTGGTGGTGAGG" * 2
    variants = ["40:G>T", "81:G>A", "120:C>T"]
    readings = (("chain", 12), ("marginal", 12), ("chain", None), ("chain", 3), ("marginal", None))
    alone = {(m, r): [model_delta(compact, m, r)(context, v) for v in variants] for m, r in readings}
    assert alone["chain", 12] != alone["chain", None] != alone["chain", 3]
    passes = []
    forward = compact.hidden_states
    monkeypatch.setattr(compact, "hidden_states", lambda ids: passes.append(len(ids)) or forward(ids))
    deltas = model_deltas(compact, readings)
    assert [deltas["chain", 12](context, v) for v in variants] == alone["chain", 12]
    scored = len(passes)
    assert scored > 0
    for reading in readings[1:]:
        assert [deltas[reading](context, v) for v in variants] == pytest.approx(alone[reading], abs=1e-9)
    assert len(passes) == scored  # the other readings needed no forward pass of their own


def test_an_snv_makes_or_breaks_splice_dinucleotides_read_on_either_strand():
    from training.evaluate import dinucleotide_delta

    def snv(context: str, pos: int, alt: str, kind: str = "k") -> dict:
        return {"context": context, "context_pos": pos, "ref": context[pos - 1], "alt": alt, "group": "g",
                "kind": kind}

    assert splice_dinucleotide_change(snv("CCGTC", 3, "A")) == -1  # GT broken
    assert splice_dinucleotide_change(snv("CCATC", 3, "G")) == 1  # GT made
    assert splice_dinucleotide_change(snv("TAGGTA", 3, "C")) == 0  # AG broken, AC (GT read backwards) made
    assert splice_dinucleotide_change(snv("CAGTC", 3, "T")) == -2  # the G of AGT: AG and GT both broken
    assert splice_dinucleotide_change(snv("GTA", 1, "A")) == -1  # at the context's first base
    assert splice_dinucleotide_change(snv("GGGGG", 3, "C")) == 0
    assert dinucleotide_delta("CCATC", "3:A>G") == 1.0 and dinucleotide_delta("CAGTC", "3:G>T") == -2.0
    shares = splice_dinucleotide_shares([snv("CCGTC", 3, "A", "x"), snv("CCATC", 3, "G", "x"),
                                         snv("GGGGG", 3, "C", "x"), snv("GGGGG", 3, "C", "y")])
    assert shares == {"g": {"x": {"makes": 1 / 3, "keeps": 1 / 3, "breaks": 1 / 3},
                            "y": {"makes": 0.0, "keeps": 1.0, "breaks": 0.0}}}


def test_held_out_variant_sets_come_from_test_genes_only_with_their_context():
    genome, transcript = _coding_gene(1)
    train_copy = Transcript("t0", "g0", 1, list(transcript.exons), list(transcript.exons),
                            "protein_coding")
    records = [Record("held", genome, "mammal", "human", "test", [transcript], held_out=True),
               Record("train", genome + "A" * 20_000, "plant", "cress", "test", [train_copy])]
    sets = variant_sets(records, random.Random(1))
    assert {v["record"] for found in sets.values() for v in found} == {"held"}
    kinds = Counter(v["kind"] for v in sets["coding"])
    assert kinds["stop_gain"] == kinds["synonymous"] == 2  # balanced within the gene
    changes = {kind: Counter((v["ref"], v["alt"]) for v in sets["splice"] if v["kind"] == kind)
               for kind in ("splice_site", "deep_intronic")}
    assert changes["splice_site"] == changes["deep_intronic"] and sum(changes["splice_site"].values()) == 4
    assert Counter(v["kind"] for v in sets["splice_matched"]) == {"deep_same_dinucleotide": 4}
    assert Counter((v["ref"], v["alt"]) for v in sets["splice_matched"]) == changes["splice_site"]
    for v in sets["coding"] + sets["splice"] + sets["splice_matched"]:
        assert v["context"][v["context_pos"] - 1] == v["ref"] == genome[v["pos"] - 1]


def test_validation_variant_sets_come_from_the_validation_part_only():
    """One record, the same gene twice: in its validation part (90-95% of its length) and in its test part
    (the last 5%); each part's sets hold its own copy, so choosing on validation never reads the test genes.
    The validation coding set reads inferred CDSs too, the test set never."""
    genome, transcript = _coding_gene(1)

    def at(offset: int, name: str) -> Transcript:
        return Transcript(name, name, 1, [(a + offset, b + offset) for a, b in transcript.exons],
                          [(a + offset, b + offset) for a, b in transcript.cds], "protein_coding")

    sequence = random_dna(36_500, 1) + genome + random_dna(1_085, 2) + genome + random_dna(585, 3)
    assert len(sequence) == 40_000 and demo_data.split_bounds(len(sequence)) == (36_000, 38_000)
    record = Record("r", sequence, "plant", "cress", "test", [at(36_500, "in validation"), at(38_500, "in test")])
    for part, gene in (("validation", "in validation"), ("test", "in test")):
        sets = variant_sets([record], random.Random(1), part)
        assert len(sets["coding"]) == 4 and len(sets["splice"]) == 8
        assert {v["gene"] for found in sets.values() for v in found} == {gene}
        for v in sets["coding"] + sets["splice"]:
            assert v["context"][v["context_pos"] - 1] == v["ref"] == sequence[v["pos"] - 1]
    # a CDS inferred as the longest ORF (the human exon table's genes) gives a validation coding set, never a test one
    inferred = replace(record, transcripts=[replace(t, cds_inferred=True) for t in record.transcripts])
    assert len(variant_sets([inferred], random.Random(1), "validation")["coding"]) == 4
    assert variant_sets([inferred], random.Random(1), "test")["coding"] == []


@pytest.mark.parametrize("strand", [1, -1])
def test_an_exon_table_gene_gets_its_longest_orf_as_a_flagged_cds_never_a_held_out_set(strand):
    """A two-exon gene as the exon table gives it (exons only): the longest ATG-to-stop ORF of the spliced
    exons becomes its CDS, across the intron and on either strand; it labels training frames, while the
    held-out coding set is read from annotated CDS only."""
    from Bio.Seq import Seq

    from training.annotation import MIN_ORF, inferred_frame_check, longest_orf, with_inferred_cds

    rng = random.Random(3)
    sense = [c for c in (a + b + c for a in "ACGT" for b in "ACGT" for c in "ACGT") if c not in ("TAA", "TAG", "TGA")]
    orf = "ATG" + "".join(rng.choice(sense) for _ in range(200)) + "TGA"  # 606 bases
    short = "ATG" + "".join(rng.choice(sense) for _ in range(50)) + "TAA"  # a shorter ORF in another frame
    mrna = "CC" + short + "C" + "TAA" + orf + "GGCC"  # a stop in the long ORF's frame just before its ATG
    assert longest_orf(mrna) == (2 + len(short) + 4, 2 + len(short) + 4 + len(orf))
    assert longest_orf(short) is None and len(short) < MIN_ORF  # too short to tell from chance
    genome = random_dna(600, 8) + mrna[:400] + "GT" + random_dna(300, 9) + "AG" + mrna[400:] + random_dna(600, 10)
    exons = [(600, 1000), (1304, 1304 + len(mrna) - 400)]
    if strand == -1:
        genome = reverse_complement(genome)
        exons = sorted((len(genome) - b, len(genome) - a) for a, b in exons)
    gene = Transcript("g", "g", strand, exons)  # as read_exon_table gives it: no CDS, no biotype
    inferred = with_inferred_cds(gene, genome)
    assert inferred.cds_inferred and inferred.spliced(genome, inferred.cds) == orf
    assert str(Seq(orf).translate()).count("*") == 1 and len(inferred.cds) == 2  # across the intron
    annotated = Transcript("a", "a", strand, exons, list(inferred.cds), "protein_coding")
    assert with_inferred_cds(annotated, genome) is annotated  # a CDS of its own stays
    frames = Counter(demo_data.token_frames(inferred, inferred.positions(inferred.exons)[:600]))  # its mRNA
    assert frames[-1] == 0 and frames[0] + frames[1] + frames[2] > 60  # the inferred CDS's codons, read on
    check = inferred_frame_check([annotated], genome)  # the union of one isoform: found exactly
    assert check["agree"] == check["inferred"] == check["found"] == check["annotated"] == len(orf)
    records = [Record("held", genome, "mammal", "human", "test", [inferred], held_out=True)]
    sets = variant_sets(records, random.Random(1))
    assert sets["coding"] == [] and len(sets["splice"]) > 0  # the inferred CDS gives no held-out coding set
    assert variant_sets([replace(records[0], transcripts=[annotated])], random.Random(1))["coding"]


def test_auroc_counts_ties_half():
    assert auroc([3, 4], [1, 2]) == 1 and auroc([1, 2], [3, 4]) == 0 and auroc([1, 2], [2, 1]) == 0.5


@pytest.mark.integration  # trains a model
def test_evaluate_names_what_a_draft_only_measurement_lacks(tmp_path, capsys):
    from training.evaluate import main as evaluate_main

    saved = tmp_path / "eval.json"
    saved.write_text(json.dumps({"target": {}}))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for argv, named in ((["--measure-draft", "--draft", str(model)], "--measure-draft needs --results"),
                        (["--measure-draft", "--results", str(saved)], "and --draft"),
                        (["--results", str(saved)], "not the results of an evaluation (no markov"),
                        (["--draft", str(tmp_path / "nope")], f"--draft {tmp_path / 'nope'}: not a model folder")):
        with pytest.raises(SystemExit) as exit_info:
            evaluate_main(["--target", str(model), *argv])
        assert exit_info.value.code == 2 and named in capsys.readouterr().err


def test_taxonomy_groups_and_chromosome_17_guard():
    assert _group_of_taxonomy(["Eukaryota", "Metazoa", "Chordata", "Craniata", "Vertebrata", "Mammalia"]) == "mammal"
    assert _group_of_taxonomy(["Eukaryota", "Metazoa", "Chordata", "Craniata", "Vertebrata", "Aves"]) == "vertebrate"
    assert _group_of_taxonomy(["Eukaryota", "Metazoa", "Arthropoda"]) == "invertebrate"
    assert _group_of_taxonomy(["Eukaryota", "Viridiplantae"]) == "plant"
    assert _group_of_taxonomy(["Eukaryota", "Fungi"]) == "fungus"
    assert _group_of_taxonomy(["Bacteria", "Proteobacteria"]) == "prokaryote"
    assert _group_of_taxonomy(["Viruses"]) is None
    assert _is_human_chr17("Homo sapiens", "Homo sapiens chromosome 17, clone X")
    assert _is_human_chr17("Homo sapiens", ">chr17 1000 2000")
    assert not _is_human_chr17("Homo sapiens", "chromosome 1, complete") and not _is_human_chr17(
        "Mus musculus", "chr17")


def test_template_mix_follows_carbon_pretraining():
    rng = random.Random(0)
    counts = Counter(_choose_tags(rng, "plant", "trna") for _ in range(60_000))
    share = {key: n / 60_000 for key, n in counts.items()}
    assert share[(None, None)] == pytest.approx(0.5, abs=0.01)
    for key in (("plant", "trna"), ("plant", None), (None, "trna")):
        assert share[key] == pytest.approx(1 / 6, abs=0.01)
    assert {s for s, _ in (_choose_tags(rng, "prokaryote", None) for _ in range(100))} == {None}


@pytest.mark.parametrize("text, problem", [
    ("cds=1", "unknown window kind 'cds'"), ("mrna", "--mix needs window kind=share, got 'mrna'"),
    ("mrna=x", "the --mix share of mrna must be a number, not 'x'"),
    ("mrna=-1", "the --mix share of mrna must be at least 0, not -1"),
    ("mrna=nan", "the --mix share of mrna must be at least 0, not nan"), ("gene=0", "above 0")])
def test_a_bad_mix_is_named(text, problem):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(problem)):
        parse_mix(text)


def test_windows_never_cross_the_held_out_split(monkeypatch):
    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 60 * WINDOW for g in demo_data.GROUPS})
    seq = random_dna(30_000, 1)
    transcripts = [Transcript("a", "a", 1, [(1000, 1400), (1900, 2500)], [(1000, 1400), (1900, 2497)],
                              "protein_coding"),
                   Transcript("b", "b", -1, [(5000, 5100)], [], "tRNA"),
                   Transcript("c", "c", 1, [(27_500, 28_000), (28_500, 29_000)], [], "protein_coding")]
    records = [Record("r1", seq, "fungus", "yeast", "test", transcripts),
               Record("hbb", random_dna(5000, 2), "mammal", "human", "test", held_out=True)]
    train = sample_training_windows(records, random.Random(3))
    mrna_only = sample_training_windows(records, random.Random(3), parse_mix("mrna=1"))
    assert {w["kind"] for w in mrna_only} == {"mrna"}  # the --mix of the data command is what is drawn
    train_end = split_bounds(len(seq))[0]
    allowed = seq[:train_end]
    mrnas = [transcripts[0].spliced(seq), transcripts[1].spliced(seq)]
    assert {w["kind"] for w in train} == {"mrna", "gene", "splice", "genomic"}
    antisense = Counter()
    for window in train:
        assert window["record"] == "r1"  # the held-out record never trains
        # a transcript read on its opposite strand names no region (its tag names a gene read on its own)
        on_gene_strand = window["seq"] if window["gene_region"] else reverse_complement(window["seq"])
        if window["kind"] != "genomic" and not window["gene_region"]:
            antisense[window["kind"]] += 1
        if window["kind"] == "mrna":  # spliced: the exons joined, never the intron
            assert any(on_gene_strand in m for m in mrnas)
        else:
            assert window["seq"] in allowed or reverse_complement(window["seq"]) in allowed
        if window["kind"] == "splice":  # across an exon-intron boundary of a, the only spliced train transcript
            lo = allowed.find(on_gene_strand)
            assert lo >= 0 and any(lo < boundary < lo + len(on_gene_strand) for boundary in (1400, 1900))
        assert window["gene_region"] in (None, "protein_coding", "trna")
    assert all(antisense[kind] >= 3 for kind in ("mrna", "gene", "splice"))
    test = sample_eval_windows(records, "test", 5, random.Random(4))
    assert {w["record"] for w in test} == {"r1", "hbb"}
    assert all(w["start"] - 1 >= split_bounds(len(seq))[1] for w in test if w["record"] == "r1")


def test_token_frames_give_each_6mer_its_codon_place_on_either_strand():
    # exons 100-400 and 600-1000 (forward, 0-based half-open), CDS 150-400 and 600-900
    plus = Transcript("t", "g", 1, [(100, 400), (600, 1000)], [(150, 400), (600, 900)], "protein_coding")
    minus = replace(plus, strand=-1)
    assert list(demo_data.token_frames(plus, list(range(138, 174)))) == [3, 3, 0, 0, 0, 0]  # 5' UTR, then codons
    assert list(demo_data.token_frames(plus, list(range(588, 612)))) == [3, 3, 1, 1]  # the intron; exon 2's frame
    assert list(demo_data.token_frames(plus, list(range(996, 1008)))) == [3, -1]  # past the transcript: unknown
    # read on the minus strand the CDS begins at 899: its bases 899, 898, 897 are codon places 0, 1, 2
    assert list(demo_data.token_frames(minus, list(range(1011, 885, -1)))) == [-1, -1] + [3] * 17 + [2, 2]
    # a 6-mer that leaves the CDS has no frame: its last bases are no codon's (the intron's GT at 400, the 3' UTR)
    assert list(demo_data.token_frames(plus, list(range(390, 408)))) == [0, -1, 3]  # 396-401 holds 400, 401
    assert list(demo_data.token_frames(plus, list(range(891, 909)))) == [1, -1, 3]  # 897-902 holds 900, 901, 902
    mrna = plus.positions(plus.exons)[290:308]  # ... 396-399, 600-601 ...: spliced, the codons run on
    assert list(demo_data.token_frames(plus, mrna)) == [0, 0, 0]
    # read backwards (antisense) the CDS is left at its start (149) and at exon 2's 5' end (599)
    assert list(demo_data.token_frames(plus, list(range(159, 141, -1)), antisense=True)) == [4 + 0, -1, 3]
    assert list(demo_data.token_frames(plus, list(range(609, 591, -1)), antisense=True)) == [4 + 1, -1, 3]
    no_cds = Transcript("n", "n", 1, [(100, 400)], [], "protein_coding")
    trna = Transcript("r", "r", 1, [(100, 400)], [], "tRNA")
    assert set(demo_data.token_frames(no_cds, list(range(100, 160)))) == {-1}  # may code: the table cannot say
    assert set(demo_data.token_frames(trna, list(range(100, 160)))) == {3}


def test_token_splice_sites_mark_the_6mers_holding_an_introns_first_or_last_two_bases():
    # the intron 400-600: its GT at 400-401, its AG at 598-599 (forward, 0-based)
    plus = Transcript("t", "g", 1, [(100, 400), (600, 1000)], [(150, 400), (600, 900)], "protein_coding")
    # bit j: the 6-mer's j-th base in reading order
    assert list(demo_data.token_splice_sites(plus, range(390, 414))) == [0, 16 + 32, 0, 0]  # 396-401: 400, 401
    assert list(demo_data.token_splice_sites(plus, range(593, 611))) == [32, 1, 0]  # 593-598 holds 598; 599-604
    assert list(demo_data.token_splice_sites(plus, range(605, 593, -1))) == [0, 1 + 2]  # backwards: 599, 598
    assert list(demo_data.token_splice_sites(plus, range(402, 420))) == [0, 0, 0]  # inside the intron
    assert not demo_data.token_splice_sites(replace(plus, exons=[(100, 1000)]), range(390, 414)).any()  # no intron


def test_training_windows_carry_frame_labels_that_keep_stop_codons_out_of_frame(monkeypatch, tmp_path):
    """A stop-free open reading frame in two exons: every 6-mer labelled with a codon place has no stop codon
    in that frame, and the labels reach the saved rows beside the tokens."""
    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 60 * WINDOW for g in demo_data.GROUPS})
    rng = random.Random(11)
    sense = [c for c in (a + b + c for a in "ACGT" for b in "ACGT" for c in "ACGT") if c not in ("TAA", "TAG", "TGA")]
    orf = "ATG" + "".join(rng.choice(sense) for _ in range(799))  # 2,400 bases, no stop (GTF CDS leave it out)
    seq = random_dna(30_000, 4)
    seq = seq[:2000] + orf[:1200] + "GT" + random_dna(596, 5) + "AG" + orf[1200:] + seq[2000 + 1200 + 600 + 1200:]
    gene = Transcript("a", "a", 1, [(1900, 3200), (3800, 5100)], [(2000, 3200), (3800, 5000)], "protein_coding")
    assert gene.spliced(seq, gene.cds) == orf
    train = sample_training_windows([Record("r", seq, "fungus", "yeast", "test", [gene])], random.Random(2))
    labelled, shifted_stops = Counter(), 0
    for window in train:
        for j, label in enumerate(window["frames"][: len(window["seq"]) // 6]):
            token = window["seq"][6 * j : 6 * j + 6]
            labelled[int(label)] += 1
            if 0 <= label <= 2:  # read on the gene's strand: codons from the label's place
                assert not holds_stop(token, label), (window["kind"], j, token, label)
                shifted_stops += holds_stop(token, (label + 1) % 3)
            elif label >= demo_data.ANTISENSE:  # read backwards: the gene's own bases, last one at that place
                gene_bases, place = reverse_complement(token), label - demo_data.ANTISENSE
                assert not holds_stop(gene_bases, (place - 5) % 3), (window["kind"], j, token, label)
                shifted_stops += holds_stop(gene_bases, (place - 4) % 3)
        if window["kind"] == "genomic":
            assert set(window["frames"]) == {-1}
    assert all(labelled[label] > 100 for label in (-1, *range(7)))
    assert shifted_stops > 50  # a frame off by one finds the stop codons the labels keep out
    from training.tokenizer import demo_tokenizer

    tokenizer = demo_tokenizer(tmp_path / "tokenizer")
    rows, dna_at, frames, splice_marks = demo_data.to_rows(train[:20], tokenizer,
                                                           tokenizer.text_tokenizer.pad_token_id)
    for row, at, frame, marks, window in zip(rows, dna_at, frames, splice_marks, train[:20], strict=True):
        n = len(window["seq"]) // 6
        assert list(row[at + 1 : at + 1 + n]) == tokenizer.kmer_ids(window["seq"][: 6 * n])  # labels beside tokens
        assert list(frame[at + 1 : at + 1 + n]) == list(window["frames"][:n])
        assert set(frame[: at + 1]) | set(frame[at + 1 + n :]) <= {-1}  # tags and pads carry none
        assert list(marks[at + 1 : at + 1 + n]) == list(window["splice_sites"][:n])
        assert not marks[: at + 1].any() and not marks[at + 1 + n :].any()
    # the intron 3200-3800 reads GT...AG on the gene's strand: a marked 6-mer holds its G/T or A/G
    for window in train:
        marked = [window["seq"][6 * j : 6 * j + 6] for j, mark in enumerate(window["splice_sites"]) if mark]
        if window["kind"] in ("mrna", "genomic"):
            assert not marked  # spliced away, or not annotated
        elif window["kind"] == "splice":
            assert marked and all(any(pair in token for pair in ("GT", "AG", "AC", "CT")) for token in marked)
            # the marked bases themselves are a G/T or A/G of the gene's strand (C/A or T/C read backwards)
            bases = {window["seq"][6 * j + b] for j, mark in enumerate(window["splice_sites"])
                     for b in range(6) if mark >> b & 1}
            assert bases and bases <= set("GTA" if window["gene_region"] else "CAT")


def test_the_stop_table_and_term_know_each_frame_on_either_strand():
    table = stop_table(6)[:, UNKNOWN_BEFORE]  # stops inside the 6-mer alone
    kmers = ["".join(bases) for bases in itertools.product(BASES, repeat=6)]
    index = {kmer: i for i, kmer in enumerate(kmers)}
    assert [int(n) for n in table.sum(1)] == [375, 192, 192, 0, 192, 192, 375]  # 4096 - 61^2; 3 x 64 per codon
    assert table[0, index["TAAGGG"]] and table[0, index["GGGTGA"]] and not table[1, index["TAAGGG"]]
    assert table[2, index["GTAAGG"]] and not table[1, index["GTAAGG"]]
    # GGGTAA read backwards is TTACCC; its first base read is the gene's last, codon place 2
    assert table[demo_data.ANTISENSE + 2, index["TTACCC"]] and not table[demo_data.ANTISENSE, index["TTACCC"]]
    logprobs = torch.full((3, 4096), -30.0)
    logprobs[0, index["TAAGGG"]] = logprobs[1, index["GGGGGG"]] = logprobs[2, index["TAAGGG"]] = 0.0
    kmer, labels = torch.tensor([index["GGGGGG"]] * 2 + [index["TAAGGG"]]), torch.tensor([0, 0, 0])
    table, unknown = stop_table(6), torch.full((1,), UNKNOWN_BEFORE)
    assert stop_loss(logprobs[:1], kmer[:1], labels[:1], unknown, table) > 10  # all its mass on an in-frame stop
    assert stop_loss(logprobs[1:2], kmer[1:2], labels[1:2], unknown, table) < 1e-6
    assert stop_loss(logprobs[2:], kmer[2:], labels[2:], unknown, table) == 0  # the annotated stop is left alone
    assert stop_loss(logprobs[:1], kmer[:1], torch.tensor([3]), unknown, table) == 0  # not coding: no frame


def test_a_stop_codon_split_between_two_6mers_is_the_second_ones_doing():
    table = stop_table(6)
    index = {"".join(bases): i for i, bases in enumerate(itertools.product(BASES, repeat=6))}
    pair = {"".join(bases): i for i, bases in enumerate(itertools.product(BASES, repeat=2))}
    # first base at codon place 2: the codon is the two bases before and this one; at place 1, the one before
    # and these two
    assert table[2, pair["TA"], index["GCCCCC"]] and not table[2, UNKNOWN_BEFORE, index["GCCCCC"]]
    assert table[1, pair["CT"], index["AACCCC"]] and not table[1, pair["TC"], index["AACCCC"]]
    assert not table[0, pair["TA"], index["GCCCCC"]]  # place 0: the bases before end the codon before
    # read backwards: CT ACCCCC is the gene's GGGGG TAG, the stop's T this 6-mer's last base read
    assert table[demo_data.ANTISENSE, pair["CT"], index["ACCCCC"]]
    assert not table[demo_data.ANTISENSE, UNKNOWN_BEFORE, index["ACCCCC"]]
    assert all(torch.equal(table[:, row] | table[:, UNKNOWN_BEFORE], table[:, row]) for row in range(16))
    # the row each token reads: the token before's last two bases where it is the same gene in the same frame
    previous = torch.tensor([index["CCCCTA"]] * 3 + [-3] + [index["CCCCTA"]] * 2)
    previous_labels = torch.tensor([2, 1, 2, 2, 2, demo_data.NOT_CODING])
    labels = torch.tensor([2, 2, demo_data.NOT_CODING, 2, -1, demo_data.NOT_CODING])
    assert bases_before(previous, previous_labels, labels, 4096).tolist() == [pair["TA"]] + [UNKNOWN_BEFORE] * 5
    # the stop contrast then sets GCCCCC after TA against its SNVs, and CCCCCC after TA against GCCCCC
    uniform = torch.full((2, 4096), -math.log(4096))
    kmer, before = torch.tensor([index["GCCCCC"], index["CCCCCC"]]), torch.tensor([pair["TA"]] * 2)
    assert stop_contrast_loss(uniform[:1], kmer[:1], torch.tensor([2]), before[:1], table) == 0  # a stop itself
    assert stop_contrast_loss(uniform[1:], kmer[1:], torch.tensor([2]), before[1:], table).item() == pytest.approx(
        math.log(3))  # TAG and TAA: C -> G or A at its first base
    assert stop_contrast_loss(uniform[1:], kmer[1:], torch.tensor([2]), torch.tensor([UNKNOWN_BEFORE]),
                              table) == 0


def test_the_stop_contrast_sets_a_coding_6mer_against_the_snvs_that_make_a_stop():
    kmers = ["".join(bases) for bases in itertools.product(BASES, repeat=6)]
    index = {kmer: i for i, kmer in enumerate(kmers)}
    table, substitutions = stop_table(6), single_substitutions(6)
    unknown = torch.full((1,), UNKNOWN_BEFORE)  # nothing known before: stops inside the 6-mer
    assert substitutions.shape == (4096, 18)
    made = {kmers[i] for i in substitutions[index["CAGGGG"]].tolist()}
    assert len(made) == 18 and "TAGGGG" in made and "CAGGGA" in made and "CAGGGG" not in made
    # CAG GGG in frame 0: one SNV (C->T) makes a stop, TAG; GGG GGG is never one SNV from a stop
    uniform = torch.full((4, 4096), -math.log(4096))
    kmer = torch.tensor([index["CAGGGG"], index["GGGGGG"], index["TAGGGG"], index["CAGGGG"]])
    assert stop_contrast_loss(uniform[:1], kmer[:1], torch.tensor([0]), unknown,
                              table).item() == pytest.approx(math.log(2))
    assert stop_contrast_loss(uniform[1:2], kmer[1:2], torch.tensor([0]), unknown, table) == 0  # no stop one SNV away
    assert stop_contrast_loss(uniform[2:3], kmer[2:3], torch.tensor([0]), unknown, table) == 0  # the stop codon itself
    assert stop_contrast_loss(uniform[3:], kmer[3:], torch.tensor([demo_data.NOT_CODING]), unknown, table) == 0
    stop_up, other_up = uniform[:1].clone(), uniform[:1].clone()
    stop_up[0, index["TAGGGG"]] += 3.0  # the stop-making SNV more likely: the term rises
    other_up[0, index["CAGGGA"]] += 3.0  # a synonymous SNV more likely: the term does not see it
    assert stop_contrast_loss(stop_up, kmer[:1], torch.tensor([0]), unknown, table) > math.log(2) + 2
    assert stop_contrast_loss(other_up, kmer[:1], torch.tensor([0]), unknown,
                              table).item() == pytest.approx(math.log(2))
    # CTGGGG read backwards is the gene's CCC CAG (its first base read at place 2): CTAGGG, the gene's
    # CCC TAG, is its stop-making SNV; read forwards in frame 0, CTG GGG is one SNV from no stop
    backwards = torch.tensor([index["CTGGGG"]])
    assert stop_contrast_loss(uniform[:1], backwards, torch.tensor([demo_data.ANTISENSE + 2]),
                              unknown, table).item() == pytest.approx(math.log(2))
    assert stop_contrast_loss(uniform[:1], backwards, torch.tensor([0]), unknown, table) == 0


def test_the_splice_contrast_sets_the_true_6mer_against_its_splice_base_rivals_only():
    index = {"".join(bases): i for i, bases in enumerate(itertools.product(BASES, repeat=6))}
    kmer, gt = torch.tensor([index["AGGTAA"]]), marked_bases(torch.tensor([4 + 8]), 6)  # the donor's GT: bases 3, 4
    uniform = torch.full((1, 4096), -math.log(4096))
    assert splice_contrast_loss(uniform, kmer, gt).item() == pytest.approx(math.log(16))  # 4 x 4 rivals
    rival_up, other_up = uniform.clone(), uniform.clone()
    rival_up[0, index["AGCAAA"]] += 3.0  # a rival: the dinucleotide changed, the other bases kept
    other_up[0, index["TGGTAA"]] += 3.0  # not a rival: a base outside the dinucleotide changed
    assert splice_contrast_loss(rival_up, kmer, gt) > splice_contrast_loss(uniform, kmer, gt) + 0.5
    assert splice_contrast_loss(other_up.log_softmax(-1), kmer, gt).item() == pytest.approx(math.log(16))
    sure = uniform.clone()
    sure[0, index["AGGTAA"]] = 0.0
    assert splice_contrast_loss(sure, kmer, gt) < 0.01  # 15 rivals at 1/4096 each against 1
    one_base = marked_bases(torch.tensor([4]), 6)  # an acceptor's G at an exon's start
    assert splice_contrast_loss(uniform, kmer, one_base).item() == pytest.approx(math.log(4))


def test_splice_sites_are_told_donor_or_acceptor_by_their_marked_letters_on_either_strand_and_weighed_so():
    index = {"".join(bases): i for i, bases in enumerate(itertools.product(BASES, repeat=6))}
    start = 20  # the first 6-mer id; 0-19 stand for tags and pads

    def row(*tokens):  # (6-mer, its marks) pairs, or a bare id (a tag)
        ids = [t if isinstance(t, int) else start + index[t[0]] for t in tokens]
        marks = [0 if isinstance(t, int) else t[1] for t in tokens]
        return torch.tensor([ids]), torch.tensor([marks])

    # bit j marks the j-th base: a donor's GT whole, an acceptor's AG split over two 6-mers, then read backward
    targets, marks = row(3, ("AAGTAA", 4 + 8), ("CCCCCA", 32), ("GCCCCC", 1), ("AACTTT", 4 + 8), ("TTTTAC", 16 + 32),
                         ("GCCCCC", 1), ("TTTTTT", 0))
    sides = splice_side_tokens(targets, marks, start, 4096)
    assert sides["donor"].tolist() == [[False, True, False, False, False, True, False, False]]
    assert sides["acceptor"].tolist() == [[False, False, True, True, True, False, False, False]]
    # a marked pair that is no canonical dinucleotide (a GC donor), and a lone marked base, belong to neither
    targets, marks = row(("AAGCAA", 4 + 8), ("AAAAAG", 32))
    sides = splice_side_tokens(targets, marks, start, 4096)
    assert not sides["donor"].any() and not sides["acceptor"].any()
    # weighed: each 6-mer's cross-entropy counts at its weight, divided by all of them, so 1 is unweighted
    logprobs = torch.randn(3, 4096).log_softmax(-1)
    kmer = torch.tensor([index["AAGTAA"], index["CCCCAG"], index["TTAGTT"]])
    varied = marked_bases(torch.tensor([4 + 8, 16 + 32, 4 + 8]), 6)
    whole = splice_contrast_loss(logprobs, kmer, varied)
    assert splice_contrast_loss(logprobs, kmer, varied, torch.ones(3)).item() == pytest.approx(whole.item())
    first = splice_contrast_loss(logprobs[:1], kmer[:1], varied[:1])
    weighed = splice_contrast_loss(logprobs, kmer, varied, torch.tensor([2.0, 0.0, 0.0]))
    assert weighed.item() == pytest.approx(2 * first.item() / 3)


def test_the_coding_kl_holds_the_coding_tokens_alone_near_the_teacher():
    from training.losses import kmer_losses
    from training.train import TrainConfig, build_model

    cfg = TrainConfig(hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    student, teacher = build_model(cfg, 4124, 0), build_model(replace(cfg, seed=1), 4124, 0)
    with torch.no_grad():
        teacher.model.norm.weight.mul_(40.0)  # sharp guesses that differ token by token (a random model's are flat)
    rows = torch.randint(20, 20 + 4096, (2, 9), generator=torch.Generator().manual_seed(1))
    frames = torch.full((2, 9), demo_data.NOT_CODING)
    frames[0, 3:7] = torch.tensor([0, 0, 1, 1])  # four coding tokens: the targets at 2, 3, 4 and 5 of row 0
    frames[1, 5] = demo_data.ANTISENSE + 2  # and one of a gene on the other strand
    frames[1, 7] = demo_data.FRAME_UNKNOWN
    terms = kmer_losses(student, rows, 20, 4096, teacher=teacher, frames=frames)
    with torch.no_grad():
        own = student(input_ids=rows[:, :-1]).logits[..., 20:4116].log_softmax(-1)
        taught = teacher(input_ids=rows[:, :-1]).logits[..., 20:4116].log_softmax(-1)
    per_token = (taught.exp() * (taught - own)).sum(-1)
    coding = torch.zeros(2, 8, dtype=torch.bool)
    coding[0, 2:6] = coding[1, 4] = True
    assert terms.coding_kl.item() == pytest.approx(per_token[coding].mean().item(), rel=1e-4)
    assert terms.kl.item() == pytest.approx(per_token.mean().item(), rel=1e-4)  # every token, as before
    assert terms.coding_kl.item() != pytest.approx(terms.kl.item(), rel=1e-2)
    assert kmer_losses(student, rows, 20, 4096, teacher=student, frames=frames).coding_kl.item() == pytest.approx(
        0, abs=1e-6)
    no_genes = kmer_losses(student, rows, 20, 4096, teacher=teacher, frames=torch.full((2, 9), demo_data.NOT_CODING))
    assert no_genes.coding_kl.item() == 0 and no_genes.kl.item() == pytest.approx(terms.kl.item())


def test_validation_read_in_batches_gives_the_figures_of_one_pass_over_every_window():
    from training.losses import kmer_losses
    from training.train import TrainConfig, build_model, validation_losses

    model = build_model(TrainConfig(hidden=32, layers=1, heads=2, kv_heads=1, ffn=64), 4124, 0).eval()
    rows = torch.randint(20, 20 + 4096, (7, 12), generator=torch.Generator().manual_seed(3))
    rows[1, 5:] = 0  # a short window, padded: batches hold different numbers of 6-mers
    rows[4, 2:] = 0
    rows[6, 3] = 4116  # an id past the 6-mers (<oov>-like), left out of both means
    with torch.no_grad():
        whole = kmer_losses(model, rows, 20, 4096)
    for batch in (1, 3, 7, 100):
        ce, fns = validation_losses(model, rows, 20, 4096, batch=batch)
        assert ce.item() == pytest.approx(whole.ce.item(), rel=1e-5) and fns.item() == pytest.approx(
            whole.fns.item(), rel=1e-5)


# one batch's loss terms, each a distinct value, for the tests of how a step's loss counts them
LOSS_VALUES = dict(ce=2.0, fns=1.0, kl=0.5, frame=0.8, stop=0.1, stop_contrast=0.2, splice_contrast=0.6,
                   coding_kl=0.9)


def test_a_steps_loss_shares_the_data_with_the_teacher_and_the_probe_and_adds_each_term_at_its_weight():
    from training.losses import ADDED_TERMS, Losses, step_loss
    from training.train import TrainConfig

    values = LOSS_VALUES
    terms = Losses(**{name: torch.tensor(value) for name, value in values.items()})
    plain = TrainConfig(distill_weight=0.3, frame_weight=0.2)
    assert step_loss(plain, terms, with_fns=False, with_teacher=False, with_probe=False).item() == pytest.approx(2.0)
    data = 0.5 * (2.0 + 1.0)
    shared = 0.8 * (0.7 * data + 0.3 * 0.5) + 0.2 * 0.8
    assert step_loss(plain, terms, True, True, True).item() == pytest.approx(shared)
    # --anchor-weight adds the very KL the share holds, again at its own weight, on top of the shares
    anchored = replace(plain, anchor_weight=4.0)
    assert step_loss(anchored, terms, True, True, True).item() == pytest.approx(shared + 4.0 * 0.5)
    weights = {term.weight: 1.0 + i for i, term in enumerate(ADDED_TERMS)}
    every = replace(plain, **weights)
    added = sum(weights[term.weight] * values[term.field] for term in ADDED_TERMS)
    assert step_loss(every, terms, True, True, True).item() == pytest.approx(shared + added)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.integration  # trains a model
def test_protected_gradients_keep_the_datas_descent_whole_and_change_nothing_where_nothing_conflicts(compiled):
    """--protect: where the rest of the loss pulls against the data's, the step's gradient still descends
    the data's loss as the data's own gradient would (their dot product is the data gradient's squared norm);
    where nothing conflicts, it is the plain gradient of the loss. Through a compiled decoder too."""
    from training.losses import kept_gradient, kmer_losses, protect_gradient
    from training.train import TrainConfig, build_model

    rows = torch.randint(20, 20 + 4096, (3, 24), generator=torch.Generator().manual_seed(4))
    model = build_model(TrainConfig(hidden=32, layers=1, heads=2, kv_heads=1, ffn=64), 4124, 0)
    if compiled:
        model.model.compile()
    params = list(model.parameters())

    def flat(grads):
        return torch.cat([g.reshape(-1) for g in grads])

    def protected(rest):
        """The gradient of ce + rest(terms) after surgery, and the cosine it reports."""
        g_data = kept_gradient(kmer_losses(model, rows, 20, 4096).ce, params)
        model.zero_grad(set_to_none=True)
        terms = kmer_losses(model, rows, 20, 4096)
        (terms.ce + rest(terms)).backward()
        plain = flat(p.grad.clone() for p in params)
        cosine = protect_gradient(params, g_data)
        return flat(g_data), plain, flat(p.grad for p in params), cosine

    g_data, plain, after, cosine = protected(lambda terms: -3 * terms.ce)  # the rest straight against the data
    assert cosine == pytest.approx(-1, abs=1e-4)
    assert torch.allclose(after, g_data, atol=1e-6)  # its pull against the data's gradient removed, all of it
    g_data, plain, after, cosine = protected(lambda terms: 4 * terms.fns - 2 * terms.ce)  # partly against
    assert cosine < 0 and not torch.allclose(after, plain, atol=1e-4)
    assert torch.dot(after, g_data).item() == pytest.approx(torch.dot(g_data, g_data).item(), rel=1e-4)
    rest = after - g_data  # what is left of the rest is free of the data's direction
    assert abs(torch.dot(rest, g_data).item()) < 1e-4 * torch.dot(g_data, g_data).item()
    g_data, plain, after, cosine = protected(lambda terms: 2 * terms.ce)  # nothing against: the plain gradient
    assert cosine == pytest.approx(1, abs=1e-4) and torch.equal(after, plain)


def test_what_protect_keeps_is_the_data_and_the_teachers_kl_terms_as_the_loss_counts_them():
    from training.losses import ADDED_TERMS, KEPT_TERMS, Losses, part_loss, step_loss
    from training.train import TrainConfig

    values = LOSS_VALUES
    terms = Losses(**{name: torch.tensor(value) for name, value in values.items()})
    weights = {term.weight: 1.0 + i for i, term in enumerate(ADDED_TERMS)}
    cfg = TrainConfig(distill_weight=0.3, frame_weight=0.2, **weights)
    assert set(KEPT_TERMS) == {"held"}  # the one kept part a shipped model's recipe uses
    held = part_loss(cfg, terms, KEPT_TERMS["held"], True, True, True).item()
    data = 0.8 * (0.7 * 0.5 * (2.0 + 1.0) + 0.3 * 0.5)  # the data's and the teacher's shares, the probe's left out
    assert held == pytest.approx(data + weights["coding_distill_weight"] * 0.9 + weights["anchor_weight"] * 0.5)
    teaching = sum(weights[term.weight] * values[term.field] for term in ADDED_TERMS
                   if term.field not in ("coding_kl", "kl"))
    # the rest, what surgery may bend, is the added teaching terms and the probe's share: nothing of the teacher
    whole = step_loss(cfg, terms, True, True, True).item()
    assert whole - held == pytest.approx(teaching + 0.2 * 0.8)
    assert part_loss(cfg, terms, ("ce", "fns"), False, False, False).item() == pytest.approx(2.0)  # before FNS


def test_markov_baseline_learns_what_it_saw():
    period = np.array([0, 1, 2, 3, 3, 2, 1, 0, 2, 2] * 60)
    markov = MarkovModel(period[None, :], max_order=4)
    context = "".join("ATCG"[d] for d in period[:40])
    truth = "".join("ATCG"[d] for d in period[40:70])
    assert markov.recover(context, 30, order=4) == truth
    assert accuracy(markov.recover(context, 30, order=0), truth) < 1


def _tiny_training_data(tmp_path):
    """Six random-DNA training windows (some tagged plant / tRNA) and one validation window, with their tokenizer."""
    from training.tokenizer import demo_tokenizer

    data = tmp_path / "data"
    tokenizer = demo_tokenizer(data / "tokenizer")
    rng = random.Random(0)
    windows = [{"seq": random_dna(WINDOW, i), "species": rng.choice([None, "plant"]),
                "region": rng.choice([None, "trna"])} for i in range(6)]
    rows, dna_at, *_ = demo_data.to_rows(windows, tokenizer, tokenizer.text_tokenizer.pad_token_id)
    np.save(data / "train_rows.npy", rows)
    np.save(data / "train_dna_at.npy", dna_at)
    (data / "validation.json").write_text(json.dumps([{"seq": random_dna(624, 99)}]))
    (data / "data_card.json").write_text(json.dumps({"groups": {"plant": {"train_windows": 3},
                                                               "prokaryote": {"train_windows": 3}},
                                                    "train_regions": {"trna": 2, "none": 4}}))
    return data, tokenizer


@pytest.mark.integration  # trains a model
def test_training_loop_saves_a_model_the_manager_loads(tmp_path, monkeypatch):
    from carbon_app.inference.generate import generate
    from carbon_app.model.bundle import load_bundle
    from training.train import TrainConfig, train

    data, tokenizer = _tiny_training_data(tmp_path)
    cfg = TrainConfig(name="tiny", data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2,
                      kv_heads=1, ffn=64, steps=4, batch=2, warmup=1, eval_every=2, compile=False)
    out = train(cfg)
    log = json.loads((out / "training.json").read_text())["log"]
    assert [entry["step"] for entry in log] == [2, 4]
    # a budget far too short for 500 steps: cut once the speed is measured (step 30), schedule and record too
    hurried = train(replace(cfg, name="hurried", steps=500, eval_every=100, minutes=1e-4))
    record = json.loads((hurried / "training.json").read_text())
    assert record["config"]["steps"] == 31 and [entry["step"] for entry in record["log"]] == [31]
    bundle = load_bundle(str(out))
    assert bundle.tokenizer.kmer_start_id == tokenizer.kmer_start_id
    assert list(bundle.tags.species) == ["plant"] and list(bundle.tags.regions) == ["trna"]  # what it saw
    result = generate(bundle, "ACGTAC", 20, species="plant", region="trna", seed=1)
    assert result.prompt_text == "<plant_species><transfer_rna><dna>ACGTAC" and len(result.sequences[0]) == 20


@pytest.mark.integration  # trains a model
def test_rows_the_target_wrote_are_its_own_greedy_and_seeded_choices_and_train_a_draft(tmp_path, monkeypatch,
                                                                                         capsys):
    """draft_data: each row keeps its training window's tags, `<dna>` and first 96 6-mers, then holds the
    target's continuation (greedy rows: its argmax at every position, read back without a cache), labelled as
    its window where the DNA is real and unlabelled where the target wrote it; the seed fixes the sampled rows;
    the folder trains a draft, or mixes into a target's data at a share; a folder without whole-length windows
    is named."""
    from transformers import LlamaForCausalLM

    from training import draft_data
    from training.evaluate import lineage_commands
    from training.train import PRESETS, TrainConfig, train, training_lineage

    data, tokenizer = _tiny_training_data(tmp_path)
    target_dir = train(TrainConfig(name="target", data=str(data), out_root=str(tmp_path / "runs"), hidden=32,
                                   layers=2, heads=2, kv_heads=1, ffn=64, steps=2, batch=2, warmup=1, eval_every=2,
                                   compile=False))
    monkeypatch.setattr(draft_data, "CONTEXT_TOKENS", 200)  # fewer steps to write: 52 per row
    written = draft_data.write_target_rows(target_dir, data, tmp_path / "draft-data", n_rows=4, batch=3)
    assert written["rows"] == 4
    rows = np.load(tmp_path / "draft-data" / "train_rows.npy")
    dna_at = np.load(tmp_path / "draft-data" / "train_dna_at.npy")
    source = np.load(data / "train_rows.npy")
    start = dna_at + 1 + 200
    for row, at in zip(rows, start, strict=True):  # each row begins as one of the training windows
        assert any(np.array_equal(row[:at], s[:at]) for s in source)
    assert ((rows >= tokenizer.kmer_start_id) & (rows < tokenizer.kmer_start_id + 4**6))[:, 3:].all()
    model = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(rows[:2].astype(np.int64))).logits  # the first half: greedy
    kmers = logits[..., tokenizer.kmer_start_id : tokenizer.kmer_start_id + 4**6]
    for i, at in enumerate(start[:2]):
        chosen = kmers[i, at - 1 : -1].argmax(-1) + tokenizer.kmer_start_id
        assert torch.equal(chosen, torch.from_numpy(rows[i, at:].astype(np.int64)))
    with torch.no_grad():  # the second half is sampled: not the greedy choice throughout
        logits = model(input_ids=torch.from_numpy(rows[2:].astype(np.int64))).logits
    kmers = logits[..., tokenizer.kmer_start_id : tokenizer.kmer_start_id + 4**6]
    greedy = [kmers[i, at - 1 : -1].argmax(-1) + tokenizer.kmer_start_id for i, at in enumerate(start[2:])]
    assert not all(torch.equal(g, torch.from_numpy(rows[2 + i, at:].astype(np.int64)))
                   for i, (g, at) in enumerate(zip(greedy, start[2:], strict=True)))
    for row, at in zip(rows, dna_at, strict=True):
        assert row[at] == tokenizer.open_id  # each row's `<dna>` where its dna_at says
    draft_data.write_target_rows(target_dir, data, tmp_path / "again", n_rows=4, batch=3)
    assert np.array_equal(np.load(tmp_path / "again" / "train_rows.npy"), rows)  # seeded sampling
    labels = np.random.default_rng(0)
    frames, splice = labels.integers(-1, 7, source.shape, dtype=np.int8), labels.integers(0, 4, source.shape,
                                                                                          dtype=np.int8)
    np.save(data / "train_frames.npy", frames)
    np.save(data / "train_splice.npy", splice)
    np.save(data / "train_groups.npy", np.arange(len(source), dtype=np.int8))  # a row's group names the row here
    card = json.loads((data / "data_card.json").read_text())
    (data / "data_card.json").write_text(json.dumps({**card, "frame_labels": demo_data.FRAME_LABEL_RULE}))
    greedy = tmp_path / "greedy"
    greedy_only = draft_data.write_target_rows(target_dir, data, greedy, n_rows=4, batch=3, greedy_only=True)
    assert (greedy_only["rows"], greedy_only["drawn"], greedy_only["temperatures"]) == (2, 4, [0.0])
    assert np.array_equal(np.load(greedy / "train_rows.npy"), rows[:2])  # the greedy half, alone
    for row, at, window, row_frames, row_splice in zip(
            rows[:2], start[:2], np.load(greedy / "train_groups.npy"), np.load(greedy / "train_frames.npy"),
            np.load(greedy / "train_splice.npy"), strict=True):
        assert np.array_equal(row[:at], source[window, :at])  # the group names the window the row began as
        assert np.array_equal(row_frames[:at], frames[window, :at]) and (row_frames[at:] == -1).all()
        assert np.array_equal(row_splice[:at], splice[window, :at]) and (row_splice[at:] == 0).all()
    mixed = TrainConfig(name="sharpened", data=str(data), mix_data=str(greedy), mix_share=0.5, frame_weight=0.1,
                        init=str(target_dir), out_root=str(tmp_path / "runs"), hidden=32, layers=2, heads=2,
                        kv_heads=1, ffn=64, steps=1, batch=2, warmup=1, eval_every=2, compile=False)
    sharpened = train(mixed)
    assert f"6 windows and 2 of {greedy} (50% of the draw)" in capsys.readouterr().out
    commands = lineage_commands(training_lineage(sharpened))  # the mixed-in rows' command, then the run's
    assert commands[-2] == (f"python -m training.draft_data --teacher {target_dir} --data {data} "
                            f"--out {greedy} --rows 4 --greedy-only")
    assert f"--frame-weight 0.1 --mix-data {greedy} --mix-share 0.5" in commands[-1]
    (greedy / "train_frames.npy").unlink()  # a folder written before its rows had labels
    with pytest.raises(SystemExit, match=f"--mix-data {greedy}: no train_frames.npy, which this loss reads"):
        train(mixed)
    with pytest.raises(SystemExit, match="not training data with the --data folder's tokenizer"):
        train(replace(mixed, mix_data=str(tmp_path)))
    cfg = replace(replace(TrainConfig(), **PRESETS["draft"]), data=str(tmp_path / "draft-data"),
                  out_root=str(tmp_path / "runs"), teacher=str(target_dir), hidden=32, layers=1, heads=2,
                  kv_heads=1, ffn=64, steps=2, batch=2, warmup=1, eval_every=2, compile=False)
    draft_dir = train(cfg)
    card = json.loads((draft_dir / "training.json").read_text())["data_card"]
    assert card["target_rows"]["teacher"] == str(target_dir)
    commands = lineage_commands(training_lineage(draft_dir))  # the data command, then the run that read it
    assert commands[0] == (f"python -m training.draft_data --teacher {target_dir} --data {data} "
                           f"--out {tmp_path / 'draft-data'} --rows 4")
    assert f"--data {tmp_path / 'draft-data'} --teacher {target_dir}" in commands[1]
    again = train(replace(cfg, name="draft-again", init=str(draft_dir), steps=1))  # the same rows read again
    assert lineage_commands(training_lineage(again))[:-1] == commands  # not written twice
    with pytest.raises(SystemExit):  # the real training data is never written over
        draft_data.main(["--teacher", str(target_dir), "--data", str(data), "--out", str(data)])
    assert np.array_equal(np.load(data / "train_rows.npy"), source)
    assert "holds training data this command did not write" in capsys.readouterr().err
    np.save(data / "train_rows.npy", source[:, :100])  # no window long enough
    with pytest.raises(SystemExit, match="no whole-length window"):
        draft_data.write_target_rows(target_dir, data, tmp_path / "none", n_rows=4)


@pytest.mark.integration  # trains a model
def test_a_reading_frame_probe_trains_the_decoder_and_stays_out_of_the_saved_model(tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    from training.train import TrainConfig, train

    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 30 * WINDOW for g in demo_data.GROUPS})
    genome, gene = _coding_gene(1)
    cress = Transcript("p", "p", 1, [(1000, 1600), (2000, 2600)], [(1100, 1600), (2000, 2501)], "protein_coding")
    records = [Record("held", genome, "mammal", "Homo sapiens", "test", [gene], held_out=True),
               Record("cress", random_dna(40_000, 5), "plant", "Arabidopsis thaliana", "test", [cress])]
    data = tmp_path / "data"
    card = write_dataset(data, records)
    assert card["train_token_frames"]["codon place 1"] > 0 and card["train_token_frames"]["not coding"] > 0
    cfg = TrainConfig(data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2, kv_heads=1,
                      ffn=64, steps=3, batch=4, warmup=1, eval_every=3, compile=False)
    plain = load_file(train(cfg) / "model.safetensors")
    probed_dir = train(replace(cfg, name="probed", frame_weight=0.5))
    probed = load_file(probed_dir / "model.safetensors")
    assert probed.keys() == plain.keys()  # a plain Llama decoder: the probe is not saved
    assert any(not torch.equal(probed[k], plain[k]) for k in plain)  # its loss reached the decoder
    log = json.loads((probed_dir / "training.json").read_text())["log"]
    assert 0 < log[-1]["train_frame"] < 2 and log[-1]["train_loss"] != log[-1]["train_ce"]
    # continued with a probe: a new one is fitted first to the model as it is, which that leaves unchanged
    from training import train as train_module

    fits = []
    real_fit = train_module.fit_probe

    def watched_fit(model, probe, *args):
        before = {k: v.clone() for k, v in model.state_dict().items()}
        losses = real_fit(model, probe, *args)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
        fits.append(losses)
        return losses

    monkeypatch.setattr(train_module, "fit_probe", watched_fit)
    capsys.readouterr()
    train(replace(cfg, name="probed-more", init=str(probed_dir), frame_weight=0.5))
    assert len(fits) == 1 and 10 <= len(fits[0]) <= train_module.PROBE_FIT_STEPS  # batches with a frame label
    assert np.mean(fits[0][-10:]) < np.mean(fits[0][:10]) - 0.1  # it learnt (these batches are 4 windows)
    assert "a new reading-frame probe fitted to the --init model" in capsys.readouterr().out
    train(replace(cfg, name="plain-more", init=str(probed_dir)))  # no probe: nothing to fit
    assert len(fits) == 1
    stopped_dir = train(replace(cfg, name="stopped", stop_weight=1.0))
    stopped = load_file(stopped_dir / "model.safetensors")
    assert any(not torch.equal(stopped[k], plain[k]) for k in plain)  # the stop term reached the decoder
    log = json.loads((stopped_dir / "training.json").read_text())["log"]
    assert 0 < log[-1]["train_stop"] < 1 and log[-1]["train_loss"] > log[-1]["train_ce"]
    assert card["train_splice_site_tokens"] > 0
    with pytest.raises(SystemExit, match="no training data in .*training.data --out"):
        train(replace(cfg, data=str(tmp_path / "elsewhere")))
    for field, flag in (("init", "--init"), ("teacher", "--teacher")):  # named, not looked for on the hub
        with pytest.raises(SystemExit, match=f"{flag} .*nowhere: not a model folder"):
            train(replace(cfg, **{field: str(tmp_path / "nowhere")}, distill_weight=0.5))
    spliced_plain = load_file(train(replace(cfg, name="spliced-plain", batch=16)) / "model.safetensors")
    # the splice contrast: the splice 6-mers among the 6-mers that differ at their splice bases only
    contrast_dir = train(replace(cfg, name="spliced-contrast", splice_contrast_weight=1.0, batch=16))
    contrast = load_file(contrast_dir / "model.safetensors")
    assert any(not torch.equal(contrast[k], spliced_plain[k]) for k in plain)
    log = json.loads((contrast_dir / "training.json").read_text())["log"]
    assert 0 < log[-1]["train_splice_contrast"] < math.log(16)  # 16 rivals at most: below chance among them
    # weighed by side: the run's side weights reach the contrast (here every site is called a donor, weighed 0)
    from training import losses

    told = losses.splice_side_tokens
    monkeypatch.setattr(losses, "splice_side_tokens",
                        lambda targets, marks, *_: {"donor": marks != 0, "acceptor": torch.zeros_like(marks).bool()})
    sided_dir = train(replace(cfg, name="spliced-sided", splice_contrast_weight=1.0,
                              splice_side_weights={"donor": 0.0}, batch=16))
    monkeypatch.setattr(losses, "splice_side_tokens", told)
    log = json.loads((sided_dir / "training.json").read_text())["log"]
    assert log[-1]["train_splice_contrast"] == 0
    # protected: each step's gradient goes through the surgery, with the kept loss's gradient of that batch
    surgeries = []

    def watched_surgery(params, kept):
        assert [g.shape for g in kept] == [p.shape for p in params]
        cosine = real_surgery(params, kept)
        surgeries.append(cosine)
        return cosine

    real_surgery = train_module.protect_gradient
    monkeypatch.setattr(train_module, "protect_gradient", watched_surgery)
    capsys.readouterr()
    protected_dir = train(replace(cfg, name="spliced-protected", protect="held", splice_contrast_weight=1.0,
                                  batch=16))
    record = json.loads((protected_dir / "training.json").read_text())
    assert len(surgeries) == cfg.steps and all(-1 <= c <= 1 for c in surgeries)
    assert record["config"]["protect"] == "held" and "held/rest gradient cosine" in capsys.readouterr().out
    assert record["log"][-1]["steps_protected"] == sum(c < 0 for c in surgeries)
    # the kept pass reads the data and the teacher alone: the stop and splice terms' weights do not reach it
    kept = {}

    def kept_gradient_of(params, kept_grads):
        kept[stop_weight] = torch.cat([g.reshape(-1) for g in kept_grads])
        return 0.0

    monkeypatch.setattr(train_module, "protect_gradient", kept_gradient_of)
    for stop_weight in (1.0, 0.0):
        train(replace(cfg, name=f"kept-{stop_weight}", protect="held", stop_weight=stop_weight,
                      stop_contrast_weight=stop_weight, splice_contrast_weight=1.0, batch=16, steps=1))
    assert torch.allclose(kept[1.0], kept[0.0], rtol=0, atol=1e-7) and kept[1.0].abs().sum() > 0
    card_text = (data / "data_card.json").read_text()
    (data / "data_card.json").write_text(card_text.replace('"splice_marks"', '"older_marks"'))
    with pytest.raises(SystemExit, match="--splice-contrast-weight needs .*each splice base"):
        train(replace(cfg, name="old-marks", splice_contrast_weight=1.0))
    (data / "data_card.json").write_text(card_text.replace('"frame_labels"', '"older_labels"'))
    for field, flag in (("frame_weight", "--frame-weight"), ("stop_weight", "--stop-weight")):
        with pytest.raises(SystemExit, match=f"{flag}: .*leave the CDS .*rebuild the data"):
            train(replace(cfg, name="old-labels", **{field: 0.5}))
    (data / "data_card.json").write_text(card_text)
    (data / "train_splice.npy").unlink()
    with pytest.raises(SystemExit, match="train_splice.npy"):
        train(replace(cfg, name="no-marks", splice_contrast_weight=1.0))
    (data / "train_frames.npy").unlink()
    with pytest.raises(SystemExit, match="train_frames.npy"):
        train(replace(cfg, name="no-labels", frame_weight=0.5))


def test_a_time_budget_cuts_the_steps_to_the_measured_speed():
    from training.train import TrainConfig, steps_within

    cfg = TrainConfig(steps=1000, minutes=10)
    assert steps_within(cfg, 30, elapsed_s=60, per_step_s=1.0) == 30 + (570 - 60)  # 5% of the budget kept
    assert steps_within(cfg, 30, elapsed_s=60, per_step_s=0.1) == 1000  # never more than planned
    assert steps_within(cfg, 30, elapsed_s=900, per_step_s=0.5) == 31  # over budget already: stop next step


@pytest.mark.integration  # trains a model
def test_the_command_line_overrides_a_presets_shape_and_batch(monkeypatch, capsys):
    from training import train as train_module

    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    train_module.main(["--preset", "target", "--batch", "256", "--hidden", "384", "--layers", "10", "--ffn", "1024",
                       "--heads", "6", "--kv-heads", "2", "--warmup", "20", "--device", "cpu"])
    train_module.main(["--preset", "draft", "--device", "cpu"])
    big, draft = seen
    assert (big.batch, big.hidden, big.layers, big.ffn, big.name) == (256, 384, 10, 1024, "carbon-demo")
    assert (big.heads, big.kv_heads, big.warmup) == (6, 2, 20) and big.steps == 2800  # the rest stays the preset's
    assert draft.warmup == 150
    assert (draft.hidden, draft.layers, draft.batch) == (128, 2, 32)
    for flag, value, problem in (("--batch", "0", "--batch must be at least 1, not 0"),
                                 ("--hidden", "2.5", "--hidden must be a whole number, not 2.5"),
                                 ("--minutes", "-1", "--minutes must be above 0, not -1"),
                                 ("--minutes", "nan", "--minutes must be above 0, not nan"),
                                 ("--minutes", "soon", "--minutes must be a number, not 'soon'"),
                                 ("--steps", "0", "--steps must be at least 1, not 0"),
                                 ("--warmup", "-5", "--warmup must be at least 0, not -5"),
                                 ("--warmup", "2800", "--warmup 2800 leaves no steps after the warm-up"),
                                 ("--lr", "0", "--lr must be above 0 and at most 1, not 0"),
                                 ("--lr", "inf", "--lr must be above 0 and at most 1, not inf"),
                                 ("--fns-from", "1.5", "--fns-from must be between 0 and 1, not 1.5"),
                                 ("--distill-weight", "0.9", "a target's --teacher and --distill-weight go together"),
                                 ("--teacher", "runs/x", "a target's --teacher and --distill-weight go together"),
                                 ("--coding-distill-weight", "1", "--coding-distill-weight holds the coding tokens "
                                                                  "near a teacher: name it with --teacher"),
                                 ("--coding-distill-weight", "-1", "--coding-distill-weight must be between 0 and 10"),
                                 ("--anchor-weight", "2", "--anchor-weight holds every token near a teacher: "
                                                          "name it with --teacher"),
                                 ("--anchor-weight", "11", "--anchor-weight must be between 0 and 10"),
                                 ("--seed", "-1", "--seed must be between 0 and 2,147,483,647, not -1"),
                                 ("--min-lr", "-0.5", "--min-lr must be between 0 and 1, not -0.5"),
                                 ("--min-lr", "0.01", "would rise from --lr 0.002 to the cosine's end at 0.01"),
                                 ("--splice-side-weights", "donor=0.5", "--splice-side-weights weighs the splice "
                                                                        "contrast: give --splice-contrast-weight too"),
                                 ("--splice-side-weights", "exon=1", "unknown side 'exon' in --splice-side-weights: "
                                                                     "use donor, acceptor"),
                                 ("--protect", "ordered", "invalid choice: 'ordered' (choose from 'held')")):
        with pytest.raises(SystemExit):
            train_module.main([flag, value])
        assert problem in capsys.readouterr().err and len(seen) == 2  # named, and nothing started


@pytest.mark.integration  # trains a model
def test_a_run_can_cool_its_learning_rate_towards_zero_and_its_rebuild_command_says_so(monkeypatch):
    from dataclasses import asdict

    from training import train as train_module

    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    train_module.main(["--lr", "1e-4", "--min-lr", "1e-6", "--warmup", "5", "--steps", "100", "--device", "cpu"])
    cooled = seen[0]
    schedule = [train_module.learning_rate(cooled, step) for step in range(100)]
    assert schedule[4] == pytest.approx(1e-4) and schedule[5] == pytest.approx(1e-4)  # warmed up, the peak
    assert all(a >= b for a, b in itertools.pairwise(schedule[5:])) and schedule[-1] < 1.1e-6
    default = replace(cooled, min_lr=train_module.TrainConfig().min_lr)  # 1e-4: the old end, flat at this peak
    assert all(train_module.learning_rate(default, step) == pytest.approx(1e-4) for step in range(5, 100))
    assert "--lr 0.0001 --min-lr 1e-06 --warmup 5" in train_module.train_command(asdict(cooled), None)
    sided = train_module.run_config(["--splice-contrast-weight", "3", "--splice-side-weights", "donor=0.5"])[0]
    assert sided.splice_side_weights == {"donor": 0.5}
    command = train_module.train_command(asdict(sided), None)
    assert "--splice-contrast-weight 3 --splice-side-weights donor=0.5" in command


@pytest.mark.integration  # trains a model
def test_group_weights_draw_a_groups_rows_that_much_more_often_and_the_same_on_resume(tmp_path, capsys):
    from training import train as train_module
    from training.train import TrainConfig, batch_sampler

    groups = np.array([demo_data.GROUPS.index("mammal")] * 100 + [demo_data.GROUPS.index("plant")] * 300,
                      dtype=np.int8)
    np.save(tmp_path / "train_groups.npy", groups)
    cfg = TrainConfig(batch=16, group_weights={"mammal": 3.0})
    draw = batch_sampler(cfg, tmp_path, len(groups))
    drawn = torch.cat([draw(step) for step in range(400)])
    assert all(len(set(draw(step).tolist())) == 16 for step in range(20))  # no row twice in a batch
    assert (drawn < 100).float().mean().item() == pytest.approx(0.5, abs=0.02)  # 100 x 3 against 300 x 1
    assert torch.equal(batch_sampler(cfg, tmp_path, len(groups))(7), draw(7))  # a resumed run draws the same
    assert not torch.equal(batch_sampler(replace(cfg, seed=1), tmp_path, len(groups))(7), draw(7))  # a new seed, new
    plain = batch_sampler(replace(cfg, group_weights=None), tmp_path, len(groups))
    assert sorted(torch.cat([plain(step) for step in range(25)]).tolist()) == list(range(400))  # epochs
    assert not torch.equal(batch_sampler(replace(cfg, group_weights=None, seed=1), tmp_path, len(groups))(0), plain(0))
    assert torch.equal(batch_sampler(replace(cfg, group_weights={"mammal": 0.0}), tmp_path, len(groups))(3).lt(100),
                       torch.zeros(16, dtype=torch.bool))  # a weight of 0 leaves the group out
    for weights, problem in (({"mammal": 0.0, "plant": 0.0}, "fewer rows to draw than a batch"),):
        with pytest.raises(SystemExit, match=problem):
            batch_sampler(replace(cfg, group_weights=weights), tmp_path, len(groups))
    with pytest.raises(SystemExit, match="does not match train_rows.npy"):
        batch_sampler(cfg, tmp_path, 401)
    mix = tmp_path / "mix"  # 100 rows more, all mammal, drawn as a quarter of each batch whatever their number
    mix.mkdir()
    np.save(mix / "train_groups.npy", groups[:100])
    mixed = replace(cfg, group_weights=None, mix_data=str(mix), mix_share=0.25)
    drawn = torch.cat([batch_sampler(mixed, tmp_path, len(groups), 100)(step) for step in range(400)])
    assert (drawn >= 400).float().mean().item() == pytest.approx(0.25, abs=0.02)
    assert (drawn < 100).float().mean().item() == pytest.approx(0.75 * 0.25, abs=0.02)  # the rest alike
    drawn = torch.cat([batch_sampler(replace(mixed, group_weights={"mammal": 3.0}), tmp_path, len(groups),
                                     100)(step) for step in range(400)])  # the weights hold within --data
    assert (drawn < 100).float().mean().item() == pytest.approx(0.75 * 0.5, abs=0.02)
    assert (drawn >= 400).float().mean().item() == pytest.approx(0.25, abs=0.02)
    (tmp_path / "train_groups.npy").unlink()
    with pytest.raises(SystemExit, match="train_groups.npy: rebuild the data"):
        batch_sampler(cfg, tmp_path, len(groups))
    for text, problem in (("primate=2", "unknown group 'primate' in --group-weights: use mammal, vertebrate"),
                          ("mammal", "--group-weights needs group=share, got 'mammal'"),
                          ("mammal=-1", "the --group-weights share of mammal must be at least 0, not -1")):
        with pytest.raises(SystemExit):
            train_module.main(["--group-weights", text])
        assert problem in capsys.readouterr().err
    for words, problem in ((["--mix-data", str(mix)], "--mix-data and --mix-share go together"),
                           (["--mix-share", "0.3"], "--mix-data and --mix-share go together"),
                           (["--mix-data", str(mix), "--mix-share", "0"], "--mix-share must be above 0"),
                           (["--mix-data", str(mix), "--mix-share", "0.3"], f"--mix-data {mix}: no training data")):
        with pytest.raises(SystemExit):
            train_module.main(words)
        assert problem in capsys.readouterr().err


@pytest.mark.integration
def test_a_compiled_decoder_gives_the_eager_losses_and_gradients():
    """`TrainConfig.compile` fuses kernels in place; the numbers and parameter names stay the eager ones."""
    from training.losses import kmer_losses
    from training.train import TrainConfig, build_model

    cfg = TrainConfig(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128)
    rows = torch.randint(20, 20 + 4096, (3, 40), generator=torch.Generator().manual_seed(0))
    eager, compiled = build_model(cfg, 4124, 0), build_model(cfg, 4124, 0)
    names = list(compiled.state_dict())
    compiled.model.compile()
    results = []
    for model in (eager, compiled):
        ce, fns, *_ = kmer_losses(model, rows, 20, 4096)
        (ce + fns).backward()
        results.append((ce.item(), fns.item(), model.model.layers[0].mlp.up_proj.weight.grad.clone()))
    assert list(compiled.state_dict()) == names
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-4)
    assert results[0][1] == pytest.approx(results[1][1], abs=1e-4)
    assert torch.allclose(results[0][2], results[1][2], atol=1e-5)


@pytest.mark.integration  # trains a model
def test_a_continued_model_keeps_how_it_was_made_and_each_command_gives_back_its_run(tmp_path, monkeypatch):
    """The lineage follows `--init` through the runs' training.json files, and survives its parents'
    folders once recorded; the command written for each run, read by the trainer's own command line,
    gives back that run's settings."""
    import shlex
    import shutil
    from dataclasses import asdict

    from training import train as train_module
    from training.evaluate import lineage_commands, run_teachers, runs_in_order
    from training.train import PRESETS, TrainConfig, training_lineage

    def run(name, init, preset="target", **settings):
        folder = tmp_path / name / "model"
        folder.mkdir(parents=True)
        cfg = replace(replace(TrainConfig(), **PRESETS[preset]), name=name, init=init, out_root=str(tmp_path),
                      **settings)
        log = [{"minutes": 1.0, "val_bits_per_base": 1.9}]
        (folder / "training.json").write_text(json.dumps({"config": asdict(cfg), "parameters": 1, "log": log}))
        return folder

    scratch = run("carbon-demo", None)
    probe = run("probe", str(scratch), steps=590, lr=1e-3, fns_from=0.0, frame_weight=0.3)
    stop = run("stop", str(probe), steps=465, lr=6e-4, warmup=20, fns_from=0.0, frame_weight=0.3, stop_weight=2.0,
               group_weights={"mammal": 3.0, "vertebrate": 0.5})
    kept = run("kept", str(stop), seed=1, steps=300, lr=6e-4, fns_from=0.0, splice_contrast_weight=0.5,
               teacher=str(stop),
               distill_weight=0.5)  # a target kept near the model it continues, drawing new batches
    draft = run("draft", None, preset="draft", steps=240, teacher=str(kept), heads=2, kv_heads=1, distill_weight=0.9)
    lineage = training_lineage(kept)
    assert [r["config"]["name"] for r in lineage] == ["carbon-demo", "probe", "stop", "kept"]
    assert training_lineage(draft)[0]["config"]["teacher"] == str(kept)

    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    commands = lineage_commands(lineage) + lineage_commands(training_lineage(draft))
    assert commands[0] == "python -m training.train --preset target"  # the preset as it stands
    assert commands[2].endswith(f"--name stop --init {probe} --steps 465 --lr 0.0006 --warmup 20 --fns-from 0 "
                                "--frame-weight 0.3 --stop-weight 2 --group-weights mammal=3,vertebrate=0.5")
    assert commands[3] == (f"python -m training.train --preset target --name kept --init {stop} "
                           f"--teacher {stop} --seed 1 --steps 300 --lr 0.0006 --fns-from 0 "
                           "--splice-contrast-weight 0.5 --distill-weight 0.5")
    assert commands[-1].endswith(f"--teacher {kept} --steps 240 --heads 2 --kv-heads 1 --distill-weight 0.9")
    assert commands[-1].startswith("python -m training.train --preset draft")
    # a target kept near the installed model it continued: once installed over, that model is the run before it
    installed = asdict(replace(TrainConfig(), name="next", init="assets/models/carbon-demo",
                               teacher="assets/models/carbon-demo", distill_weight=0.3))
    assert f"--init {kept} --teacher {kept} " in train_module.train_command(installed, str(kept))
    # the card names it so
    assert run_teachers(runs_in_order([*lineage, {"config": installed}]))[-2:] == [str(stop), str(kept)]
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == ["python", "-m", "training.train"]
        train_module.main(words[3:] + ["--out-root", str(tmp_path)])
    for cfg, run_record in zip(seen, lineage + training_lineage(draft), strict=True):
        wanted = run_record["config"]
        for key in ("name", "seed", "steps", "lr", "warmup", "fns_from", "frame_weight", "stop_weight",
                    "splice_contrast_weight",
                    "group_weights", "teacher", "distill_weight", "hidden", "layers", "heads", "kv_heads"):
            assert getattr(cfg, key) == wanted[key], (wanted["name"], key)
    assert [cfg.init for cfg in seen[:4]] == [None, str(scratch), str(probe), str(stop)]  # each from the one before
    assert [cfg.preset for cfg in seen] == ["target"] * 4 + ["draft"]
    from training.evaluate import kl_text

    assert kl_text(lineage[-1]["config"]) == f"Kept near {stop} by the KL divergence from it (weight 0.5)."
    assert kl_text(training_lineage(draft)[0]["config"]) == "Distilled from carbon-demo (KL weight 0.9)."
    assert kl_text(lineage[0]["config"]) == ""
    assert kl_text({**lineage[-1]["config"], "coding_distill_weight": 3.0}) == (
        f"Kept near {stop} by the KL divergence from it (weight 0.5), and at its coding tokens again (weight 3.0).")
    assert kl_text({**lineage[-1]["config"], "coding_distill_weight": 3.0, "anchor_weight": 2.0}) == (
        f"Kept near {stop} by the KL divergence from it (weight 0.5), and at every token again (weight 2.0), and at "
        "its coding tokens again (weight 3.0).")

    record = json.loads((stop / "training.json").read_text())
    record["lineage"] = training_lineage(probe)
    (stop / "training.json").write_text(json.dumps(record))
    shutil.rmtree(tmp_path / "carbon-demo")
    shutil.rmtree(tmp_path / "probe")
    assert [r["config"]["name"] for r in training_lineage(stop)] == ["carbon-demo", "probe", "stop"]
    looped = run("looped", None)
    record = json.loads((looped / "training.json").read_text())
    record["config"]["init"] = str(looped)  # continued from itself, as after an install over its own start
    (looped / "training.json").write_text(json.dumps(record))
    assert [r["config"]["name"] for r in training_lineage(looped)] == ["looped"]
    fresh = run("fresh", str(tmp_path / "installed" / "model"))
    installed = tmp_path / "installed" / "model"
    installed.mkdir(parents=True)
    shutil.copy(fresh / "training.json", installed / "training.json")  # installed over the run it started from
    assert [r["config"]["name"] for r in training_lineage(fresh)] == ["fresh"]


def _small_world(data: Path, monkeypatch) -> dict:
    """A dataset of two annotated records (a held-out human gene, a cress genome with one transcript) written
    to `data`; its data card."""
    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 30 * WINDOW for g in demo_data.GROUPS})
    genome, gene = _coding_gene(1)
    cress = Transcript("p", "p", 1, [(1000, 1600), (2000, 2600)], [], "protein_coding")
    records = [Record("held", genome, "mammal", "Homo sapiens", "test", [gene], held_out=True),
               Record("cress", random_dna(40_000, 5), "plant", "Arabidopsis thaliana", "test", [cress])]
    return write_dataset(data, records)


@pytest.mark.integration
def test_the_rebuild_runs_from_annotated_records_to_installed_models(tmp_path, monkeypatch):
    """Each documented step on a small world: the dataset of annotated records, a target and a draft
    distilled from it, the evaluation beside the Markov baseline and the previous model, and the
    installed models with their cards, loaded back by the engine."""
    import shutil

    from carbon_app.model.bundle import load_bundle
    from training.evaluate import (
        evaluate,
        install,
        measure_draft,
        own_saved_figures,
        quality_summary,
        variant_table,
    )
    from training.merge import merge
    from training.train import TrainConfig, train

    data = tmp_path / "data"
    card = _small_world(data, monkeypatch)
    assert card["groups"]["mammal"]["test_variants"] == {"coding": {"stop_gain": 2, "synonymous": 2},
                                                         "splice": {"deep_intronic": 4, "splice_site": 4},
                                                         "splice_matched": {"deep_same_dinucleotide": 4}}
    assert card["groups"]["mammal"]["validation_variants"] == {"coding": {}, "splice": {}, "splice_matched": {}}
    assert json.loads((data / "validation_variants.json").read_text()).keys() == {"coding", "splice",
                                                                                  "splice_matched"}
    assert card["train_windows"] > 0 and card["groups"]["mammal"]["train_windows"] == 0  # held out whole

    cfg = TrainConfig(data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2, kv_heads=1,
                      ffn=64, steps=4, batch=2, warmup=1, eval_every=2, compile=False)
    target = train(cfg)
    draft = train(replace(cfg, name="carbon-demo-draft", steps=2, teacher=str(target), distill_weight=0.5))
    results = evaluate(target, draft, data, previous_dir=target, device="cpu")
    results["quality"] = quality_summary(results)
    assert results["previous"] == results["target"]  # one model measured twice: the same figures
    assert results["previous_figures"] == "measured"  # a run's folder holds no figures of its own
    assert results["previous_variants"] == results["target_variants"]
    coding, splice = results["target_variants"]["coding"], results["target_variants"]["splice"]
    assert coding["variants"] == {"mammal": 4} and splice["variants"] == {"mammal": 8}
    assert 0 <= coding["auroc"]["all"] <= 1 and 0 <= splice["auroc"]["all"] <= 1
    matched = results["target_variants"]["splice_matched"]  # the same 4 sites against their own controls
    assert matched["variants"] == {"mammal": 8} and 0 <= matched["auroc"]["all"] <= 1
    assert matched["mean_delta"]["splice_site"] == splice["mean_delta"]["splice_site"]
    table = variant_table(results)
    assert "same dinucleotide broken" in table and "GT and AG only" in table  # the baseline that likes GT, AG
    assert 0 <= results["draft_greedy_agreement"]["token"] <= 1
    again = measure_draft(target, draft, data, device="cpu")  # a draft distilled again: measured alone
    assert again == {key: results[key] for key in ("draft", "draft_greedy_agreement")}

    assets = tmp_path / "assets"
    install(target, draft, results, assets)
    for name, role in (("carbon-demo", "target"), ("carbon-demo-draft", "draft")):
        installed = assets / name
        measured = json.loads((installed / "eval.json").read_text())
        wanted = {k: v for k, v in json.loads(json.dumps(results)).items() if role == "target" or k != "quality"}
        assert measured == wanted
        # the draft's scores: not measured
        assert (load_bundle(str(installed)).card.quality is None) == (role == "draft")
        assert json.loads((installed / "carbon_role.json").read_text())["role"] == role
        assert "stop-gain" in (installed / "README.md").read_text()
        assert load_bundle(str(installed)).tokenizer.kmer_start_id == load_bundle(str(target)).tokenizer.kmer_start_id

    # a run continued from the installed target, installed over it: its card says both runs and how to
    # make each, though the folder the second started from now holds the second
    continued = train(replace(cfg, name="continued", init=str(assets / "carbon-demo"), steps=2, frame_weight=0.3,
                              group_weights={"plant": 2.0}))
    # the installed target's own figures stand for it as the previous model (same data, window and method);
    # a draft's eval.json holds its target's figures, and other data gets the model measured again
    saved = own_saved_figures(assets / "carbon-demo", data)
    measured_target = json.loads(json.dumps(results))
    assert saved == (measured_target["target"], measured_target["target_variants"])
    assert own_saved_figures(assets / "carbon-demo-draft", data) is None
    other_data = tmp_path / "other-data"
    shutil.copytree(data, other_data)
    (other_data / "test.json").write_text("[]")  # other held-out windows
    assert own_saved_figures(assets / "carbon-demo", other_data) is None
    # figures saved before the matched sets were added to the variant file still stand for what they read;
    # held-out sets that differ otherwise get the model measured again
    earlier_data = tmp_path / "earlier-data"
    shutil.copytree(data, earlier_data)
    sets = json.loads((data / "test_variants.json").read_text())
    earlier_sets = {task: variants for task, variants in sets.items() if task != "splice_matched"}
    (earlier_data / "test_variants.json").write_text(json.dumps(earlier_sets))
    earlier = evaluate(target, None, earlier_data, device="cpu")
    assert "splice_matched" not in earlier["target_variants"]
    install(target, None, earlier, tmp_path / "earlier-assets")
    assert own_saved_figures(tmp_path / "earlier-assets" / "carbon-demo", earlier_data) is not None
    assert own_saved_figures(tmp_path / "earlier-assets" / "carbon-demo", data) == (
        json.loads(json.dumps(earlier["target"])), json.loads(json.dumps(earlier["target_variants"])))
    (other_data / "test.json").write_text((data / "test.json").read_text())
    (other_data / "test_variants.json").write_text(json.dumps({**sets, "coding": sets["coding"][1:]}))
    assert own_saved_figures(tmp_path / "earlier-assets" / "carbon-demo", other_data) is None
    again = evaluate(continued, None, data, previous_dir=assets / "carbon-demo", device="cpu")
    assert again["previous_figures"] == "saved" and again["previous"] == measured_target["target"]
    install(continued, None, again, assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert "Trained in 2 runs" in card and "| continued | 2 |" in card and "| plant=2 |" in card
    assert f"--name continued --data {data} --init {target} --steps 2" in card and "--group-weights plant=2" in card
    assert "previous carbon-demo figures are its own, read from its saved eval.json" in card
    lineage = json.loads((assets / "carbon-demo" / "training.json").read_text())["lineage"]
    assert [run["config"]["name"] for run in lineage] == ["carbon-demo"]

    # the installed target averaged with the first: a merge installed as the default says what it averaged
    merged = merge(assets / "carbon-demo", target, 0.25, "merged", cfg.out_root)
    install(merged, None, evaluate(merged, None, data, previous_dir=assets / "carbon-demo", device="cpu"), assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert "Made in 2 runs and 1 merge" in card and "| merged | merge | - |" in card
    assert ("No training of its own: merged averages the weights of two: (1 - 0.25) x continued + 0.25 x "
            "carbon-demo") in card
    commands = [line.strip() for line in card.split("## Regenerate")[1].splitlines() if line.startswith("    ")]
    assert commands[-2:] == [f"python -m training.merge --name merged --base {continued} --other {target} "
                             f"--weight 0.25 --out-root {cfg.out_root}",
                             f"python -m training.evaluate --target {merged} "
                             "--previous assets/models/carbon-demo --install assets/models"]
    assert (assets / "carbon-demo" / "model.safetensors").read_bytes() == (merged / "model.safetensors").read_bytes()

    # a run kept near the installed target but begun elsewhere, installed over it: its command names the
    # folder the installed model's own run wrote, not the installed folder that now holds the run itself
    kept = train(replace(cfg, name="kept", init=str(merged), teacher=str(assets / "carbon-demo"), distill_weight=0.3,
                         steps=1))
    install(kept, None, evaluate(kept, None, data, previous_dir=assets / "carbon-demo", device="cpu"), assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert f"--init {merged} --teacher {merged}" in card and f"--teacher {assets}" not in card
    saved_config = json.loads((assets / "carbon-demo" / "training.json").read_text())["config"]
    assert saved_config["teacher"] == str(merged)  # read again later, it still names the right model



@pytest.mark.integration
def test_a_model_measured_within_a_delta_radius_is_installed_to_be_read_within_it(tmp_path, monkeypatch):
    """`evaluate --delta-radius`: the card, the quality the page shows and every default path read the deltas
    within that radius, the whole window read beside it from the same passes; figures saved at one radius
    do not stand for another."""
    from carbon_app.model.bundle import load_bundle
    from training.evaluate import (
        evaluate,
        install,
        load_float32,
        model_delta,
        own_saved_figures,
        quality_summary,
        variant_signal,
    )
    from training.train import TrainConfig, train

    data = tmp_path / "data"
    _small_world(data, monkeypatch)
    cfg = TrainConfig(data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2, kv_heads=1,
                      ffn=64, steps=2, batch=2, warmup=1, eval_every=2, compile=False)
    target = train(cfg)
    near = evaluate(target, None, data, device="cpu", delta_radius=9)
    assert near["variant_delta_radius"] == 9
    variant_sets = json.loads((data / "test_variants.json").read_text())
    bundle = load_float32(target, "cpu")
    assert near["target_variants_whole_window"] == variant_signal(model_delta(bundle, "chain", None), variant_sets)
    assert near["target_variants"] == variant_signal(model_delta(bundle, "chain", 9), variant_sets)
    whole = near["target_variants_whole_window"]
    assert near["target_variants"]["coding"]["mean_delta"] != whole["coding"]["mean_delta"]
    near["quality"] = quality_summary(near)
    assert near["quality"]["delta_radius"] == 9
    assert near["quality"]["whole_window"]["stop_gain_vs_synonymous_auroc"] == \
        near["target_variants_whole_window"]["coding"]["auroc"]["all"]
    assets = tmp_path / "assets"
    install(target, None, near, assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert "summed over the 9 bases either side of the variant" in card and "carbon-demo, whole window" in card
    assert "--delta-radius 9 --previous assets/models/carbon-demo" in card
    assert load_bundle(str(assets / "carbon-demo")).card.delta_radius == 9
    assert own_saved_figures(assets / "carbon-demo", data) is None  # saved at 9: not the whole window's figures
    assert own_saved_figures(assets / "carbon-demo", data, delta_radius=9) is not None


def test_a_cards_runs_table_names_each_stop_and_splice_term_a_run_trained_with():
    from training.evaluate import splice_weights, stop_weights

    assert stop_weights({"stop_weight": 6.0, "stop_contrast_weight": 1.0}) == "6 + 1 among SNVs"
    assert stop_weights({"stop_weight": 2.0}) == stop_weights({"stop_weight": 2.0, "stop_contrast_weight": 0}) == "2"
    assert stop_weights({}) == "0"  # an older record, before the stop terms
    assert splice_weights({"splice_contrast_weight": 3.0}) == "3 among rivals"
    assert splice_weights({"splice_contrast_weight": 0.0}) == splice_weights({}) == "0"  # none, or an older record


def test_each_added_term_is_one_registry_entry_that_the_config_the_command_line_and_the_loss_read():
    """A term of `ADDED_TERMS` is a TrainConfig weight, a flag of the trainer (0 to 10, its needs named in its
    help), a field of `Losses` and a part of the step's loss at its weight: nothing else lists the terms."""
    from training import train as train_module
    from training.losses import ADDED_TERMS, NEEDS_WORDS, Losses, step_loss

    parser = train_module.argument_parser()
    actions = {flag: action for action in parser._actions for flag in action.option_strings}
    zero = Losses(**{name: torch.zeros(()) for name in Losses._fields})
    for term in ADDED_TERMS:
        assert term.weight in train_module.OBJECTIVE and getattr(train_module.TrainConfig(), term.weight) == 0.0
        assert term.field in Losses._fields and set(term.needs) <= set(NEEDS_WORDS)
        assert all(NEEDS_WORDS[need] in actions[term.flag].help for need in term.needs)
        assert getattr(parser.parse_args([term.flag, "2.5"]), term.weight) == 2.5
        with pytest.raises(SystemExit):
            parser.parse_args([term.flag, "11"])
        cfg = replace(train_module.TrainConfig(), **{term.weight: 3.0})
        alone = step_loss(cfg, zero._replace(**{term.field: torch.tensor(0.5)}), False, False, False)
        assert alone.item() == pytest.approx(1.5)  # its weight times its value, and nothing of any other term
