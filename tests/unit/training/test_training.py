"""The demo-model pipeline on small real objects: labels, splits, template mix, training, Markov baseline."""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import random
import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from carbon_app.core.dna import BASES, reverse_complement
from tests.conftest import random_dna
from tests.training_runs import coding_gene
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


@pytest.mark.parametrize("strand", [1, -1])
def test_stop_gain_synonymous_and_splice_variants_are_what_they_say(strand):
    from Bio.Seq import Seq

    genome, transcript = coding_gene(strand)
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
    genome, transcript = coding_gene(1)
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
    genome, transcript = coding_gene(1)

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


def test_the_markov_baseline_reads_each_base_in_the_longest_context_seen_often_enough():
    """Its log-likelihood (every base at once) against the definition, a base at a time: a context of k bases
    is read where the base has k bases since the start or the last N and it was seen at least 10 times."""
    import math

    rng = np.random.default_rng(3)
    markov = MarkovModel(rng.integers(0, 4, size=(20, 300)), max_order=6)  # order 6: few contexts seen 10 times
    seq = "".join(rng.choice(list("ACGT"), 120)) + "NN" + "".join(rng.choice(list("ACGT"), 80)) + "N" + "GATTACA"

    def by_hand(seq: str, order: int) -> float:
        total, history = 0.0, []
        for base in seq:
            if base == "N":
                history = []
                continue
            for k in range(min(order, len(history)), -1, -1):
                row = markov.counts[k][sum(d * 4 ** (k - 1 - i) for i, d in enumerate(history[len(history) - k:]))]
                if k == 0 or row.sum() >= 10:
                    break
            digit = "ATCG".index(base)
            total += math.log((row[digit] + 0.5) / (row.sum() + 2.0))
            history.append(digit)
        return total

    for order in (0, 1, 3, 6):
        for scored in (seq, "GAT", "NAC"):  # the short ones: shorter than the context
            assert markov.loglik(scored, order) == pytest.approx(by_hand(scored, order), rel=1e-12), (scored, order)
    assert markov.loglik("", 3) == 0.0 and markov.loglik("NNN", 6) == 0.0


def test_a_time_budget_cuts_the_steps_to_the_measured_speed():
    from training.train import TrainConfig, steps_within

    cfg = TrainConfig(steps=1000, minutes=10)
    assert steps_within(cfg, 30, elapsed_s=60, per_step_s=1.0) == 30 + (570 - 60)  # 5% of the budget kept
    assert steps_within(cfg, 30, elapsed_s=60, per_step_s=0.1) == 1000  # never more than planned
    assert steps_within(cfg, 30, elapsed_s=900, per_step_s=0.5) == 31  # over budget already: stop next step


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
