"""Shutdown and crashes keep what was done: a VCF job stopped part-way leaves valid, indexed outputs marked
partial, and resuming them writes each record once, the whole file as one uninterrupted run writes it.

The in-process tests stop the job through `core.stopping` as a signal handler does; the integration tests
send SIGTERM to a real `score-vcf` process and to a launched app in the middle of a job."""

from __future__ import annotations

import threading
from pathlib import Path

import pysam
import pytest

from carbon_app.core import stopping
from carbon_app.errors import InputError
from carbon_app.genome import vcf as vcf_module
from carbon_app.genome.reference import Reference
from carbon_app.genome.vcf import score_vcf
from tests.conftest import table_lines
from tests.vcf_jobs import HBB_FA, demo_genome, partial_line, random_vcf, records_of

FAST = {"window": 300, "strand_average": False, "method": "marginal"}  # seconds, not minutes, per chunk


def no_temp_left(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".carbon-")]


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(vcf_module, "CHUNK", 4)
    yield
    stopping.carry_on()


def test_a_shutdown_keeps_the_finished_chunks_and_resuming_writes_each_record_once(demo, tmp_path, small_chunks):
    reference = Reference(HBB_FA)
    source = random_vcf(tmp_path / "in.vcf", 14)
    whole = score_vcf(demo, reference, source, tmp_path / "whole.vcf.gz", tmp_path / "whole.tsv", **FAST)

    def shut_down_during_the_second_chunk(done, total):
        if done > 4:
            stopping.shut_down("SIGTERM")

    out, tsv = tmp_path / "out.vcf.gz", tmp_path / "out.tsv"
    stopped = score_vcf(demo, reference, source, out, tsv, progress=shut_down_during_the_second_chunk, **FAST)
    assert stopped.partial is not None and stopped.partial.records_done == 8  # the chunk it was on, finished
    assert stopped.records == 8 and "stopped after 8 of 14 records (shutdown on SIGTERM)" in " ".join(stopped.lines())
    assert partial_line(out).startswith("##carbon_partial=stopped after record 8 of 14 (input line 10)")
    assert records_of(out) == records_of(tmp_path / "whole.vcf.gz")[:8]
    with pysam.TabixFile(str(out)) as indexed:  # closed and indexed: a region can be read from it
        assert len(list(indexed.fetch(demo_genome()[0]))) == 8
    rows = table_lines(tsv)
    assert len(rows) == 9 and "malformed" not in tsv.read_text()  # the line that is not a record comes later
    assert no_temp_left(tmp_path)

    stopping.carry_on()
    asked = []
    resumed = score_vcf(demo, reference, source, out, tsv, progress=lambda done, total: asked.append(done),
                        resume=True, **FAST)
    assert resumed.partial is None and resumed.resumed == 8 and asked[0] >= 8
    assert partial_line(out) is None and records_of(out) == records_of(tmp_path / "whole.vcf.gz")
    assert tsv.read_text() == (tmp_path / "whole.tsv").read_text()  # the malformed line listed once, in order
    assert (resumed.records, resumed.scored, resumed.malformed) == (whole.records, whole.scored, whole.malformed)
    assert Path(f"{out}.tbi").is_file() and no_temp_left(tmp_path)

    again = score_vcf(demo, reference, source, out, tsv, resume=True, **FAST)  # complete: kept, nothing scored
    assert again.resumed == 14 and records_of(out) == records_of(tmp_path / "whole.vcf.gz")


def test_a_resume_is_refused_for_other_settings_or_another_vcf_and_the_partial_output_stays(demo, tmp_path,
                                                                                         small_chunks):
    reference = Reference(HBB_FA)
    source = random_vcf(tmp_path / "in.vcf", 10)
    out = tmp_path / "out.vcf"
    score_vcf(demo, reference, source, out, progress=lambda done, total: stopping.shut_down("SIGTERM"), **FAST)
    stopping.carry_on()
    kept = out.read_text()
    assert "##carbon_partial=stopped after record 4 of 10" in kept
    with pytest.raises(InputError, match=r"was scored with .*window=300.*, not .*window=200"):
        score_vcf(demo, reference, source, out, resume=True, **{**FAST, "window": 200})
    with pytest.raises(InputError, match="stopped in a VCF of 10 records; this one has 12"):
        score_vcf(demo, reference, random_vcf(tmp_path / "other.vcf", 12), out, resume=True, **FAST)
    with pytest.raises(InputError, match=r"does not hold the input's record of line 3 .*another VCF"):
        score_vcf(demo, reference, random_vcf(tmp_path / "moved.vcf", 10, seed=2), out, resume=True, **FAST)
    with pytest.raises(InputError, match="table 'out.tsv' of the run being resumed is missing"):
        score_vcf(demo, reference, source, out, tmp_path / "out.tsv", resume=True, **FAST)
    assert out.read_text() == kept and no_temp_left(tmp_path)  # a refused resume leaves it as it was


def test_a_cancel_or_an_error_while_scoring_still_leaves_a_valid_partial_output(demo, tmp_path, small_chunks,
                                                                              monkeypatch):
    reference = Reference(HBB_FA)
    source = random_vcf(tmp_path / "in.vcf", 10)
    asked = threading.Event()
    with stopping.stoppable(asked), pytest.raises(stopping.Stopped) as stop:
        score_vcf(demo, reference, source, tmp_path / "cancelled.vcf.gz", progress=lambda d, t: asked.set(), **FAST)
    assert stop.value.cancelled
    kept = len(records_of(tmp_path / "cancelled.vcf.gz"))
    assert kept < 10 and partial_line(tmp_path / "cancelled.vcf.gz").startswith(
        f"##carbon_partial=stopped after record {kept} of 10 (input line {2 + kept if kept else 0}): cancelled")

    real = vcf_module.score_batch
    calls = []

    def fails_on_the_second_chunk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("device lost")
        return real(*args, **kwargs)

    monkeypatch.setattr(vcf_module, "score_batch", fails_on_the_second_chunk)
    with pytest.raises(RuntimeError, match="device lost"):
        score_vcf(demo, reference, source, tmp_path / "failed.vcf.gz", **FAST)
    assert "(input line 6): an error while scoring: RuntimeError;" in partial_line(tmp_path / "failed.vcf.gz")
    assert len(records_of(tmp_path / "failed.vcf.gz")) == 4 and no_temp_left(tmp_path)


# -- real signals -------------------------------------------------------------------------------------------


