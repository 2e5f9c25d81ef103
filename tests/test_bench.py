"""The performance suite runs end to end on a tiny shape: its contenders agree, its ratios are numbers,
and the memory it reports for 3B + 500M is what the spec's shapes add up to (times are not checked)."""

from __future__ import annotations

import re

import pytest

from carbon_app.tools import bench


def _params(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, head_dim: int, vocab: int = 155_776,
            tied: bool = True) -> int:
    """Llama parameters from the shapes in the Carbon spec (section 1), norms included."""
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    return layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden


@pytest.mark.slow
def test_generation_suite_runs_and_its_contenders_agree(capsys):
    bench.main(["--shape", "tiny", "--suite", "generation", "--repeats", "1", "--tokens", "4", "--prompt-bases", "30"])
    printed = capsys.readouterr().out
    assert "same output, ours (token mode) and stock restricted to DNA: True" in printed
    for label in ("bp-level / token-level time:", "stock generate / ours (token):", "stock generate / ours (bp):",
                  "transformers forward / lean:"):
        median, best = re.search(re.escape(label) + r"\s+([\d.]+) \(([\d.]+)\)", printed).groups()
        assert 0 < float(median) < 100 and 0 < float(best) < 100
    share = float(re.search(r"(\d+)% of the measured copy bandwidth", printed).group(1))
    assert 0 < share < 1000
    assert float(re.search(r"== scoring: \d+ bases in [\d.]+ s, ([\d,]+) bases/s", printed).group(1)
                 .replace(",", "")) > 0
    weights = float(re.search(r"== memory: .* weights ([\d.]+) GiB", printed).group(1))
    three_b = _params(30, 3072, 8448, 32, 4, 96)
    five_hundred_m = _params(28, 1024, 3072, 16, 8, 64)
    heads_fp32 = 4096 * (3072 + 1024) * 2  # the 6-mer rows kept in fp32: 2 more bytes each
    expected = ((three_b + five_hundred_m) * 2 + heads_fp32) / 2**30
    assert abs(weights - expected) < 0.01 * expected, (weights, expected)


@pytest.mark.slow
def test_the_gpu_report_runs_on_a_cpu_and_writes_every_figure(tmp_path, capsys):
    """The GPU suite's code on the tiny shape: the JSON the README's table is made from has every field."""
    import json

    from carbon_app.tools.gpu_report import gpu_report, report_table, speculative_bounds

    out = tmp_path / "gpu" / "latest.json"
    report = gpu_report("cpu", ["tiny"], out, repeats=1, run_tests=False)
    assert json.loads(out.read_text()) == report
    assert {"device", "torch", "date", "copy_gb_s", "shapes"} <= set(report)
    figures = report["shapes"]["tiny"]
    for key in ("decode_tok_s", "decode_gb_s", "bw_fraction", "stock_tok_s", "ours_over_stock", "batched64_bp_s"):
        assert figures[key] > 0, key
    assert "| tiny |" in report_table(report) and "| tiny |" in capsys.readouterr().out
    scoring = report["scoring"]
    assert scoring["batch_snvs"] == 100 and scoring["batch_max_delta_diff"] < 1e-4
    assert scoring["frames_cost"] > 0 and scoring["batch_speedup"] > 0
    bounds = speculative_bounds("cpu", 1, target_shape="tiny", draft_shape="tiny", n_bases=60)
    assert bounds["same_output"] and bounds["always_agreeing_speedup"] > 0 and bounds["useless_draft_ratio"] > 0
