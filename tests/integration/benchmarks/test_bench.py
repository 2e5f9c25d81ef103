"""The performance suite runs end to end on a tiny shape: its contenders agree, its ratios are numbers,
and the memory it reports for 3B + 500M is what the spec's shapes add up to (times are not checked)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from benchmarks import bench
from tests.conftest import REPO


def _params(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, head_dim: int, vocab: int = 155_776,
            tied: bool = True) -> int:
    """Llama parameters from the shapes in the Carbon spec (section 1), norms included."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    return layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden


def test_generation_suite_runs_and_its_contenders_agree(capsys):
    bench.main(["--shape", "tiny", "--suite", "generation", "--repeats", "1", "--tokens", "4", "--prompt-bases", "30"])
    printed = capsys.readouterr().out
    assert "same output, ours (token mode) and stock restricted to DNA: True" in printed
    for label in ("bp-level / token-level time:", "stock generate / ours (token):", "stock generate / ours (bp):",
                  "transformers forward / ours:"):
        median, best = re.search(re.escape(label) + r"\s+([\d.]+) \(([\d.]+)\)", printed).groups()
        assert 0 < float(median) < 100 and 0 < float(best) < 100
    share = float(re.search(r"([\d.]+)% of the measured copy bandwidth", printed).group(1))
    assert 0 < share < 1000
    assert float(re.search(r"== scoring: \d+ bases in [\d.]+ s, ([\d,]+) bases/s", printed).group(1)
                 .replace(",", "")) > 0
    weights = float(re.search(r"== memory: .* weights ([\d.]+) GiB", printed).group(1))
    three_b = _params(30, 3072, 8448, 32, 4, 96)
    five_hundred_m = _params(28, 1024, 3072, 16, 8, 64)
    heads_fp32 = 4096 * (3072 + 1024) * 2  # the 6-mer rows kept in fp32: 2 more bytes each
    expected = ((three_b + five_hundred_m) * 2 + heads_fp32) / 2**30
    assert abs(weights - expected) < 0.01 * expected, (weights, expected)


def test_app_suite_asks_the_running_app_and_the_engine_the_same_question(capsys):
    pytest.importorskip("gradio_client")
    figures = bench.app_suite(repeats=1, context=1)
    printed = capsys.readouterr().out
    script, app, ratio = re.search(r"script\s+([\d.]+) s, app\s+([\d.]+) s: the app takes ([\d.]+)x", printed).groups()
    assert float(script) > 0 and float(app) > 0 and float(ratio) > 0
    assert "(same ranking: True)" in printed
    # what it records is what it printed
    assert f"{figures['app_over_script']:.2f}" == ratio and figures["same_ranking"] is True


def test_the_gpu_report_runs_on_a_cpu_and_writes_every_figure(tmp_path, capsys, monkeypatch):
    """The GPU suite's code on the tiny shape: the JSON the README's table is made from has every field,
    and a run that stops partway has already written what it measured."""
    import json

    from benchmarks import gpu_report as module
    from benchmarks.gpu_report import gpu_report, report_table, speculative_bounds

    out = tmp_path / "gpu" / "latest.json"
    report = gpu_report("cpu", ["tiny"], out, repeats=1, run_tests=False)
    assert json.loads(out.read_text()) == report and report["complete"]
    assert {"device", "torch", "date", "copy_gb_s", "shapes"} <= set(report)
    assert set(report["stage_seconds"]) == {"copy bandwidth", "tiny", "scoring", "loading"}
    figures = report["shapes"]["tiny"]
    for key in ("decode_tok_s", "decode_gb_s", "bw_fraction", "stock_tok_s", "ours_over_stock", "batched64_bp_s",
                "decode_step_ms", "forward_step_ms", "bandwidth_bound_ms", "ours_over_stock_same_kernels"):
        assert figures[key] > 0, key
    assert figures["forward_step_64"]["rows"] == 64
    assert figures["forward_step_64"]["written_ms"] > 0 and figures["forward_step_64"]["fused_ms"] > 0
    assert "| tiny |" in report_table(report) and "| tiny |" in capsys.readouterr().out
    assert "over 64 samples, attention written out / through scaled-dot-product attention: tiny" in report_table(report)
    scoring = report["scoring"]
    assert scoring["batch_snvs"] == 100 and scoring["batch_max_delta_diff"] < 1e-4
    assert scoring["frames_cost"] > 0 and scoring["batch_speedup"] > 0
    bounds = speculative_bounds("cpu", 1, target_shape="tiny", draft_shape="tiny", n_bases=60)
    assert bounds["same_output"] and bounds["always_agreeing_speedup"] > 0 and bounds["useless_draft_ratio"] > 0
    assert bounds["always_agreeing_accepted"] == 1.0 and bounds["self_draft_speedup"] > 0

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access")

    # the runs below are about how a failed or cut-short stage is recorded: the stages measured above give the
    # same figures again, not measured twice more
    monkeypatch.setattr(module, "measure_shape", lambda *args, **kwargs: figures)
    monkeypatch.setattr(module, "loading_report", lambda *args, **kwargs: report["loading_8B"])
    monkeypatch.setattr(module, "scoring_ratios", broken)  # one stage fails: recorded, the others still run
    report = gpu_report("cpu", ["tiny"], out, repeats=1, run_tests=False)
    assert report["scoring"] == {"error": "RuntimeError: CUDA error: an illegal memory access"}
    assert report["failed_stages"] == ["scoring"] and "loading" in report["stage_seconds"]
    assert "Failed: scoring" in report_table(report) and "| tiny |" in report_table(report)

    def cut_short(*args, **kwargs):
        raise KeyboardInterrupt  # as when the time slot ends

    monkeypatch.setattr(module, "scoring_ratios", cut_short)
    with pytest.raises(KeyboardInterrupt):
        gpu_report("cpu", ["tiny"], out, repeats=1, run_tests=False)
    kept = json.loads(out.read_text())
    assert not kept["complete"] and kept["shapes"]["tiny"]["decode_tok_s"] > 0 and "scoring" not in kept


_WITHOUT_APP_LIBRARIES = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"gradio", "gradio_client", "plotly", "dnachisel", "logomaker", "matplotlib",
                                  "ray", "pysam"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)  # as for a package not installed
sys.meta_path.insert(0, Absent())
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="counts the GPU tests as skipped, as on a host without CUDA")
def test_the_gpu_report_runs_every_gpu_test_on_a_host_without_the_app_libraries(tmp_path, monkeypatch):
    """The report's test run collects only the files holding GPU tests, so a GPU host without the app's own
    libraries (gradio, pysam, ...: a child interpreter here that cannot import them) still runs them all
    (here, without CUDA, all skip); collecting the whole suite there stops at its first import error."""
    from benchmarks.gpu_report import gpu_tests

    repo = REPO
    whole = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "tests"], cwd=repo,
                           capture_output=True, text=True).stdout
    every_gpu_test = int(re.search(r"(\d+)/\d+ tests collected", whole).group(1))  # all libraries present
    assert every_gpu_test >= 10
    (tmp_path / "sitecustomize.py").write_text(_WITHOUT_APP_LIBRARIES)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    log = tmp_path / "latest-tests.log"
    assert gpu_tests(repo, log) == {"passed": 0, "failed": 0, "skipped": every_gpu_test}
    assert f"{every_gpu_test} skipped" in log.read_text()  # pytest's own account comes back with the report


_MEMORY_CHILD = """
import mmap, sys
from benchmarks.gpu_report import peak_anonymous_rss
path, size = sys.argv[1], int(sys.argv[2])

def read_mapped():
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return sum(mapped[i] for i in range(0, size, 4096))  # touch every page

def copy_to_host():
    with open(path, "rb") as f:
        return len(bytearray(f.read()))

_, baseline = peak_anonymous_rss(lambda: None)
print(peak_anonymous_rss(read_mapped)[1] - baseline, peak_anonymous_rss(copy_to_host)[1] - baseline)
"""


@pytest.mark.integration  # child processes that load and copy weights
def test_the_anonymous_memory_peak_counts_a_host_copy_but_not_a_memory_mapped_file(tmp_path):
    """What the loading figure rests on: reading a memory-mapped file (as safetensors loads a checkpoint)
    raises RSS but not anonymous memory; a private copy in host memory raises both. In a fresh process, as
    the loading figure is taken: one that has freed memory before reuses those resident pages."""
    size = 256 * 2**20
    path = tmp_path / "weights.bin"
    with open(path, "wb") as f:
        f.truncate(size)
    child = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(path), str(size)], capture_output=True,
                           text=True, cwd=REPO, check=True)
    mapped, copied = (int(x) for x in child.stdout.split())
    assert mapped < 64 * 2**20 and copied > size


