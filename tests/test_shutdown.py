"""Shutdown and crashes keep what was done: a VCF job stopped part-way leaves valid, indexed outputs marked
partial, and resuming them writes each record once, the whole file as one uninterrupted run writes it.

The in-process tests stop the job through `core.stopping` as a signal handler does; the integration tests
send SIGTERM to a real `score-vcf` process and to a launched app in the middle of a job."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pysam
import pytest

from carbon_app.core import stopping
from carbon_app.errors import InputError
from carbon_app.genome import vcf as vcf_module
from carbon_app.genome.reference import Reference
from carbon_app.genome.vcf import score_vcf

from .conftest import REPO, launch_app, table_lines

HBB_FA = REPO / "assets" / "examples" / "hbb.fa"
FAST = {"window": 300, "strand_average": False, "method": "marginal"}  # seconds, not minutes, per chunk


def random_vcf(path: Path, records: int, seed: int = 1) -> Path:
    """`records` single-base substitutions at distinct random positions of the HBB demo genome, sorted,
    with a line that is not a record in the middle (it must be listed once, in order, however the job ran)."""
    name, sequence = _hbb()
    rng = random.Random(seed)
    lines = ["##fileformat=VCFv4.2", "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    for i, pos in enumerate(sorted(rng.sample(range(200, len(sequence) - 200), records))):
        ref = sequence[pos - 1]
        lines.append(f"{name}\t{pos}\tv{i}\t{ref}\t{rng.choice([b for b in 'ACGT' if b != ref])}\t.\t.\t.")
        if i == records // 2:
            lines.append("not\ta\trecord")
    path.write_text("\n".join(lines) + "\n")
    return path


def vcf_job_running(client, source: Path):
    """`source` sent to a launched app's VCF tab (the demo genome, fast settings), once the job runs."""
    from gradio_client import handle_file

    job = client.submit("carbon-demo", "none", "none", "HBB-locus-demo", handle_file(str(source)), 300, False,
                        "marginal", 0, api_name="/score_vcf")
    deadline = time.time() + 60
    while time.time() < deadline and not client.predict(api_name="/models")[2]["requests_running"]:
        time.sleep(0.1)
    assert time.time() < deadline, "the VCF job did not start"
    return job


def _hbb() -> tuple[str, str]:
    lines = HBB_FA.read_text().splitlines()
    return lines[0][1:].split()[0], "".join(lines[1:])


def records_of(path: Path) -> list[tuple]:
    with pysam.VariantFile(str(path)) as vcf:
        return [(r.chrom, r.pos, r.id, r.ref, r.alts, r.info.get("CARBON_DELTA")) for r in vcf]


def partial_line(path: Path) -> str | None:
    with pysam.VariantFile(str(path)) as vcf:
        return next((str(line).strip() for line in vcf.header.records if line.key == "carbon_partial"), None)


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
        assert len(list(indexed.fetch(_hbb()[0]))) == 8
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


def _wait_for(path: Path, text: str, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if path.is_file() and text in path.read_text():
            return
        assert process.poll() is None, path.read_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"'{text}' not seen in {seconds} s: {path.read_text()[-3000:]}")


@pytest.mark.integration
def test_sigterm_to_score_vcf_keeps_a_valid_partial_vcf_and_resume_finishes_it(tmp_path):
    """The command line itself, stopped by a real SIGTERM in the middle of its second chunk."""
    source = random_vcf(tmp_path / "in.vcf", 200)
    command = [sys.executable, "-c", "import sys; import carbon_app.genome.vcf as v; v.CHUNK = 64; "
               "from carbon_app.app.cli import main; sys.exit(main(sys.argv[1:]))",
               "score-vcf", "--model", "carbon-demo", "--reference", str(HBB_FA), "--vcf", str(source),
               "--out", str(tmp_path / "out.vcf.gz"), "--tsv", str(tmp_path / "out.tsv"), "--window", "300",
               "--method", "marginal", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CARBON_PROGRESS_EVERY_S": "0"}
    log = tmp_path / "stderr.txt"
    with open(log, "w") as errors:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
        _wait_for(log, "scoring: 64 of 200", process)  # the first chunk is written, the second being scored
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, log.read_text()
    said = log.read_text()
    assert "SIGTERM: stopping after the current chunk" in said and "score-vcf --resume finishes it" in said
    data = json.loads(out)
    partial = records_of(tmp_path / "out.vcf.gz")
    assert len(partial) in (128, 192) and data["records"] == len(partial) and data["stopped_by"] == "SIGTERM"
    assert partial_line(tmp_path / "out.vcf.gz").startswith(f"##carbon_partial=stopped after record {len(partial)} "
                                                            "of 200")
    assert Path(f"{tmp_path / 'out.vcf.gz'}.tbi").is_file() and no_temp_left(tmp_path)

    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["resumed_records"] == len(partial)
    whole = records_of(tmp_path / "out.vcf.gz")
    assert whole[: len(partial)] == partial and [r[2] for r in whole] == [f"v{i}" for i in range(200)]  # each once
    assert all(r[5] is not None for r in whole) and len(tsv_rows := table_lines(tmp_path / "out.tsv")) \
        == 1 + 200 + 1  # its header, a row per ALT, the line that is not a record
    assert len({row.split("\t")[0] for row in tsv_rows}) == len(tsv_rows)
    assert partial_line(tmp_path / "out.vcf.gz") is None and no_temp_left(tmp_path)


@pytest.mark.integration
def test_sigterm_to_the_app_finishes_the_vcf_chunk_it_is_on_keeps_it_and_logs_it(tmp_path):
    from gradio_client import Client

    source = random_vcf(tmp_path / "in.vcf", 1100)
    out_dir = tmp_path / "app"
    out_dir.mkdir()
    process, url = launch_app(out_dir, CARBON_SHUTDOWN_GRACE_S="60")
    try:
        job = vcf_job_running(Client(url, verbose=False), source)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
        del job
    finally:
        if process.poll() is None:
            process.kill()
    log = (out_dir / "app.log").read_text()
    assert "SIGTERM: closing; 1 running job(s) stop after their current chunk" in log, log[-3000:]
    assert "every job has stopped; the server closes" in log and "the grace of" not in log
    kept = list(out_dir.rglob("*.carbon.vcf.gz"))
    assert len(kept) == 1, log[-3000:]
    assert f"outputs kept in {kept[0].parent}" in log
    assert partial_line(kept[0]).startswith("##carbon_partial=stopped after record 512 of 1100")
    assert len(records_of(kept[0])) == 512 and Path(f"{kept[0]}.tbi").is_file()
