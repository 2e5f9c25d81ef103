"""Variants at genome coordinates and VCF batches, on real files the tests build (FASTA, bgzip, VCF)."""

from __future__ import annotations

import json
import random

import pysam
import pytest

from carbon_app.assets import ASSETS
from carbon_app.core.dna import read_fasta
from carbon_app.errors import InputError
from carbon_app.genome.coordinates import GenomicVariant, parse_genomic
from carbon_app.genome.reference import Reference, configured_references
from carbon_app.genome.scoring import describe_at, score_at, score_batch
from carbon_app.genome.vcf import score_vcf
from carbon_app.inference.score import score_variant
from tests.conftest import random_dna, table_lines

HBB = read_fasta(ASSETS / "examples" / "hbb.fa").sequence  # 3,000 bases of the human beta-globin locus
OTHER = random_dna(1500, seed=3)
GAPPY = "N" * 900 + OTHER[:300]  # a contig that starts unsequenced
WINDOW = 200


@pytest.fixture(scope="module")
def genome(tmp_path_factory):
    """A three-contig genome, bgzipped, as a FASTA a lab would have (chr-prefixed names)."""
    folder = tmp_path_factory.mktemp("genome")
    plain = folder / "mini.fa"
    plain.write_text("".join(f">{name} test contig\n" + "\n".join(seq[i : i + 60] for i in range(0, len(seq), 60))
                             + "\n" for name, seq in (("chr11", HBB), ("chr2", OTHER), ("chrUn", GAPPY))))
    packed = folder / "mini.fa.gz"
    pysam.tabix_compress(str(plain), str(packed))
    return packed


def test_every_usual_form_of_a_variant_reads_the_same():
    expected = GenomicVariant("chr11", 1206, "A", "T")
    for text in ("chr11:1206:A>T", "chr11:1206 A>T", "chr11:1,206:a>t", "chr11-1206-A-T",
                 "chr11\t1206\trs334\tA\tT\t.\tPASS\t."):
        assert parse_genomic(text) == expected, text
    assert parse_genomic("11 1206 . A T") == GenomicVariant("11", 1206, "A", "T")  # a VCF line pasted with spaces
    assert parse_genomic("chr11:1205:GAG>G") == GenomicVariant("chr11", 1205, "GAG", "G")  # VCF anchor base
    for text, message in (("chr11:1206", "not at genome coordinates"), ("chr11:0:A>T", "start at 1"),
                          ("chr11:1206:A>A", "changes nothing"), ("chr11:1206:A><DEL>", "not at genome"),
                          ("chr11\t1206\t.\tA\tT,G", "several ALT alleles"), ("", "empty")):
        with pytest.raises(InputError, match=message):
            parse_genomic(text)


def test_hgvs_names_on_a_contig_are_placed_on_its_bases(genome):
    reference = Reference(genome, "mini")
    cds = json.loads((ASSETS / "examples" / "hbb.json").read_text())["hbb_cds"]
    for text, expected in (("chr11:g.1206A>T", GenomicVariant("chr11", 1206, "A", "T")),
                           ("11:g.1206A>T", GenomicVariant("11", 1206, "A", "T")),
                           ("chr11:g.1205_1206del", GenomicVariant("chr11", 1204, "TGA", "T")),
                           ("chr11:c.20A>T", GenomicVariant("chr11", 1206, "A", "T")),
                           ("chr11:c.92+1G>A", GenomicVariant("chr11", 1279, "G", "A"))):
        variant = parse_genomic(text, reference, cds)
        assert variant == expected and variant.hgvs == text and variant.label == f"{text} ({expected})"
    for text, message in (("chr11:c.20A>T", "none is given"), ("chr7:g.5A>T", "not in the reference genome"),
                          ("g.1206A>T", "which contig"), ("chr11:g.1206G>T", "sequence has A")):
        with pytest.raises(InputError, match=message):
            parse_genomic(text, reference, cds if "c." not in text else None)
    with pytest.raises(InputError, match="no genome is given"):
        parse_genomic("chr11:g.1206A>T")


def test_a_bgzipped_reference_is_indexed_and_its_contigs_answer_to_either_spelling(genome):
    reference = Reference(genome, "mini")
    assert genome.with_name("mini.fa.gz.fai").exists()  # made on first use
    assert reference.lengths == {"chr11": 3000, "chr2": 1500, "chrUn": 1200}
    assert reference.contig("11") == "chr11" and reference.contig("chr2") == "chr2"
    assert reference.fetch("chr11", 1205, 1208) == HBB[1205:1208]
    with pytest.raises(InputError, match="contig 'chr7' is not in the reference genome mini"):
        reference.contig("chr7")
    not_bgzip = genome.with_name("plain_gzip.fa.gz")
    import gzip

    not_bgzip.write_bytes(gzip.compress(b">x\nACGT\n"))
    with pytest.raises(InputError, match="bgzip"):
        Reference(not_bgzip)
    with pytest.raises(InputError, match="does not exist"):
        Reference(genome.with_name("nowhere.fa"))
    assert configured_references("GRCh38=/data/hg38.fa, mini=/x/y.fa") == {"GRCh38": genome.parent.joinpath(
        "/data/hg38.fa"), "mini": genome.parent.joinpath("/x/y.fa")}
    with pytest.raises(InputError, match="NAME=PATH"):
        configured_references("GRCh38")


def test_a_score_at_coordinates_equals_scoring_the_contig_itself(compact, genome):
    reference = Reference(genome)
    for text, local, seq in (("11:1206:A>T", "1206:A>T", HBB), ("chr11:1205:GAG>G", "1205:GAG>G", HBB),
                             ("chr2:40:" + OTHER[39] + ">" + ("A" if OTHER[39] != "A" else "C"), None, OTHER)):
        scored = score_at(compact, reference, text, window=WINDOW, strand_average=True)
        variant = parse_genomic(text)
        alone = score_variant(compact, seq, local or f"{variant.pos}:{variant.ref}>{variant.alt}", window=WINDOW,
                              strand_average=True)
        assert scored.delta == pytest.approx(alone.delta, abs=1e-6), text
        assert scored.window_start == alone.window_start and scored.window_end == alone.window_end
    near_start = score_at(compact, reference, "chr2:40:" + OTHER[39] + ">" + ("A" if OTHER[39] != "A" else "C"),
                          window=WINDOW)
    assert any("runs off the start of chr2" in note for note in near_start.notes)
    with pytest.raises(InputError, match="has 'A' at chr11:1206, not 'G'.*right genome build"):
        score_at(compact, reference, "chr11:1206:G>T", window=WINDOW)
    first = OTHER[1]  # chrUn:902, just after 900 unsequenced bases
    with pytest.raises(InputError, match=r"the window around chrUn:902:.* is \d+% N \(unsequenced\)"):
        score_at(compact, reference, f"chrUn:902:{first}>{'A' if first != 'A' else 'C'}", window=1000)


def _vcf_lines() -> list[str]:
    rng = random.Random(11)
    lines = []
    for pos in range(1180, 1230):  # a saturation-style cluster in HBB
        alt = rng.choice([b for b in "ACGT" if b != HBB[pos - 1]])
        lines.append(f"chr11\t{pos}\t.\t{HBB[pos - 1]}\t{alt}\t.\tPASS\tDP=30\tGT:DP\t0/1:30")
    for pos in (150, 700, 2600):  # scattered
        lines.append(f"chr11\t{pos}\t.\t{HBB[pos - 1]}\t{'T' if HBB[pos - 1] != 'T' else 'G'}\t.\t.\t.\tGT\t1/1")
    others = [b for b in "ACGT" if b != HBB[1999]]
    lines.append(f"chr11\t2000\tmulti\t{HBB[1999]}\t{others[0]},{others[1]}\t.\t.\tDP=7\tGT\t1/2")
    lines.append(f"chr11\t1205\tdel\t{HBB[1204:1207]}\t{HBB[1204]}\t.\t.\t.\tGT\t0/1")  # an anchored deletion
    lines.append(f"chr11\t1300\tmismatch\t{'A' if HBB[1299] != 'A' else 'C'}\tG\t.\t.\t.\tGT\t0/1")
    lines.append("chr9\t100\tunknown\tA\tG\t.\t.\t.\tGT\t0/1")
    lines.append(f"chr11\t900\tsv\t{HBB[899]}\t<DEL>\t.\t.\tSVTYPE=DEL\tGT\t0/1")
    lines.append("chr11\tabc\tbroken\tA\tG\t.\t.\t.\tGT\t0/1")  # not a record
    lines.append(f"chr2\t700\t.\t{OTHER[699]}\t{'A' if OTHER[699] != 'A' else 'C'}\t.\t.\t.\tGT\t0/0")
    return lines


def _write_vcf(path, lines: list[str]) -> None:
    header = ["##fileformat=VCFv4.2", "##contig=<ID=chr11,length=3000>", "##contig=<ID=chr2,length=1500>",
              '##INFO=<ID=DP,Number=1,Type=Integer,Description="Depth">',
              '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
              '##FORMAT=<ID=DP,Number=1,Type=Integer,Description="Depth">',
              "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tS1"]
    path.write_text("\n".join(header + lines) + "\n")


def test_a_vcf_batch_writes_every_record_in_order_with_its_delta_or_its_problem(compact, genome, tmp_path):
    lines = _vcf_lines()
    plain = tmp_path / "in.vcf"
    _write_vcf(plain, lines)
    packed = tmp_path / "in.vcf.gz"
    pysam.tabix_compress(str(plain), str(packed))
    reference = Reference(genome, "mini")
    seen = []
    summary = score_vcf(compact, reference, packed, tmp_path / "out.vcf.gz", tmp_path / "out.tsv", window=WINDOW,
                        progress=lambda done, total: seen.append((done, total)))
    records = list(pysam.VariantFile(str(tmp_path / "out.vcf.gz")))
    kept = [line for line in lines if "\tabc\t" not in line]
    assert [(r.chrom, r.pos) for r in records] == [(f.split("\t")[0], int(f.split("\t")[1])) for f in kept]
    bad_line = 7 + next(i for i, line in enumerate(lines) if "\tabc\t" in line) + 1  # 7 header lines before
    assert summary.records == len(kept)
    assert summary.malformed == [(bad_line, "POS 'abc' is not a position (1 to 2,147,483,646)")]
    assert summary.method == compact.card.method == "marginal"  # none named: the model's own (no eval.json)
    by_id = {r.id: r for r in records}
    assert by_id["mismatch"].info["CARBON_PROBLEM"] == ("REF_mismatch",)
    assert by_id["unknown"].info["CARBON_PROBLEM"] == ("unknown_contig",)
    assert by_id["sv"].info["CARBON_PROBLEM"] == ("symbolic_allele",) and "CARBON_UNSCORED" in by_id["sv"].filter
    assert by_id["sv"].info["SVTYPE"] == ("DEL",)  # other INFO passes through (undeclared: as htslib reads it)
    multi = by_id["multi"]
    assert len(multi.info["CARBON_DELTA"]) == 2 and multi.samples["S1"]["GT"] == (1, 2) and multi.info["DP"] == 7
    rows = table_lines(tmp_path / "out.tsv")
    windows = {(r[1], r[2], r[5]): (r[10], r[11]) for r in (row.split("\t") for row in rows[1:])}
    # every delta equals a single call at the same coordinates, read in the same windows the TSV names
    for record in records[::7] + [multi, by_id["del"]]:
        for alt, delta in zip(record.alts, record.info["CARBON_DELTA"], strict=True):
            if delta is not None:
                alone = score_at(compact, reference, f"{record.chrom}:{record.pos}:{record.ref}>{alt}", window=WINDOW)
                assert delta == pytest.approx(alone.delta, abs=1e-4)
                assert windows[record.chrom, str(record.pos), alt] == (str(alone.window_start), str(alone.window_end))
    assert summary.scored == sum(d is not None for r in records for d in r.info["CARBON_DELTA"])
    assert seen[-1] == (summary.alts, summary.alts) and all(a[0] <= a[1] for a in seen)
    assert rows[0].split("\t") == ["line", "chrom", "pos", "id", "ref", "alt", "delta", "problem", "message",
                                   "more_damaging_than", "window_start", "window_end"]
    assert all(len(r.split("\t")) == 12 for r in rows)
    assert len(rows) == 1 + summary.alts + 1  # a row per ALT, and one for the line that is not a record
    assert [int(r.split("\t")[0]) for r in rows[1:]] == sorted(int(r.split("\t")[0]) for r in rows[1:])
    assert any("\tmalformed\tPOS 'abc' is not a position" in r for r in rows)
    assert summary.hint is None
    assert not summary.sorted and not (tmp_path / "out.vcf.gz.tbi").exists()  # unsorted input keeps its order


def test_a_vcf_on_the_wrong_build_says_so(compact, genome, tmp_path):
    wrong = [f"chr11\t{pos}\t.\t{'A' if HBB[pos - 1] != 'A' else 'C'}\tG\t.\t.\t.\tGT\t0/1" for pos in range(100, 110)]
    _write_vcf(tmp_path / "wrong.vcf", wrong)
    summary = score_vcf(compact, Reference(genome), tmp_path / "wrong.vcf", tmp_path / "out.vcf.gz", window=WINDOW)
    assert summary.problems["REF_mismatch"] == 10 and "is this the right genome build?" in summary.hint
    assert len(list(pysam.VariantFile(str(tmp_path / "out.vcf.gz")))) == 10  # all written, all flagged
    assert (tmp_path / "out.vcf.gz.tbi").exists()  # sorted records: indexed


def test_the_batch_shares_windows_but_not_answers(compact, genome):
    reference = Reference(genome)
    variants = [parse_genomic(f"chr11:{p}:{HBB[p - 1]}>{'G' if HBB[p - 1] != 'G' else 'T'}")
                for p in (1200, 1201, 1203)]
    variants.append(parse_genomic("chr11:1205:" + HBB[1204:1207] + ">" + HBB[1204]))
    for strand_average in (False, True):
        batch = score_batch(compact, reference, variants, window=WINDOW, strand_average=strand_average)
        for variant, outcome in zip(variants, batch, strict=True):
            alone = score_at(compact, reference, variant, window=WINDOW, strand_average=strand_average)
            assert outcome.delta == pytest.approx(alone.delta, abs=1e-4), (variant, strand_average)


def test_a_window_beyond_the_context_is_clamped_alike_for_a_sequence_a_contig_and_a_vcf(compact, tmp_path):
    """One rule (`resolve_spec`): the window a model cannot hold is cut to what it holds, the same on every
    path, so a VCF record's delta does not depend on which other records share its stretch of genome."""
    long = random_dna(12_000, seed=80)  # longer than the compact model's context (3,072 bases)
    (tmp_path / "long.fa").write_text(">chrL\n" + long + "\n")
    reference = Reference(tmp_path / "long.fa")
    positions = (2000, 2600, 4000, 4300, 9000)  # two clusters and a loner
    variants = [parse_genomic(f"chrL:{p}:{long[p - 1]}>{'G' if long[p - 1] != 'G' else 'T'}") for p in positions]
    batch = score_batch(compact, reference, variants, window=100_000)
    alone = [score_variant(compact, long, f"{v.pos}:{v.ref}>{v.alt}", window=100_000) for v in variants]
    assert alone[0].spec.asked_window == 100_000 and alone[0].frame_bases == alone[0].spec.window < 100_000
    for variant, outcome, single in zip(variants, batch, alone, strict=True):
        assert outcome.delta == pytest.approx(single.delta, abs=1e-4), variant
        assert outcome.delta == pytest.approx(score_at(compact, reference, variant, window=100_000).delta, abs=1e-4)
    vcf = tmp_path / "clamped.vcf"
    vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + "".join(
        f"chrL\t{v.pos}\t.\t{v.ref}\t{v.alt}\t.\t.\t.\n" for v in variants))
    score_vcf(compact, reference, vcf, tmp_path / "out.vcf", window=100_000)
    header = (tmp_path / "out.vcf").read_text()
    assert f"window={alone[0].spec.window}," in header and "window=100000" not in header


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
def test_a_batchs_context_ranks_each_variant_as_a_single_score_does(compact, genome, tmp_path):
    reference = Reference(genome)
    near = [f"chr11\t{p}\t.\t{HBB[p - 1]}\t{'G' if HBB[p - 1] != 'G' else 'T'}\t.\t.\t." for p in (1200, 1204)]
    _write_vcf(tmp_path / "near.vcf", [*near, "chr11\t1205\t.\t" + HBB[1204:1207] + "\t" + HBB[1204] + "\t.\t.\t."])
    summary = score_vcf(compact, reference, tmp_path / "near.vcf", tmp_path / "out.vcf", tmp_path / "out.tsv",
                        window=WINDOW, frames=2, context=4, strand_average=True)
    assert summary.scored == 3
    out = pysam.VariantFile(str(tmp_path / "out.vcf"))
    assert "CARBON_CONTEXT" in out.header.info and "context=4" in str(out.header)
    for record in out:
        _, alone = describe_at(compact, reference, f"{record.chrom}:{record.pos}:{record.ref}>{record.alts[0]}",
                               context=4, window=WINDOW, frames=2, strand_average=True)
        assert record.info["CARBON_DELTA"][0] == pytest.approx(alone.score.delta, abs=1e-4)
        if len(record.ref) != 1:  # an indel is not ranked among substitutions, in a batch as alone
            assert record.info["CARBON_CONTEXT"][0] is None and alone.context is None and "indel" in alone.unranked
            continue
        assert record.info["CARBON_CONTEXT"][0] == pytest.approx(alone.context.more_damaging_than, abs=1e-3)
        assert alone.context.count == 9 * 3 - 1
    rows = [r.split("\t") for r in table_lines(tmp_path / "out.tsv")[1:]]
    assert all(0 <= float(r[9]) <= 1 for r in rows if len(r[4]) == 1) and [r[9] for r in rows if len(r[4]) > 1] == [""]


def test_a_consequence_at_coordinates_reads_the_exons_on_the_contig(compact, genome):
    reference = Reference(genome)
    scored, report = describe_at(compact, reference, "chr11:1206:A>T", cds="1187", window=WINDOW, frames=1)
    assert str(report.consequence) == "missense p.Glu7Val (GAG>GTG) [c.20A>T]"
    assert scored.delta == pytest.approx(score_at(compact, reference, "chr11:1206:A>T", window=WINDOW, frames=1).delta)
    with pytest.raises(InputError, match="must lie within the 3,000-base sequence"):
        describe_at(compact, reference, "chr11:1206:A>T", cds="1187..5000", window=WINDOW, frames=1)


def test_the_server_refuses_a_vcf_over_its_limit_before_any_work(tmp_path):
    from carbon_app.app.service import DEMO_GENOME, AppConfig, Service
    from carbon_app.model.manager import ModelManager

    config = AppConfig(models=["carbon-demo"], output_dir=tmp_path, max_vcf_alts=3,
                       genomes={DEMO_GENOME: ASSETS / "examples" / "hbb.fa"})
    manager = ModelManager(device="cpu")
    service = Service(manager, config)
    with pytest.raises(InputError, match="holds 8 ALT alleles; this server scores at most 3 .*score-vcf.* no limit"):
        service.score_vcf("carbon-demo", DEMO_GENOME, str(ASSETS / "examples" / "hbb_variants.vcf"))
    assert manager.loaded() == []  # refused before loading anything
    with pytest.raises(InputError, match="choose the genome"):
        service.score_vcf("carbon-demo", "none", str(ASSETS / "examples" / "hbb_variants.vcf"))


def test_a_cluster_of_close_variants_tells_its_progress_as_its_windows_are_read(compact, genome):
    """Forty SNVs 74 bases apart share one stretch of genome (one cluster, as dense VCFs do): progress comes in
    steps as its windows are read, not once at its end, adds up to every variant and never runs backwards;
    the deltas are those of the batch read without a progress callback."""
    reference = Reference(genome)
    variants = [parse_genomic(f"chr11:{p}:{HBB[p - 1]}>{'C' if HBB[p - 1] != 'C' else 'T'}")
                for p in range(30, 2990, 74)]
    told: list[int] = []
    batch = score_batch(compact, reference, variants, window=WINDOW, progress=told.append)
    assert len(told) >= 3 and all(n > 0 for n in told) and sum(told) == len(variants)
    quiet = score_batch(compact, reference, variants, window=WINDOW)
    assert [o.delta for o in batch] == [o.delta for o in quiet]
