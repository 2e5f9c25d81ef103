"""Sequence cleaning, FASTA reading and tag schemes."""

from __future__ import annotations

import pytest

from carbon_app.core.dna import clean_sequence, mask_from_template, read_fasta, reverse_complement, satisfies
from carbon_app.core.tags import SCHEMES, get_scheme
from carbon_app.errors import InputError


def test_cleaning_keeps_bases_and_refuses_the_rest():
    assert clean_sequence(" acgt\r\nNNac gt \n") == "ACGTNNACGT"
    for text, message in [("", "empty"), ("ACGU", "RNA"), ("AC1G", "'1' at position 3"), (">x\nACGT", "FASTA"),
                          ("ACGé", "'É' at position 4"), ("ACGN", None)]:
        if message is None:
            assert clean_sequence(text) == "ACGN"
            with pytest.raises(InputError, match="ambiguity code 'N'"):
                clean_sequence(text, ambiguous=False)
        else:
            with pytest.raises(InputError, match=message):
                clean_sequence(text)


def test_iupac_masks_and_reverse_complement():
    allowed = mask_from_template("ARyn")
    assert allowed.tolist() == [[True, False, False, False], [True, False, False, True],
                                [False, True, True, False], [True, True, True, True]]
    assert satisfies("AGCT", "ARYN") and not satisfies("CGCT", "ARYN")
    assert reverse_complement("ACGTRN") == "NYACGT"


def test_fasta_records(tmp_path):
    path = tmp_path / "x.fa"
    path.write_text(">a first\nACGT\nACGT\n>b\nTTTT\n")
    with pytest.raises(InputError, match="2 records \\(a, b\\)"):
        read_fasta(path)
    assert read_fasta(path, "b").sequence == "TTTT"
    assert read_fasta(str(path), "a").sequence == "ACGTACGT"
    with pytest.raises(InputError, match="no record has the id 'c'"):
        read_fasta(path, "c")
    assert read_fasta(">only\nacgt\n").sequence == "ACGT"
    (tmp_path / "plain.txt").write_text("ACGT\n")
    with pytest.raises(InputError, match="not FASTA"):
        read_fasta(tmp_path / "plain.txt")


def test_a_record_whose_bases_hold_a_non_ascii_character_is_refused_naming_it():
    """Biopython reads a record's bases back as ASCII: a pasted character beyond it is named, not a traceback
    (found by the property tests at 300 examples)."""
    with pytest.raises(InputError, match=r"record '' has the invisible character U\+0080 at position 1"):
        read_fasta(">\n\x80")
    with pytest.raises(InputError, match="record 'x' has .* at position 5, which is not a DNA base"):
        read_fasta(">x\nACGT\u00b5A\n")


def test_tag_schemes():
    pipeline = SCHEMES["pipeline"]
    assert pipeline.prefix("mammal", "protein_coding") == "<mammalian_species><protein_coding_region>"
    assert pipeline.prefix("fungi", None) == "<fungi_species>"
    assert pipeline.prefix(None, "tRNA") == "<transfer_rna>"
    assert pipeline.prefix("none", "") == ""
    assert SCHEMES["eval"].species_tag("protozoa") == "<protozoan_species>"
    assert get_scheme("model_card").species_tag("mammal") == "<vertebrate_mammalian>"
    assert pipeline.species_tag("<vertebrate_mammalian>") == "<vertebrate_mammalian>"
    with pytest.raises(InputError, match="unknown species 'plant' for the 'model_card'"):
        SCHEMES["model_card"].species_tag("plant")
    with pytest.raises(InputError, match="literal region tag"):
        pipeline.region_tag("<dna>")
    with pytest.raises(InputError, match="unknown tag scheme"):
        get_scheme("other")
