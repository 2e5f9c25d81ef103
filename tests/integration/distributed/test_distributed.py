"""VCF batches and region scans on a real Ray cluster started on loopback by the tests (two CPU workers):
the same records, order and deltas as one process, a worker killed mid-job lost nothing."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from carbon_app.distributed.ray_jobs import RayScorer  # noqa: E402
from carbon_app.genome import vcf as vcf_module  # noqa: E402
from carbon_app.genome.reference import Reference  # noqa: E402
from carbon_app.genome.regions import scan_regions  # noqa: E402
from carbon_app.genome.vcf import score_vcf  # noqa: E402
from tests.conftest import REPO, random_dna, table_lines  # noqa: E402

OPTIONS = dict(window=120, strand_average=False, species=None, region=None, method="marginal", frames=2, context=0)
CONTIGS = {name: random_dna(900, seed) for seed, name in enumerate(["chr1", "chr2", "chrX"])}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def genome(tmp_path_factory):
    path = tmp_path_factory.mktemp("genome") / "genome.fa"
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in CONTIGS.items()))
    return Reference(path, "toy")


def _vcf(path, n: int = 90) -> None:
    rng = random.Random(4)
    lines = ["##fileformat=VCFv4.2", "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    for i in range(n):
        contig = rng.choice(list(CONTIGS))
        pos = rng.randint(1, 900)
        ref = CONTIGS[contig][pos - 1]
        alt = rng.choice([b for b in "ACGT" if b != ref])
        lines.append(f"{contig}\t{pos}\trs{i}\t{ref if i % 17 else 'N'}\t{alt}\t.\t.\t.")
    lines.insert(30, "chr1\tnot-a-position\t.\tA\tG\t.\t.\t.")
    lines.append("chrUn\t5\t.\tA\tG\t.\t.\t.")
    path.write_text("\n".join(lines) + "\n")


def _body(path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("##")]


def _same(lines: list[str], expected: list[str]) -> None:
    """The same records, fields and words, in the same order, and the same numbers to 1e-4: a Ray worker
    runs its model on one thread, this process on two, and float32 sums in another order move a delta by
    about 1e-7 (enough to change its sixth decimal)."""
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected, strict=True):
        got, exp = re.split(r"([\t;=,])", line), re.split(r"([\t;=,])", want)
        assert len(got) == len(exp), (line, want)
        for a, b in zip(got, exp, strict=True):
            try:
                assert float(a) == pytest.approx(float(b), abs=1e-4), (line, want)
            except ValueError:
                assert a == b, (line, want)


def test_a_vcf_on_two_ray_workers_equals_one_process(cluster, compact, compact_model_dir, genome, tmp_path,
                                                     monkeypatch):
    monkeypatch.setattr(vcf_module, "CHUNK", 10)  # many chunks, so the workers interleave
    _vcf(tmp_path / "in.vcf")
    alone = score_vcf(compact, genome, tmp_path / "in.vcf", tmp_path / "one.vcf", tmp_path / "one.tsv", **OPTIONS)
    scorer = RayScorer("local", 2, str(compact_model_dir), genome.path, genome.name, "cpu", OPTIONS)
    seen = []
    spread = score_vcf(None, genome, tmp_path / "in.vcf", tmp_path / "ray.vcf", tmp_path / "ray.tsv",
                       scorer=scorer, progress=lambda done, total: seen.append(done), **OPTIONS)  # no model here
    scorer.close()
    _same(_body(tmp_path / "ray.vcf"), _body(tmp_path / "one.vcf"))
    _same((tmp_path / "ray.tsv").read_text().splitlines(), (tmp_path / "one.tsv").read_text().splitlines())
    assert (spread.records, spread.scored, spread.problems) == (alone.records, alone.scored, alone.problems)
    assert spread.malformed == alone.malformed and seen[-1] == spread.alts


def test_a_worker_killed_mid_job_loses_nothing_and_writes_nothing_twice(cluster, compact, compact_model_dir, genome,
                                                                        tmp_path, monkeypatch):
    monkeypatch.setattr(vcf_module, "CHUNK", 8)
    _vcf(tmp_path / "in.vcf", n=120)
    score_vcf(compact, genome, tmp_path / "in.vcf", tmp_path / "one.vcf", **OPTIONS)
    scorer = RayScorer("local", 2, str(compact_model_dir), genome.path, genome.name, "cpu", OPTIONS)
    victim = scorer.worker_pids()[0]
    killed = []

    def kill_once(done: int, total: int) -> None:
        if done >= 16 and not killed:  # after the first chunks are written, with more in flight
            os.kill(victim, signal.SIGKILL)
            killed.append(done)

    score_vcf(compact, genome, tmp_path / "in.vcf", tmp_path / "ray.vcf", scorer=scorer, progress=kill_once,
              **OPTIONS)
    assert killed and victim not in scorer.worker_pids()  # it died and Ray brought up another
    scorer.close()
    _same(_body(tmp_path / "ray.vcf"), _body(tmp_path / "one.vcf"))


def test_region_scans_on_ray_equal_one_process_and_bad_lines_are_named(cluster, compact, compact_model_dir, genome,
                                                                       tmp_path):
    bed = tmp_path / "regions.bed"
    bed.write_text("track name=test\nchr1\t100\t112\tfirst\nchrUn\t5\t9\tnowhere\nchr2\t300\tx\tbroken\n"
                   "chrX\t850\t860\tlast\n")
    options = {k: v for k, v in OPTIONS.items() if k != "context"}
    one = scan_regions(compact, genome, bed, tmp_path / "one.tsv", **options)
    scorer = RayScorer("local", 2, str(compact_model_dir), genome.path, genome.name, "cpu", options)
    spread = scan_regions(None, genome, bed, tmp_path / "ray.tsv", scorer=scorer, **options)
    scorer.close()
    _same((tmp_path / "ray.tsv").read_text().splitlines(), (tmp_path / "one.tsv").read_text().splitlines())
    assert one.rows == spread.rows == 3 * (12 + 10) and [line for line, _ in spread.problems] == [3, 4]
    rows = table_lines(tmp_path / "ray.tsv")
    assert rows[1].startswith("first\tchr1\t101\t") and any("line 3: contig 'chrUn'" in r for r in rows)


def test_an_unreachable_cluster_is_named_at_once(tmp_path):
    out = subprocess.run([sys.executable, "-m", "carbon_app", "score-vcf", "--reference",
                          str(REPO / "assets" / "examples" / "hbb.fa"), "--vcf",
                          str(REPO / "assets" / "examples" / "hbb_variants.vcf"), "--out", str(tmp_path / "x.vcf"),
                          "--ray", "127.0.0.1:1"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 2 and "cannot reach the Ray cluster at '127.0.0.1:1'" in out.stderr


def test_a_gpu_job_on_a_cluster_without_gpus_is_refused_before_any_work(cluster, compact_model_dir, genome):
    from carbon_app.errors import InputError

    with pytest.raises(InputError, match="the Ray cluster has no GPU for a worker to hold the model"):
        RayScorer("local", 2, str(compact_model_dir), genome.path, genome.name, "cuda", OPTIONS)
