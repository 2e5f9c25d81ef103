"""The VCF tab's genome step: a VCF on contigs the genome lacks is told which and what to do; a person can
bring a genome (FASTA, gzipped or not, bounded) and map the VCF's contig names onto it; the tabix index
comes beside the bgzipped VCF."""

from __future__ import annotations

import gzip

import pysam
import pytest

from carbon_app.app.service import DEMO_GENOME
from carbon_app.core.dna import read_fasta
from carbon_app.errors import InputError
from carbon_app.genome.reference import read_renaming
from tests.conftest import REPO

HBB = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence
CONTIG = "HUMHBB_61001-64000"


@pytest.fixture(scope="module")
def service(demo_manager, tmp_path_factory):
    """The service as the app runs it with no CARBON_REFERENCES: the bundled HBB locus its one genome."""
    from carbon_app.app.service import AppConfig, Service

    return Service(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path_factory.mktemp("vcf"),
                                           genomes={DEMO_GENOME: REPO / "assets" / "examples" / "hbb.fa"}))


def _brca1_style_vcf(path, contig="17"):
    """Four SNVs named on `contig` (as a 1000 Genomes VCF names chromosome 17), their REFs those of HBB."""
    rows = "".join(f"{contig}\t{pos}\t.\t{HBB[pos - 1]}\t{'A' if HBB[pos - 1] != 'A' else 'C'}\t.\t.\t.\n"
                   for pos in (1205, 1206, 1400, 1800))
    path.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + rows)
    return path


def test_a_vcf_on_contigs_the_genome_lacks_names_them_its_own_and_how_to_add_one(service, tmp_path):
    summary, paths, rows = service.score_vcf("carbon-demo", DEMO_GENOME,
                                             str(_brca1_style_vcf(tmp_path / "brca1.vcf")), frames=1, window=300)
    assert summary.scored == 0 and summary.problems["unknown_contig"] == 4
    said = "\n".join(summary.lines())
    assert (f"The genome {DEMO_GENOME} has no contig 17 (4 ALT alleles); its contigs are "
            "HUMHBB_61001-64000.") in said
    assert "CARBON_REFERENCES=NAME=PATH" in said and "--reference" in said and "--rename-chrs" in said
    # the page says it with its own controls, not the command line's flags
    from carbon_app.app.formatting import vcf_markdown

    shown = vcf_markdown(summary)
    assert "“Your own genome, contig names”" in shown and "“Contig names” box" in shown
    assert "--rename-chrs" not in shown and "CARBON_REFERENCES" not in shown and "score-vcf" not in shown
    assert [p.rsplit(".", 2)[-2:] for p in paths] == [["vcf", "gz"], ["gz", "tbi"], ["carbon", "tsv"]]
    assert len(rows) == 4


def test_a_vcf_out_of_coordinate_order_says_why_it_has_no_index(service, tmp_path):
    vcf = tmp_path / "unsorted.vcf"
    vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
                   f"{CONTIG}\t1206\t.\tA\tT\t.\t.\t.\n{CONTIG}\t1205\t.\tG\tA\t.\t.\t.\n")
    summary, paths, rows = service.score_vcf("carbon-demo", DEMO_GENOME, str(vcf), frames=1, window=300)
    assert not [p for p in paths if p.endswith(".tbi")] and summary.scored == 2
    assert any(line.startswith("The records are not in coordinate order, so the annotated VCF has no tabix index")
               and "bcftools sort" in line for line in summary.lines())


@pytest.mark.parametrize("packed", [False, True])
def test_a_genome_brought_by_the_person_scores_the_vcf_through_a_renaming_table(service, demo, tmp_path, packed):
    fasta = tmp_path / ("mine.fa.gz" if packed else "mine.fa")
    text = ">ref_brca1 a region\n" + "\n".join(HBB[i : i + 70] for i in range(0, len(HBB), 70)) + "\n"
    if packed:  # plain gzip, as a person's tools write it (not bgzip)
        fasta.write_bytes(gzip.compress(text.encode()))
    else:
        fasta.write_text(text)
    vcf = _brca1_style_vcf(tmp_path / "brca1.vcf")
    summary, paths, rows = service.score_vcf("carbon-demo", DEMO_GENOME, str(vcf), frames=1, window=300,
                                             genome_upload=str(fasta), renaming="# VCF genome\n17 ref_brca1\n")
    assert summary.scored == 4 and summary.genome == fasta.name and not summary.missing_contigs
    _, _, on_demo = service.score_vcf("carbon-demo", DEMO_GENOME, str(_brca1_style_vcf(tmp_path / "hbb.vcf",
                                                                                   "HUMHBB_61001-64000")),
                                      frames=1, window=300)
    assert [row[6] for row in rows] == [row[6] for row in on_demo]  # the same bases, the same deltas
    records = list(pysam.VariantFile(paths[0]))
    assert [r.chrom for r in records] == ["17"] * 4  # the VCF keeps its own names


def test_bad_genomes_and_tables_are_named(service, tmp_path):
    vcf = _brca1_style_vcf(tmp_path / "brca1.vcf")
    not_fasta = tmp_path / "notes.fa"
    not_fasta.write_text("these are notes, not a genome\n")
    with pytest.raises(InputError, match="the genome 'notes.fa' is not a FASTA file"):
        service.score_vcf("carbon-demo", None, str(vcf), genome_upload=str(not_fasta))
    bomb = tmp_path / "bomb.fa.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as out:
        out.write(b">x\n")
        for _ in range(80):
            out.write(b"A" * 2**20)
    with pytest.raises(InputError, match="expands to more than 64 MB"):
        service.score_vcf("carbon-demo", None, str(vcf), genome_upload=str(bomb))
    with pytest.raises(InputError, match="line 2 of the contig renaming table is '17': write the VCF's name"):
        read_renaming("chr1 1\n17\n")
    with pytest.raises(InputError, match="choose the genome the VCF's coordinates are on, or upload one"):
        service.score_vcf("carbon-demo", None, str(vcf))


def test_score_vcf_takes_a_renaming_table_as_bcftools_does(tmp_path, capsys, monkeypatch):
    from carbon_app.app.cli import main

    monkeypatch.delenv("CARBON_SERVER", raising=False)
    fasta = tmp_path / "region.fa"
    fasta.write_text(">ref_brca1\n" + HBB + "\n")
    vcf, table = _brca1_style_vcf(tmp_path / "brca1.vcf"), tmp_path / "names.txt"
    table.write_text("17\tref_brca1\n")
    command = ["score-vcf", "--model", "carbon-demo", "--reference", str(fasta), "--vcf", str(vcf), "--frames", "1",
               "--window", "300", "--out", str(tmp_path / "out.vcf.gz")]
    assert main([*command, "--rename-chrs", str(table)]) == 0
    assert [r.info["CARBON_DELTA"][0] < 0 or r.info["CARBON_DELTA"][0] >= 0
            for r in pysam.VariantFile(str(tmp_path / "out.vcf.gz"))] == [True] * 4
    capsys.readouterr()
    assert main(command) == 0  # without it: every ALT named, and the way out said
    assert "has no contig 17 (4 ALT alleles); its contigs are ref_brca1" in capsys.readouterr().err
    table.write_text("17\n")
    assert main([*command, "--rename-chrs", str(table)]) == 2
    assert "line 1 of the contig renaming table is '17'" in capsys.readouterr().err
