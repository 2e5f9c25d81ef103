"""Any text a user can type is either accepted or refused with an InputError, never anything else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from carbon_app.app.service import Service, variant_from_sequences
from carbon_app.core.dna import clean_sequence, mask_from_template
from carbon_app.errors import InputError
from carbon_app.inference.score import Variant

typed = st.text(alphabet=st.characters(codec="utf-8"), max_size=80) | st.text(alphabet="ACGTUNacgtu>\r\n \t0123456789:",
                                                                              max_size=80)


def _accepts_or_explains(fn, text):
    try:
        fn(text)
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc)


@settings(max_examples=300, deadline=None)
@given(typed)
def test_sequences_masks_and_variants(text):
    _accepts_or_explains(clean_sequence, text)
    _accepts_or_explains(mask_from_template, text)
    _accepts_or_explains(Variant.parse, text)
    _accepts_or_explains(lambda t: Service.sequence(t, None, "sequence"), text)


@settings(max_examples=200, deadline=None)
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
