"""One bad record never fails a VCF: it is named, by its line, and the records around it are scored; an
output scored again carries one value of each annotation; a damaged file is named in one sentence."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pysam
import pytest

from carbon_app.errors import InputError
from carbon_app.genome.reference import Reference
from carbon_app.genome.vcf import score_vcf
from tests.conftest import REPO, table_lines

HBB = json.loads((REPO / "assets" / "examples" / "hbb.json").read_text())
CONTIG = HBB["genome_contig"]
HEADER = f"##fileformat=VCFv4.2\n##contig=<ID={CONTIG},length=3000>\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
AROUND = (f"{CONTIG}\t1205\tbefore\tG\tA\t.\t.\t.\n", f"{CONTIG}\t1206\tafter\tA\tT\t.\t.\t.\n")


@pytest.fixture(scope="module")
def genome():
    return Reference(REPO / "assets" / "examples" / HBB["file"])


@pytest.mark.parametrize("record, named", [
    (f"{CONTIG}\t99999999999999999999\tbig\tA\tT\t.\t.\t.", "POS '99999999999999999999' is not a position"),
    (f"{CONTIG}\t1206\tend\tA\tT\t.\t.\tEND=999999999999999999999",
     "INFO END=999999999999999999999 is not a position at or after POS"),
    (f"{CONTIG}\t1206\tend\tA\tT\t.\t.\tEND=12", "INFO END=12 is not a position at or after POS"),
    (f"{CONTIG} \t1206\tspace\tA\tT\t.\t.\t.", f"CHROM '{CONTIG} ' is not a contig name"),
    ("\t1206\tnone\tA\tT\t.\t.\t.", "CHROM '' is not a contig name"),
])
def test_a_record_htslib_cannot_read_or_index_is_named_and_the_rest_are_scored(demo, genome, tmp_path, record, named):
    source = tmp_path / "in.vcf"
    source.write_text(HEADER + AROUND[0] + record + "\n" + AROUND[1])
    out, tsv = tmp_path / "out.vcf.gz", tmp_path / "out.tsv"
    summary = score_vcf(demo, genome, source, out, tsv, window=300)
    assert (summary.records, summary.scored) == (2, 2)
    assert [(line, why) for line, why in summary.malformed] == [(5, next(why for _, why in summary.malformed))]
    assert summary.malformed[0][1].startswith(named)
    with pysam.VariantFile(str(out)) as vcf:
        assert [r.id for r in vcf] == ["before", "after"] and all("CARBON_DELTA" in r.info for r in vcf.fetch())
    assert pysam.TabixFile(str(out)).contigs == [CONTIG]  # indexed
    rows = [row.split("\t") for row in table_lines(tsv)[1:]]
    assert [(row[0], row[7]) for row in rows] == [("4", ""), ("5", "malformed"), ("6", "")]
    assert rows[1][8].startswith(named)


def test_an_output_scored_again_carries_one_value_of_each_annotation(demo, genome, tmp_path):
    source = tmp_path / "in.vcf"
    source.write_text(HEADER + "".join(AROUND) + f"{CONTIG}\t1\tedge\tN\tA\t.\t.\t.\n")
    first, again = tmp_path / "first.vcf.gz", tmp_path / "again.vcf.gz"
    score_vcf(demo, genome, source, first, window=300)
    score_vcf(demo, genome, first, again, window=300)  # an annotated VCF, as a colleague sends it back
    with pysam.VariantFile(str(first)) as one, pysam.VariantFile(str(again)) as two:
        assert [(r.id, r.info.get("CARBON_DELTA"), r.filter.keys()) for r in one] == \
            [(r.id, r.info.get("CARBON_DELTA"), r.filter.keys()) for r in two]
        lines = str(two.header).splitlines()
    for own in ("##INFO=<ID=CARBON_DELTA", "##INFO=<ID=CARBON_NORMAL", "##FILTER=<ID=CARBON_UNSCORED",
                "##carbon_studio=", "##carbon_studio_version=", "##carbon_studio_setup="):
        assert sum(line.startswith(own) for line in lines) == 1, own
    # an earlier value that disagrees with this run's is replaced, not kept beside it
    stale = tmp_path / "stale.vcf"
    stale.write_text(HEADER.replace("#CHROM", '##INFO=<ID=CARBON_DELTA,Number=A,Type=Float,Description="old">\n'
                                    "#CHROM") + f"{CONTIG}\t1206\tsickle\tA\tT\t.\tCARBON_UNSCORED\tCARBON_DELTA=9.5\n")
    score_vcf(demo, genome, stale, tmp_path / "fresh.vcf.gz", window=300)
    with pysam.VariantFile(str(tmp_path / "fresh.vcf.gz")) as vcf:
        record = next(iter(vcf))
    assert record.info["CARBON_DELTA"][0] != 9.5 and "CARBON_UNSCORED" not in record.filter.keys()


def test_a_damaged_gzip_is_named_in_one_sentence(demo, genome, tmp_path):
    packed = gzip.compress((HEADER + "".join(AROUND)).encode())
    damaged = tmp_path / "damaged.vcf.gz"
    damaged.write_bytes(packed[:12] + bytes(20) + packed[32:])  # the gzip magic kept, its contents broken
    with pytest.raises(InputError, match="its compressed data is damaged .*compress it again"):
        score_vcf(demo, genome, damaged, tmp_path / "out.vcf.gz", window=300)


@pytest.mark.parametrize("name", [".vcf", "..vcf.gz", ".hidden.vcf"])
def test_an_upload_named_as_a_dotfile_comes_back_as_files_a_person_can_see(service, tmp_path, name):
    upload = tmp_path / name
    text = HEADER + "".join(AROUND)
    upload.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    summary, paths, rows = service.score_vcf("carbon-demo", None, str(upload), window=300,
                                             genome_upload=str(REPO / "assets" / "examples" / HBB["file"]))
    assert summary.scored == 2 and len(rows) == 2
    assert all(not Path(path).name.startswith(".") for path in paths), paths
