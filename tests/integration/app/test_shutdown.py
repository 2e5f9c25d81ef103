"""Shutdown and crashes keep what was done: a VCF job stopped part-way leaves valid, indexed outputs marked
partial, and resuming them writes each record once, the whole file as one uninterrupted run writes it.

The in-process tests stop the job through `core.stopping` as a signal handler does; the integration tests
send SIGTERM to a real `score-vcf` process and to a launched app in the middle of a job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.soak import visitor
from tests.conftest import REPO, launch_app, table_lines
from tests.vcf_jobs import HBB_FA, partial_line, random_vcf, records_of, vcf_job_running


def no_temp_left(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".carbon-")]


# -- real signals -------------------------------------------------------------------------------------------


def _wait_for(path: Path, text: str, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if path.is_file() and text in path.read_text():
            return
        assert process.poll() is None, path.read_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"'{text}' not seen in {seconds} s: {path.read_text()[-3000:]}")


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


def _outcome(job) -> str:
    """What a job sent to a closing server came back with."""
    import httpx
    from gradio_client.exceptions import AppError
    from gradio_client.utils import QueueError

    try:
        job.result(timeout=120)
        return "served"
    except AppError as exc:
        return "told" if str(exc).startswith("the server is shutting down (SIGTERM): send this design") else str(exc)
    except QueueError:
        return "refused at the door"  # the last moment before the server closes: nothing left queued
    except httpx.TransportError:  # refused, or cut off, by the server's closing as by any server that goes away
        return "closed"
    except Exception as exc:  # noqa: BLE001 - what else a client meets is the failure this test looks for
        return f"{type(exc).__name__}: {exc}"


def test_sigterm_to_the_app_finishes_the_vcf_chunk_it_is_on_keeps_it_and_logs_it(tmp_path):
    """...and every job sent meanwhile, queued before the signal or sent until the server has closed, is told
    it is shutting down (or refused at its door in the last moment), never left to a bare CancelledError."""
    from gradio_client import Client

    source = random_vcf(tmp_path / "in.vcf", 1100)
    out_dir = tmp_path / "app"
    out_dir.mkdir()
    process, url = launch_app(out_dir, CARBON_SHUTDOWN_GRACE_S="60")
    quick = ("carbon-demo", "none", "none", "ATGGTGCA", None, 12, "", "bp", 0, 0, 1.0, 0, 1, False)
    sent = []
    try:
        job = vcf_job_running(Client(url, verbose=False), source)
        sent += [Client(url, verbose=False, headers=visitor(i)).submit(*quick, api_name="/generate")
                 for i in range(3)]  # queued behind the VCF
        process.send_signal(signal.SIGTERM)
        for i in range(3, 400):  # one more every 0.1 s until the server has closed
            try:
                sent.append(Client(url, verbose=False, headers=visitor(i)).submit(*quick, api_name="/generate"))
            except Exception:  # noqa: BLE001 - the client could not reach it: the server has closed
                break
            time.sleep(0.1)
        process.wait(timeout=120)
        del job
    finally:
        if process.poll() is None:
            process.kill()
    outcomes = [_outcome(job) for job in sent]
    assert set(outcomes) <= {"told", "refused at the door", "closed"} and outcomes[:3] == ["told"] * 3, outcomes
    log = (out_dir / "app.log").read_text()
    assert "SIGTERM: closing; 1 running job(s) stop after their current chunk" in log, log[-3000:]
    assert "every job has stopped; the server closes" in log and "the time for a chunk is over" not in log
    kept = list(out_dir.rglob("*.carbon.vcf.gz"))
    assert len(kept) == 1, log[-3000:]
    assert f"outputs kept in {kept[0].parent}" in log
    assert partial_line(kept[0]).startswith("##carbon_partial=stopped after record 512 of 1100")
    assert len(records_of(kept[0])) == 512 and Path(f"{kept[0]}.tbi").is_file()
