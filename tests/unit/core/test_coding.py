"""Coding consequences (synonymous / missense / stop-gain ...) and a delta's rank among its neighbours."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from Bio import SeqIO
from Bio.Seq import Seq
from Bio.SeqFeature import CompoundLocation, SeqFeature, SimpleLocation
from Bio.SeqRecord import SeqRecord

from carbon_app.assets import ASSETS
from carbon_app.core.coding import CodingSequence
from carbon_app.core.dna import read_fasta, reverse_complement
from carbon_app.errors import InputError
from carbon_app.inference.annotate import describe_stages, describe_variant
from carbon_app.inference.context import rank_in
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.spec import resolve_spec

#            M  A  W  K  *   then 3' flank
GENE = "GGGATGGCTTGGAAATAACCC"


def test_each_class_of_substitution_is_named_with_its_amino_acids():
    cds = CodingSequence.parse("4", GENE)  # a bare start reads on to the first stop
    assert len(cds.positions) == 15
    called = {(pos, alt): cds.consequence(GENE, pos - 1, alt) for pos, alt in
              [(4, "C"), (9, "C"), (8, "G"), (11, "A"), (16, "C"), (2, "T"), (20, "A")]}
    assert [(c.kind, c.protein_change) for c in called.values()] == [
        ("start-loss", "p.Met1Leu"), ("synonymous", "p.Ala2="), ("missense", "p.Ala2Gly"),
        ("stop-gain", "p.Trp3Ter"), ("stop-loss", "p.Ter5Gln"), ("non-coding", ""), ("non-coding", "")]
    assert str(called[(11, "A")]) == "stop-gain p.Trp3Ter (TGG>TAG) [c.8G>A]"
    assert called[(16, "C")].hgvs_c == "c.13T>C" and called[(2, "T")].hgvs_c == "c.-2G>T"
    assert called[(20, "A")].hgvs_c == "c.*2C>A"


HBB_SEQUENCE = read_fasta(ASSETS / "examples" / "hbb.fa").sequence
HBB_CDS = json.loads((ASSETS / "examples" / "hbb.json").read_text())["hbb_cds"]


@pytest.mark.parametrize("variant, expected", [
    ("1206:A>T", "missense p.Glu7Val (GAG>GTG) [c.20A>T]"),  # HbS
    ("1279:G>A", "splice-site [c.92+1G>A]"),  # IVS-I-1, the donor's G
    ("1407:A>G", "splice-site [c.93-2A>G]"),  # the acceptor's A
    ("1283:G>A", "splice-region [c.92+5G>A]"),
    ("1287:C>A", "non-coding [c.92+9C>A]"),
    ("1276:C>A", "synonymous p.Gly30= (GGC>GGA) in a splice region [c.90C>A]"),
    ("1205:GA>G", "frameshift p.Glu7fs [c.20del]"),
    ("1206:AG>A", "frameshift p.Glu8fs [c.22del]"),  # one G of c.21-22: the 3' one; codon 7 stays GAG
    ("1204:TGA>T", "frameshift p.Glu7fs [c.20_21del]"),  # GA of GAG is AG 3'-shifted; the anchor is not in it
    ("1185:CCA>C", "start-loss p.Met1? [c.-1_1del]"),  # a deletion from the 5' UTR into the start codon
    ("2608:TAAG>T", "stop-loss p.Ter148ext*? [c.443_*1del]"),
    ("1203:CTGA>C", "in-frame deletion p.Glu8del [c.18_20del]"),  # one of two Glu: the 3' one, as HGVS names it
    ("1206:A>AGGG", "in-frame insertion p.Glu7_Glu8insGly [c.22_23insGGG]"),  # after the GG run, 3'-shifted
    ("1206:A>AG", "frameshift p.Glu8fs [c.22dup]"),  # one more G after the GG run: a duplication
    ("1205:GA>TT", "missense p.Glu7Leu [c.19_20delinsTT]"),
    ("1277:AGGTT>A", "splice-site [c.92+3_92+6del]"),  # a deletion across the exon's end, 3'-shifted
    ("1186:C>A", "non-coding [c.-1C>A]"),
])
def test_indels_and_splice_sites_are_named_in_hgvs_terms(variant, expected):
    pos, change = variant.split(":")
    ref, alt = change.split(">")
    cds = CodingSequence.parse(HBB_CDS, HBB_SEQUENCE)
    assert str(cds.change_consequence(HBB_SEQUENCE, int(pos) - 1, ref, alt)) == expected


def test_an_indels_consequence_is_named_and_it_is_not_ranked_among_substitutions(compact):
    cds = CodingSequence.parse(HBB_CDS, HBB_SEQUENCE)
    stages = list(describe_stages(compact, HBB_SEQUENCE, "1205:GA>G", resolve_spec(compact, context=10, window=300),
                                  cds))
    assert len(stages) == 1 and stages[0].context is None  # the delta alone: no ranking among substitutions
    report = stages[0]
    assert report.consequence.kind == "frameshift" and "an indel is not ranked" in report.unranked
    assert report.to_dict()["consequence"]["hgvs_c"] == "c.20del"
    from carbon_app.app.formatting import verdict

    s = report.score
    line = verdict(s)
    assert f"= {s.delta + s.inserted_ll - s.deleted_ll:+.4f}" in line  # the indel's terms add up to what it says


def test_the_minus_strand_and_exons_read_as_the_gene_reads():
    minus = reverse_complement(GENE)  # the same gene on the other strand
    cds = CodingSequence.parse(f"complement({len(GENE) - 18 + 1}..{len(GENE) - 3})", minus)
    mirrored = len(GENE) - 11  # GENE's position 11 (TGG's middle G), 0-based on the minus copy
    assert cds.consequence(minus, mirrored, "T").protein_change == "p.Trp3Ter"  # G>A on the coding strand
    # the same gene split by an intron: exons 4..9 and 20..31
    split = GENE[:9] + "GTAAGTTTTAG" + GENE[9:]
    exons = CodingSequence.parse("4..9,21..29", split)
    assert exons.consequence(split, 21, "A").protein_change == "p.Trp3Ter"  # first base after the intron + 1
    assert exons.consequence(split, 12, "C").kind == "splice-region"  # in the (short) intron, 4 bases from its end
    assert exons.consequence(split, 9, "C").kind == "splice-site"  # the donor's G


def test_a_genbank_records_cds_feature_is_its_coding_sequence(tmp_path):
    split = GENE[:9] + "GTAAGTTTTAG" + GENE[9:]
    record = SeqRecord(Seq(split), id="toy", name="toy", annotations={"molecule_type": "DNA"})
    location = CompoundLocation([SimpleLocation(3, 9, strand=1), SimpleLocation(20, 29, strand=1)])
    record.features.append(SeqFeature(location, type="CDS", qualifiers={"gene": ["toy1"]}))
    path = tmp_path / "toy.gb"
    SeqIO.write(record, path, "genbank")
    coding = read_fasta(path).coding
    assert coding is not None and "toy1" in coding.description
    assert coding.consequence(split, 21, "A").protein_change == "p.Trp3Ter"


def test_hbb_sickle_cell_is_glu7val():
    examples = json.loads((ASSETS / "examples" / "hbb.json").read_text())
    hbb = read_fasta(ASSETS / "examples" / "hbb.fa").sequence
    cds = CodingSequence.parse(str(examples["hbb_coding_start"]), hbb)
    assert str(cds.consequence(hbb, 1206 - 1, "T")) == "missense p.Glu7Val (GAG>GTG) [c.20A>T]"
    assert cds.consequence(hbb, 1205 - 1, "A").protein_change == "p.Glu7Lys"


@pytest.mark.parametrize("text, message", [
    ("abc", "is not a start or exon ranges"), ("4..9,21", "mixes a bare start"),
    ("4..90", "must lie within the 21-base sequence"), ("0", "must lie within"), ("9..4", "first <= last")])
def test_a_bad_coding_sequence_is_named(text, message):
    with pytest.raises(InputError, match=message):
        CodingSequence.parse(text, GENE)


def test_rank_counts_the_others_and_leaves_the_variant_out():
    deltas = np.full((5, 4), np.nan)
    deltas[:, 1:] = np.arange(15, dtype=float).reshape(5, 3) * -0.1  # 15 substitutions, 0 to -1.4
    # columns A T C G; rows are 0-based positions 10..14; the variant: position 12 to C (its own -0.7)
    ranked = rank_in(deltas, 10, 12, 1, "C", -0.55, radius=1)  # positions 11..13: 9 substitutions
    assert ranked.count == 8 and (ranked.start, ranked.end) == (12, 14)
    # others: -0.3 -0.4 -0.5 -0.6 -0.8 -0.9 -1.0 -1.1: three are higher than -0.55
    assert ranked.more_damaging_than == pytest.approx(3 / 8)
    assert ranked.sentence() == "more damaging than 38% of the 8 possible substitutions within 1 base"


# a base, then an open reading frame of 53 random sense codons from position 2 (codon 27 holds position 80)
_SENSE = [a + b + c for a in "ACGT" for b in "ACGT" for c in "ACGT" if str(Seq(a + b + c).translate()) != "*"]
_rng = random.Random(9)
SEQ = "C" + "".join(_rng.choice(_SENSE) for _ in range(53))


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
def test_a_variants_context_is_the_scan_around_it(compact):
    ref = SEQ[79]
    alt = "A" if ref != "A" else "C"
    report = describe_variant(compact, SEQ, f"80:{ref}>{alt}", CodingSequence.parse("2", SEQ), context=6,
                              window=90, frames=2)
    scan = scan_substitutions(compact, SEQ, 74, 86, window=90, frames=2)
    own = scan.deltas[6, "ATCG".index(alt)]
    assert report.score.delta == pytest.approx(own, abs=1e-4)  # the same windows
    others = [d for pos, _, a, d in scan.rows() if (pos, a) != (80, alt)]
    assert report.context.count == len(others) == 38
    assert report.context.more_damaging_than == pytest.approx(np.mean([d > report.score.delta for d in others]))
    assert report.consequence is not None and report.consequence.codon == 27
    assert report.to_dict()["context"]["substitutions"] == 38
    with pytest.raises(InputError, match="the context"):
        describe_variant(compact, SEQ, f"80:{ref}>{alt}", context=-3)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
def test_a_report_comes_first_without_its_context_then_with_it(compact):
    ref = SEQ[79]
    alt = "A" if ref != "A" else "C"
    seen = []
    stages = describe_stages(compact, SEQ, f"80:{ref}>{alt}", resolve_spec(compact, context=4, window=90, frames=2),
                             CodingSequence.parse("2", SEQ), progress=seen.append)
    first = next(stages)
    assert first.context is None and first.consequence is not None and seen == []  # no ranking work done yet
    final = next(stages)
    assert final.context is not None and final.context.count == 26 and seen and seen[-1] == 1.0
    assert next(stages, None) is None
    whole = describe_variant(compact, SEQ, f"80:{ref}>{alt}", None, context=4, window=90, frames=2)
    assert final.score.delta == whole.score.delta
    assert final.context.more_damaging_than == whole.context.more_damaging_than
    unranked = resolve_spec(compact, window=90, frames=2)
    assert [r.context for r in describe_stages(compact, SEQ, f"80:{ref}>{alt}", unranked)] == [None]
    with pytest.raises(InputError, match="the context"):  # a bad radius: named before any work
        resolve_spec(compact, context=-3, window=90)
    with pytest.raises(InputError, match="give a scoring spec or its settings, not both: window, context given"):
        describe_variant(compact, SEQ, f"80:{ref}>{alt}", context=4, spec=unranked, window=90)


@pytest.mark.parametrize("variant, name", [
    ("1206:AG>A", "c.22del"), ("1205:GA>G", "c.20del"), ("1206:A>AG", "c.22dup"), ("1206:A>AGGG", "c.22_23insGGG"),
    ("1204:TGA>T", "c.20_21del"), ("1206:A>T", "c.20A>T"), ("1205:GA>TT", "c.19_20delinsTT"),
    ("1185:CCA>C", "c.-1_1del"), ("1279:G>A", "c.92+1G>A"),
])
def test_an_hgvs_name_is_the_same_on_either_strand(variant, name):
    """The gene as given and reverse-complemented with its CDS written complement(...): one change, one c. name
    (HGVS's 3' rule is on the CDS's strand, so on the minus strand it moves the other way along the sequence)."""
    pos, change = variant.split(":")
    ref, alt = change.split(">")
    length = len(HBB_SEQUENCE)
    plus = CodingSequence.parse(HBB_CDS, HBB_SEQUENCE)
    exons = ",".join(f"{length - int(b) + 1}..{length - int(a) + 1}" for a, b in
                     (e.split("..") for e in reversed(HBB_CDS.split(","))))
    minus_sequence = reverse_complement(HBB_SEQUENCE)
    minus = CodingSequence.parse(f"complement({exons})", minus_sequence)
    at = int(pos) - 1
    assert plus.hgvs_c(HBB_SEQUENCE, at, ref, alt) == name
    assert minus.hgvs_c(minus_sequence, length - at - len(ref), reverse_complement(ref), reverse_complement(alt)) \
        == name
