"""Any text a user can type is either accepted or refused with an InputError, never anything else."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from carbon_app.app.service import Service, variant_from_sequences
from carbon_app.assets import ASSETS
from carbon_app.core.coding import CodingSequence
from carbon_app.core.dna import clean_sequence, mask_from_template, read_fasta
from carbon_app.errors import InputError
from carbon_app.inference.score import Variant

typed = st.text(alphabet=st.characters(codec="utf-8"), max_size=80) | st.text(alphabet="ACGTUNacgtu>\r\n \t0123456789:",
                                                                              max_size=80)


def _accepts_or_explains(fn, text):
    try:
        fn(text)
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc)


@given(typed)
def test_sequences_masks_and_variants(text):
    _accepts_or_explains(clean_sequence, text)
    _accepts_or_explains(mask_from_template, text)
    _accepts_or_explains(Variant.parse, text)
    _accepts_or_explains(lambda t: Service.sequence(t, None, "sequence"), text)


HBB = read_fasta(ASSETS / "examples" / "hbb.fa").sequence
HBB_CDS = CodingSequence.parse(json.loads((ASSETS / "examples" / "hbb.json").read_text())["hbb_cds"], HBB)
position = st.builds(lambda star, n, off: f"{star}{n}{off}", st.sampled_from(["", "*", "-"]),
                     st.integers(0, 4000), st.sampled_from(["", "+1", "-2", "+40", "-3000"]))
hgvs_like = (st.builds(lambda prefix, body: prefix + body, st.sampled_from(["c.", "g.", "p.", "n.", "chr11:c.", ""]),
                       st.text(alphabet="0123456789+-*_>ACGTdelinsup[];=()?", max_size=30))
             | st.builds(lambda prefix, a, b, edit: f"{prefix}{a}{b}{edit}", st.sampled_from(["c.", "g."]), position,
                         st.sampled_from(["", "_"]).flatmap(lambda sep: position.map(lambda p: sep + p) if sep
                                                            else st.just("")),
                         st.sampled_from(["A>T", "G>A", "C>C", "del", "dup", "insT", "delinsAA", "="])))


@given(typed | hgvs_like)
def test_hgvs_names_on_a_sequence_with_or_without_its_cds(text):
    _accepts_or_explains(lambda t: Variant.parse(t, HBB, HBB_CDS), text)
    _accepts_or_explains(lambda t: Variant.parse(t, HBB), text)


@given(st.text(alphabet="ACGT", min_size=5, max_size=40), st.text(alphabet="ACGT", min_size=1, max_size=40))
def test_full_alternate_sequences_become_one_variant(reference, alternate):
    try:
        variant = variant_from_sequences(reference, alternate)
    except InputError as exc:
        assert "equals the reference" in str(exc)
        return
    pos = variant.pos - 1
    assert reference[pos : pos + len(variant.ref)] == variant.ref
    assert reference[:pos] + variant.alt + reference[pos + len(variant.ref) :] == alternate
