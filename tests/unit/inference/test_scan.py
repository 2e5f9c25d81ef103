"""Saturation mutagenesis: the shared-prefix scan equals scoring each substitution separately."""

from __future__ import annotations

import numpy as np
import pytest

from carbon_app.errors import InputError
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.score import frame_windows, score_sequence, score_variant
from tests.conftest import REPO, random_dna

SEQ = random_dna(150, seed=5)


@pytest.mark.parametrize("method", ["marginal", "chain"])
def test_scan_equals_separate_scoring(compact, method):
    scan = scan_substitutions(compact, SEQ, 40, 63, window=100, method=method, frames=1)
    rows = scan.rows()
    assert len(rows) == 3 * 24
    for pos, ref, alt, delta in rows[::5]:  # each substitution in its own centred window
        lo, hi, _, _ = frame_windows(len(SEQ), pos - 1, 1, 100, 1)
        window = SEQ[lo:hi]
        assert hi - lo == 99 and window[pos - 1 - lo] == ref
        alternate = window[: pos - 1 - lo] + alt + window[pos - lo :]
        reference = score_sequence(compact, window, method=method).total
        assert delta == pytest.approx(score_sequence(compact, alternate, method=method).total - reference, abs=1e-4)
    assert np.isnan(scan.deltas[np.arange(24), ["ATCG".index(b) for b in SEQ[39:63]]]).all()


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # the reference bases: NaN in every frame
def test_scan_gives_the_variant_tabs_delta_whatever_its_region(compact):
    fractions = []
    scan = scan_substitutions(compact, SEQ, 40, 63, window=100, progress=fractions.append)
    assert scan.frame_deltas.shape == (6, 24, 4) and scan.frame_bases == 100
    np.testing.assert_allclose(scan.deltas, np.nanmean(scan.frame_deltas, axis=0))
    assert fractions == sorted(fractions) and fractions[0] == 0 and fractions[-1] > 0.9
    for pos, ref, alt, delta in scan.rows()[::7]:
        assert delta == pytest.approx(score_variant(compact, SEQ, f"{pos}:{ref}>{alt}", window=100).delta,
                                      abs=1e-4)
    narrow = scan_substitutions(compact, SEQ, 50, 50, window=100)
    np.testing.assert_allclose(narrow.deltas[0], scan.deltas[50 - 40], atol=1e-4)
    edge = scan_substitutions(compact, SEQ, 1, 3, window=100)  # fewer frames hold a variant at the start
    assert edge.rows()[0][3] == pytest.approx(score_variant(compact, SEQ, f"1:{SEQ[0]}>{edge.rows()[0][2]}",
                                                            window=100).delta, abs=1e-4)


def test_scan_skips_ambiguous_positions_and_writes_tsv(compact):
    seq = SEQ[:30] + "N" + SEQ[31:60]
    scan = scan_substitutions(compact, seq, 29, 33)
    assert [row[0] for row in scan.rows()] == [29] * 3 + [30] * 3 + [32] * 3 + [33] * 3
    made_by, tsv = [], []
    for line in scan.to_tsv().splitlines():
        (made_by if line.startswith("## ") else tsv).append(line)
    assert tsv[0] == "position\tref\talt\tdelta_loglik" and len(tsv) == 13
    # what made the table comes first: the app, the model and its weights' checksum, the setup as used
    assert made_by[0].startswith("## made by Carbon Studio ") and f"model={compact.name} weights=sha256:" in made_by[1]
    assert made_by[2] == f"## scoring {scan.spec.header()}" and made_by[3] == "## the model's own scoring setup"
    assert tsv[1].startswith(f"29\t{seq[28]}\t")


@pytest.mark.parametrize("method", ["marginal", "chain"])
def test_substitutions_beside_ambiguous_bases_score_as_the_variant_tab_scores_them(compact, method):
    """A 6-mer holding an N is <oov>, with or without a substitution among its other bases: the scan reads the
    tokens after it as a separate scoring of the alternate window does (every frame, windows of 61 bases)."""
    seq = SEQ[:40] + "NR" + SEQ[42:90] + "Y" + SEQ[91:]
    scan = scan_substitutions(compact, seq, 34, 48, window=61, method=method)
    assert len(scan.rows()) == 3 * 13
    for pos, ref, alt, delta in scan.rows():
        assert delta == pytest.approx(score_variant(compact, seq, f"{pos}:{ref}>{alt}", window=61,
                                                    method=method).delta, abs=1e-4), (pos, alt)


@pytest.mark.parametrize("start, end, message", [(0, 5, "at least 1"), (10, 5, "within"), (5, 500, "within"),
                                                 (1.5, 3, "whole number")])
def test_bad_regions(compact, start, end, message):
    with pytest.raises(InputError, match=message):
        scan_substitutions(compact, SEQ, start, end)


def test_a_stop_asked_during_a_wide_ranking_waits_for_one_batch_of_passes_at_most(demo):
    """A cancel, a closed tab or a shutdown's second signal stops a scan (a context ranking is one) at its next
    batch of substitutions' passes, not at the end of the window group it is in: no more than one forward
    pass of the model runs after the stop is asked."""
    import threading

    from carbon_app.core.dna import read_fasta
    from carbon_app.core.stopping import Stopped, stoppable

    sequence = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence
    asked, after = threading.Event(), []
    forward = demo.hidden_states

    def counted(*args, **kwargs):
        if asked.is_set():
            after.append(1)
        out = forward(*args, **kwargs)
        if not asked.is_set() and len(after) == 0 and counted.calls == 3:  # asked while the third pass runs
            asked.set()
        counted.calls += 1
        return out

    counted.calls = 0
    demo.hidden_states = counted
    try:
        with stoppable(asked), pytest.raises(Stopped):
            scan_substitutions(demo, sequence, 700, 1700, window=1200, method="chain")
    finally:
        del demo.hidden_states
    assert counted.calls >= 4 and len(after) <= 1, (counted.calls, len(after))
