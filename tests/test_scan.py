"""Saturation mutagenesis: the shared-prefix scan equals scoring each substitution separately."""

from __future__ import annotations

import random

import numpy as np
import pytest

from carbon_app.errors import InputError
from carbon_app.scan import scan_substitutions
from carbon_app.score import score_sequence

SEQ = "".join(random.Random(5).choice("ACGT") for _ in range(150))


@pytest.mark.parametrize("method", ["marginal", "chain"])
def test_scan_equals_separate_scoring(compact, method):
    scan = scan_substitutions(compact, SEQ, 40, 63, window=100, method=method)
    window = SEQ[scan.window_start - 1 : scan.window_end]
    assert scan.window_end - scan.window_start + 1 == 100 and scan.window_start <= 40 and scan.window_end >= 63
    reference = score_sequence(compact, window, method=method).total
    assert scan.ll_ref == pytest.approx(reference, abs=1e-4)
    rows = scan.rows()
    assert len(rows) == 3 * 24
    for pos, ref, alt, delta in rows[::5]:
        offset = pos - scan.window_start
        assert window[offset] == ref
        alternate = window[:offset] + alt + window[offset + 1 :]
        assert delta == pytest.approx(score_sequence(compact, alternate, method=method).total - reference, abs=1e-4)
    assert np.isnan(scan.deltas[np.arange(24), ["ATCG".index(b) for b in SEQ[39:63]]]).all()


def test_scan_skips_ambiguous_positions_and_writes_tsv(compact):
    seq = SEQ[:30] + "N" + SEQ[31:60]
    scan = scan_substitutions(compact, seq, 29, 33)
    assert [row[0] for row in scan.rows()] == [29] * 3 + [30] * 3 + [32] * 3 + [33] * 3
    tsv = scan.to_tsv().splitlines()
    assert tsv[0] == "position\tref\talt\tdelta_loglik" and len(tsv) == 13
    assert tsv[1].startswith(f"29\t{seq[28]}\t")


@pytest.mark.parametrize("start, end, message", [(0, 5, "within"), (10, 5, "within"), (5, 500, "within"),
                                                 (1.5, 3, "whole number")])
def test_bad_regions(compact, start, end, message):
    with pytest.raises(InputError, match=message):
        scan_substitutions(compact, SEQ, start, end)
