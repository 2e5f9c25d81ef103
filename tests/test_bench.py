"""The performance suite runs end to end on a tiny shape (what it prints is read, not its times)."""

from __future__ import annotations

from carbon_app.tools import bench


def test_generation_suite_runs_and_its_contenders_agree(capsys):
    bench.main(["--shape", "tiny", "--suite", "generation", "--repeats", "1", "--tokens", "4", "--prompt-bases", "30"])
    printed = capsys.readouterr().out
    assert "same output, ours (token mode) and stock restricted to DNA: True" in printed
    for line in ("bp-level / token-level time:", "stock generate / ours (token):", "transformers forward / lean:",
                 "of the measured copy bandwidth", "== scoring:", "== memory: Carbon-3B + Carbon-500M"):
        assert line in printed
