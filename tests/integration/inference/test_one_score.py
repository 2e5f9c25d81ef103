"""One variant, one score: the same variant gets the same delta on every surface, each left at its own defaults.

The HBB worked example's variants (HbS, HbC, HbE, IVS-I-1) and 20 random substitutions near them are scored
through the notebook API, the command line (`scan`, `score-vcf`), a 2-worker Ray run and a launched app's VCF tab,
all 24 by each; the one-variant surfaces (the command line's `score`, the app's Variant tab: a whole scoring per
call) score the named four and four of the random ones (the same path for each). Every delta must agree to
1e-4 nats (float32); each surface is used with its own default values (gradio_client, for the app). Every
surface reads the model's own setup (`scoring.json`: what its quality was measured with) and clamps the window
by one rule (`inference.spec.resolve_spec`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from carbon_app.app.cli import main
from carbon_app.core.dna import read_fasta
from carbon_app.inference.score import score_variant
from tests.conftest import REPO, table_lines

HBB = json.loads((REPO / "assets" / "examples" / "hbb.json").read_text())
FASTA = REPO / "assets" / "examples" / "hbb.fa"
CONTIG = HBB["genome_contig"]
NAMED = {"HbS": "1206:A>T", "HbC": "1205:G>A", "HbE": "1265:G>A", "IVS-I-1": "1279:G>A"}
HGVS = {"HbS": "c.20A>T", "HbC": "c.19G>A", "HbE": "c.79G>A", "IVS-I-1": "c.92+1G>A"}  # the same, on HBB's CDS
SCAN = (1180, 1300)  # the region the random substitutions come from: exon 1, its donor and the start of intron 1


def _variants() -> dict[str, str]:
    sequence = read_fasta(FASTA).sequence
    rng = random.Random(80)
    picked = dict(NAMED)
    while len(picked) < len(NAMED) + 20:
        pos = rng.randint(*SCAN)
        ref = sequence[pos - 1]
        alt = rng.choice([b for b in "ACGT" if b != ref])
        picked.setdefault(f"random {pos}{ref}>{alt}", f"{pos}:{ref}>{alt}")
    return picked


VARIANTS = _variants()
ONE_AT_A_TIME = list(VARIANTS.values())[: len(NAMED) + 4]  # what the one-variant surfaces score, a call each


def _vcf(path) -> None:
    lines = ["##fileformat=VCFv4.2", f"##contig=<ID={CONTIG},length=3000>",
             "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    for name, text in sorted(VARIANTS.items(), key=lambda item: int(item[1].split(":")[0])):
        pos, change = text.split(":")
        ref, alt = change.split(">")
        lines.append(f"{CONTIG}\t{pos}\t{name.replace(' ', '_')}\t{ref}\t{alt}\t.\t.\t.")
    path.write_text("\n".join(lines) + "\n")


def _tsv_deltas(path) -> dict[str, float]:
    rows = [line.split("\t") for line in table_lines(path)[1:]]
    return {f"{row[2]}:{row[4]}>{row[5]}": float(row[6]) for row in rows}


def _cli_json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def notebook(demo) -> dict[str, float]:
    """The notebook API, as a user calls it: `score_variant(bundle, sequence, variant)`."""
    sequence = read_fasta(FASTA).sequence
    return {text: score_variant(demo, sequence, text).delta for text in VARIANTS.values()}


def test_the_command_line_scores_each_variant_as_the_notebook_does(notebook, capsys, tmp_path):
    for text in ONE_AT_A_TIME:
        scored = _cli_json(capsys, ["score", "--fasta", str(FASTA), "--variant", text])
        assert scored["delta"] == pytest.approx(notebook[text], abs=1e-4), text
        assert scored["spec"]["window"] == 1200 and scored["spec"]["strand_average"]  # the model's own
    for name, hgvs in HGVS.items():  # named in HGVS, in the sequence and at the contig's coordinates
        scored = _cli_json(capsys, ["score", "--fasta", str(FASTA), "--variant", hgvs, "--cds", HBB["hbb_cds"]])
        assert scored["delta"] == pytest.approx(notebook[NAMED[name]], abs=1e-4) and scored["hgvs"] == hgvs
        at = _cli_json(capsys, ["score", "--reference", str(FASTA), "--variant", f"{CONTIG}:{hgvs}", "--cds",
                                HBB["hbb_cds"]])
        assert at["delta"] == pytest.approx(notebook[NAMED[name]], abs=1e-4) and at["hgvs"] == f"{CONTIG}:{hgvs}"
    scan = _cli_json(capsys, ["scan", "--fasta", str(FASTA), "--start", str(SCAN[0]), "--end", str(SCAN[1])])
    by_change = {f"{pos}:{ref}>{alt}": delta for pos, ref, alt, delta in scan["rows"]}
    for text in VARIANTS.values():
        assert by_change[text] == pytest.approx(notebook[text], abs=1e-4), text
    vcf = tmp_path / "variants.vcf"
    _vcf(vcf)
    _cli_json(capsys, ["score-vcf", "--reference", str(FASTA), "--vcf", str(vcf), "--out", str(tmp_path / "o.vcf"),
                       "--tsv", str(tmp_path / "o.tsv")])
    batch = _tsv_deltas(tmp_path / "o.tsv")
    for text in VARIANTS.values():
        assert batch[text] == pytest.approx(notebook[text], abs=1e-4), text
    header = next(line for line in (tmp_path / "o.vcf").read_text().splitlines() if line.startswith("##carbon_studio"))
    assert "window=1200," in header and "strand_average=True" in header and "delta_radius=6" in header


def test_a_two_worker_ray_run_scores_each_variant_as_the_notebook_does(notebook, capsys, tmp_path):
    ray = pytest.importorskip("ray")
    vcf = tmp_path / "variants.vcf"
    _vcf(vcf)
    try:
        _cli_json(capsys, ["score-vcf", "--reference", str(FASTA), "--vcf", str(vcf), "--out",
                           str(tmp_path / "o.vcf"), "--tsv", str(tmp_path / "o.tsv"), "--ray", "local", "--workers",
                           "2", "--device", "cpu"])
    finally:
        ray.shutdown()
    batch = _tsv_deltas(tmp_path / "o.tsv")
    for text in VARIANTS.values():
        assert batch[text] == pytest.approx(notebook[text], abs=1e-4), text


def test_the_pages_variant_and_vcf_tabs_score_each_variant_as_the_notebook_does(notebook, client, tmp_path):
    from gradio_client import handle_file

    sequence = read_fasta(FASTA).sequence
    for text in ONE_AT_A_TIME:
        # only what a user types: the window, strands and method stay as the page offers them
        out = client.predict(reference=sequence, upload=None, change=text, alternate="", cds="", context=0,
                             api_name="/score_variant")
        assert out[-1]["delta"] == pytest.approx(notebook[text], abs=1e-4), text
    out = client.predict(reference="", upload=None, change=f"{CONTIG}:{NAMED['HbS']}", alternate="", cds="",
                         genome="HBB-locus-demo",
                         context=0, api_name="/score_variant")
    assert out[-1]["delta"] == pytest.approx(notebook[NAMED["HbS"]], abs=1e-4)
    for change, genome in ((HGVS["IVS-I-1"], "none"), (f"{CONTIG}:{HGVS['IVS-I-1']}", "HBB-locus-demo")):
        out = client.predict(reference=sequence if genome == "none" else "", upload=None, change=change,
                             alternate="", cds=HBB["hbb_cds"], genome=genome, context=0, api_name="/score_variant")
        assert out[-1]["delta"] == pytest.approx(notebook[NAMED["IVS-I-1"]], abs=1e-4), change
        # the name echoed (as the page's Markdown writes a '>') beside its normal form, its consequence named
        assert out[-1]["hgvs"] == change and change.replace(">", "&gt;") in out[0]
        assert "normal form " + ("" if genome == "none" else f"{CONTIG}:") + "1279:G&gt;A" in out[0]
        assert "splice-site [c.92+1G>A]" in out[0]
    vcf = tmp_path / "variants.vcf"
    _vcf(vcf)
    summary, _, _, files = client.predict(genome="HBB-locus-demo", upload=handle_file(str(vcf)),
                                          api_name="/score_vcf")
    batch = _tsv_deltas(next(Path(f) for f in files if str(f).endswith(".tsv")))
    for text in VARIANTS.values():
        assert batch[text] == pytest.approx(notebook[text], abs=1e-4), text
    assert "Read in 1,200-base windows" in summary
