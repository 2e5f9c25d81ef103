"""The command line: JSON results, and one-line errors with a non-zero exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, table_lines


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CARBON_MODEL": ""}
    return subprocess.run([sys.executable, "-m", "carbon_app", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


@pytest.mark.integration  # a subprocess per call
def test_generate_json(carbon_model_dir):
    out = run_cli("generate", "--model", str(carbon_model_dir), "--prompt", "ACGTACGTA", "--bases", "13",
                  "--species", "<vertebrate_mammalian>", "--region", "protein_coding", "--mask", "NNNNNNNNNNRRR",
                  "--seed", "5", "--samples", "3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["sequences"]) == 3 and all(len(s) == 13 for s in data["sequences"])
    assert data["prompt_text"] == "<vertebrate_mammalian><protein_coding_region><dna>ACGTAC"
    assert data["prompt_ids"][-2:] == [151669, 151672 + 0 * 1024 + 2 * 256 + 3 * 64 + 1 * 16 + 0 * 4 + 2]
    again = json.loads(run_cli("generate", "--model", str(carbon_model_dir), "--prompt", "ACGTACGTA", "--bases", "13",
                               "--species", "<vertebrate_mammalian>", "--region", "protein_coding", "--mask",
                               "NNNNNNNNNNRRR", "--seed", "5", "--samples", "3", "--json").stdout)
    assert again["sequences"] == data["sequences"]


@pytest.mark.integration  # a subprocess per call
def test_score_json_and_fasta(compact_model_dir, tmp_path):
    seq = "ATGGTGCATCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTG"
    fasta = tmp_path / "two.fa"
    fasta.write_text(f">first some gene\n{seq[:30]}\n{seq[30:]}\r\n>second\nACGT\n")
    out = run_cli("score", "--model", str(compact_model_dir), "--fasta", str(fasta), "--record", "first",
                  "--variant", "7:C>T", "--window", "40", "--strand-average", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"delta", "ref_logprobs", "alt_logprobs", "window_start", "window_end"} <= set(data)
    assert data["window_start"] >= 1 and data["window_end"] - data["window_start"] + 1 == len(data["ref_logprobs"])
    assert data["delta_radius"] is None  # the compact model names none: the whole window
    near = json.loads(run_cli("score", "--model", str(compact_model_dir), "--fasta", str(fasta), "--record", "first",
                              "--variant", "7:C>T", "--window", "40", "--strand-average", "--delta-radius", "3",
                              "--json").stdout)
    assert near["delta_radius"] == 3 and near["delta"] != pytest.approx(data["delta"], abs=1e-6)
    whole = run_cli("score", "--model", str(compact_model_dir), "--sequence", seq, "--json")
    assert len(json.loads(whole.stdout)["logprobs"]) == len(seq)


@pytest.mark.integration  # a subprocess per call
def test_scan_command_rows_equal_the_variant_scores(compact_model_dir):
    from carbon_app.inference.score import score_variant
    from carbon_app.model.bundle import load_bundle

    seq = "ATGGTGCATCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTG"
    out = run_cli("scan", "--model", str(compact_model_dir), "--sequence", seq, "--start", "20", "--end", "22",
                  "--window", "40", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["columns"] == ["position", "ref", "alt", "delta"] and len(data["rows"]) == 9
    bundle = load_bundle(str(compact_model_dir))
    for pos, ref, alt, delta in data["rows"][::4]:
        assert delta == pytest.approx(score_variant(bundle, seq, f"{pos}:{ref}>{alt}", window=40).delta, abs=1e-4)
    tsv = run_cli("scan", "--model", str(compact_model_dir), "--sequence", seq, "--start", "20", "--end", "20")
    lines = tsv.stdout.splitlines()
    assert lines[0].startswith("## made by Carbon Studio") and lines[3] == "## the model's own scoring setup"
    assert lines[4] == "position\tref\talt\tdelta_loglik" and len(lines) == 4 + 4
    near = run_cli("scan", "--model", str(compact_model_dir), "--sequence", seq, "--start", "20", "--end", "22",
                   "--window", "40", "--delta-radius", "5", "--json")
    data = json.loads(near.stdout)
    assert near.returncode == 0 and data["delta_radius"] == 5, near.stderr
    for pos, ref, alt, delta in data["rows"][::4]:
        assert delta == pytest.approx(score_variant(bundle, seq, f"{pos}:{ref}>{alt}", window=40,
                                                    delta_radius=5).delta, abs=1e-4)


@pytest.mark.integration  # a subprocess per call
def test_unknown_model_and_missing_default():
    out = run_cli("generate", "--model", "nobody/nothing-here", "--bases", "5")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = run_cli("score", "--model", "not-a-model", "--sequence", "ACGT")
    assert out.returncode == 2 and "unknown model 'not-a-model'" in out.stderr


@pytest.mark.integration  # a subprocess per call
def test_tokenize_matches_the_spec(carbon_model_dir):
    out = run_cli("tokenize", "--model", str(carbon_model_dir), "<dna>ATCGATCG</dna>hello", "--json")
    assert json.loads(out.stdout)["ids"] == [151669, 152105, 154488, 151670, 14990]


@pytest.mark.integration  # subprocesses
def test_scores_at_genome_coordinates_and_a_vcf_from_the_command_line(compact_model_dir, tmp_path):
    from carbon_app.assets import ASSETS
    from carbon_app.core.dna import read_fasta

    hbb = read_fasta(ASSETS / "examples" / "hbb.fa").sequence
    genome = tmp_path / "g.fa"
    genome.write_text(">chr11\n" + hbb + "\n")
    one = run_cli("score", "--model", str(compact_model_dir), "--reference", str(genome), "--variant",
                  "11:1206:A>T", "--window", "120", "--json")
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert data["genomic_variant"] == "11:1206:A>T" and data["contig"] == "chr11"
    assert data["genome_window_start"] <= 1206 <= data["genome_window_end"]
    vcf = tmp_path / "in.vcf"
    vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
                   "chr11\t1206\t.\tA\tT\t.\t.\t.\nchr11\t1207\t.\tC\tG\t.\t.\t.\n")
    batch = run_cli("score-vcf", "--model", str(compact_model_dir), "--reference", str(genome), "--vcf", str(vcf),
                    "--out", str(tmp_path / "out.vcf"), "--tsv", str(tmp_path / "out.tsv"), "--window", "120",
                    "--json")
    assert batch.returncode == 0, batch.stderr
    summary = json.loads(batch.stdout)
    assert summary["records"] == 2 and summary["scored"] == 1 and summary["problems"] == {"REF_mismatch": 1}
    assert "1 not scored: REF_mismatch" in batch.stderr
    rows = table_lines(tmp_path / "out.tsv")
    assert float(rows[1].split("\t")[6]) == pytest.approx(data["delta"], abs=1e-4)
    missing = run_cli("score-vcf", "--model", str(compact_model_dir), "--reference", str(genome), "--vcf",
                      str(tmp_path / "none.vcf"), "--out", str(tmp_path / "x.vcf"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


