"""One indel, one score, however it is written: every placement of an insertion or deletion along the repeat it
lies in, as POS:REF>ALT and as an HGVS g. name, gets one normal form and one delta.

The equivalent writings are found by brute force (every position where deleting, or inserting, the same
number of bases gives the same alternate sequence), not by the code under test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carbon_app.core.dna import read_fasta
from carbon_app.errors import InputError
from carbon_app.inference.score import score_variant
from tests.conftest import REPO
from tests.indel_writings import writings

HBB = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence
DNA = st.text("ACGT", min_size=12, max_size=30)


@settings(deadline=None)  # each example scores every writing (up to some 30)
@given(left=DNA, right=DNA, unit=st.text("ACGT", min_size=1, max_size=3), copies=st.integers(2, 7),
       change=st.integers(-2, 2).filter(bool))
def test_every_writing_of_an_indel_in_a_repeat_gets_one_normal_form_and_one_delta(compact, left, right, unit, copies,
                                                                                     change):
    sequence = left + unit * copies + right
    at = len(left)  # the change: `change` copies of the unit deleted from or inserted at the run's start
    alternate = sequence[:at] + unit * change + sequence[at:] if change > 0 else sequence[:at] + sequence[
        at - change * len(unit):]
    every = writings(sequence, alternate)
    assert len(every) >= 2
    # a window that holds the whole sequence: a repeat longer than the window is refused, naming both
    scored = [score_variant(compact, sequence, written, window=100, frames=1, strand_average=True, delta_radius=3)
              for written in every]
    assert len({str(s.variant) for s in scored}) == 1, [(w, str(s.variant)) for w, s in zip(every, scored, strict=True)]
    deltas = [s.delta for s in scored]
    assert max(deltas) - min(deltas) < 1e-4, list(zip(every, deltas, strict=True))
    assert all(s.variant.label.startswith(w) for w, s in zip(every, scored, strict=True))


@pytest.mark.parametrize("written, normal", [
    ("1843:TT>T", "1835:CT>C"), ("g.1844del", "1835:CT>C"), ("1843:T>TT", "1835:C>CT"),
    ("1206:AG>A", "1206:AG>A"), ("1206:AGG>AG", "1206:AG>A"), ("1206:AG>TG", "1206:A>T"), ("1205:GAG>GTG", "1206:A>T"),
])
def test_the_normal_form_is_bcftools_norms(demo, written, normal):
    assert str(score_variant(demo, HBB, written, window=300).variant) == normal


def test_a_repeat_longer_than_the_window_is_refused_naming_both(compact):
    sequence = "ACGTTGCA" + "CA" * 20 + "GGTACCAT"  # (CA)21: the prompt ends in one copy too
    with pytest.raises(InputError, match="^the 42-base repeat the change can slide along does not fit the model's "
                                         "30-base window$"):
        score_variant(compact, sequence, "10:ACA>A", window=30, frames=1)


