"""The command line: JSON results, and one-line errors with a non-zero exit code."""

from __future__ import annotations

import time

import pytest

from carbon_app.app.cli import main


@pytest.mark.parametrize(
    "args, message",
    [  # the engine's own checks are tested where it makes them; here, that they reach a CLI user as one line
        (["generate", "--prompt", "", "--bases", "5"], None),  # an empty prompt is fine
        (["generate", "--prompt", "ACGT", "--bases", "0"], "the number of bases must be at least 1"),
        (["generate", "--prompt", "ACGT", "--bases", "five"], "invalid int"),  # argparse's own
        (["score", "--sequence", "ACGTACGT", "--variant", "9:A>G"], "beyond the 8-base sequence"),
        (["score", "--fasta", "/no/such/file.fa", "--variant", "1:A>G"], "cannot read"),
        (["score", "--sequence", "ACGT", "--record", "x"], "--record only applies with --fasta"),
        (["score", "--sequence", "ACGTACGT", "--variant", "2:C>G", "--frames", "0"], "frames must be"),
        (["scan", "--sequence", "ACGTACGT", "--start", "5", "--end", "9"], "must lie within"),
        (["scan", "--sequence", "ACGTACGT", "--start", "1", "--end", "2", "--delta-radius", "near"],
         "'near' is not a radius"),
        (["scan", "--sequence", "ACGTACGT", "--start", "1", "--end", "2", "--window", "0"],
         "the window (bases) must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(compact_model_dir, args, message, capsys):
    """In-process (the same `main` the module runs), to keep the suite quick."""
    try:
        code = main([*args, "--model", str(compact_model_dir)])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    if message is None:
        assert code == 0, err
        return
    assert code != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], err


def test_in_a_log_a_progress_line_comes_at_least_every_interval_even_while_a_chunk_is_silent(capsys):
    """One report, then a long silent chunk: the clock repeats the count every interval, and the end is said."""
    from carbon_app.app.cli import _ProgressLines

    with _ProgressLines("ALT", every=0.2) as progress:
        progress(512, 2000)
        time.sleep(1.1)  # a chunk that reports nothing
        progress(2000, 2000)
    lines = capsys.readouterr().err.splitlines()
    assert len([line for line in lines if line.startswith("scoring: 512 of 2,000 ALT")]) >= 4
    assert lines[-1].startswith("scoring: 2,000 of 2,000 ALT")


def test_with_an_interval_of_zero_every_report_is_said_and_no_clock_spins(capsys):
    from carbon_app.app.cli import _ProgressLines

    with _ProgressLines("ALT", every=0) as progress:
        assert not progress._clock.is_alive()
        for done in (64, 128, 200):
            progress(done, 200)
    assert [line.split(" ALT")[0] for line in capsys.readouterr().err.splitlines()] == [
        "scoring: 64 of 200", "scoring: 128 of 200", "scoring: 200 of 200"]
