"""Design constraints enforced while sampling: every sample meets every constraint, conflicts are named."""

from __future__ import annotations

import re

import pytest
from Bio.Seq import Seq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carbon_app.errors import InputError
from carbon_app.inference.constraints import DesignConstraints, resolve_site
from carbon_app.inference.generate import generate
from tests.constraint_checks import violations

GFP_START = "MSKGEELFTGVVPILVELDGDVNGHKF"


def test_a_protein_is_back_translated_without_the_golden_gate_sites(compact):
    c = DesignConstraints.from_options(protein=GFP_START, avoid="BsaI, BsmBI", max_homopolymer=4, gc="35:65")
    out = generate(compact, "GCCACCA", None, constraints=c, seed=5, samples=4, temperature=0.9)
    assert out.n_bases == 3 * len(GFP_START)
    for seq in out.sequences:
        assert violations(seq, c, "GCCACCA") == []
    again = generate(compact, "GCCACCA", None, constraints=c, seed=5, samples=4, temperature=0.9)
    assert again.sequences == out.sequences  # same seed, same designs


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(protein=st.text("ACDEFGHIKLMNPQRSTVWY", min_size=0, max_size=14),
       avoid=st.lists(st.sampled_from(["BsaI", "BsmBI", "EcoRI", "GCGC", "TTNAA"]), max_size=2, unique=True),
       homopolymer=st.sampled_from([0, 3, 4, 6]),
       gc=st.sampled_from([None, (0.3, 0.7), (0.45, 0.65), (0.2, 0.5)]),
       window=st.sampled_from([0, 12, 20]),
       prompt=st.sampled_from(["", "ACG", "GGTCT", "ATGGCCAAAGGT", "GAAT"]),
       mode=st.sampled_from(["bp", "token"]), seed=st.integers(0, 1000))
def test_every_sample_meets_every_constraint(compact, protein, avoid, homopolymer, gc, window, prompt, mode, seed):
    n_bases = 3 * len(protein) if protein else 31
    c = DesignConstraints.from_options(protein=protein, avoid=avoid, max_homopolymer=homopolymer,
                                       gc=gc, gc_window=window if gc else 0)
    try:
        out = generate(compact, prompt, n_bases, constraints=c, seed=seed, samples=2, mode=mode, temperature=1.0)
    except InputError as exc:  # refused before any work: only when no design exists, and said so
        assert "no design" in str(exc) or "cannot be met" in str(exc), exc
        return
    for seq in out.sequences:
        assert len(seq) == n_bases and violations(seq, c, prompt) == [], (seq, c)


def test_a_mask_and_constraints_together(compact):
    c = DesignConstraints.from_options(avoid="EcoRI", max_homopolymer=3, gc="40:60")
    mask = "ATG" + "N" * 21 + "TAA"
    out = generate(compact, "", None, mask=mask, constraints=c, seed=1, samples=3)
    for seq in out.sequences:
        assert violations(seq, c, "", mask) == []


@pytest.mark.parametrize("options, n_bases, message", [
    (dict(protein="MW", avoid="ATGTGG"), None, "no design can meet both the protein MW and avoiding ATGTGG"),
    (dict(protein="KKKKKK", gc="60:80"), None, "the GC range 60-80% cannot be met: the protein KKKKKK and the mask "
                                              "allow 0-33%"),
    (dict(protein="MKV"), 12, "the protein has 3 residues, 9 bases, but 12 bases were asked for"),
    (dict(protein="MXV"), None, "the protein has 'X' at residue 2"),
    (dict(avoid="NotAnEnzyme"), 12, "'NotAnEnzyme' is neither a restriction enzyme"),
    (dict(gc="70:20"), 12, "the GC range must satisfy"),
    (dict(gc="abc"), 12, "the GC range must be MIN:MAX"),
    (dict(codon_table=99, protein="M"), None, "the codon table must be an NCBI table id"),
    (dict(avoid="S,W"), 12, "no design can meet both avoiding S and avoiding W"),
])
def test_impossible_constraints_are_refused_before_any_work_and_named(compact, options, n_bases, message):
    with pytest.raises(InputError, match=re.escape(message) if "'" not in message else message):
        generate(compact, "", n_bases, constraints=DesignConstraints.from_options(**options), seed=0)


def test_enzyme_names_resolve_through_biopython():
    assert resolve_site("BsaI") == ("BsaI (GGTCTC)", "GGTCTC")
    assert resolve_site("ecori")[1] == "GAATTC"  # a unique name, whatever its case
    assert resolve_site("gcnngc") == ("GCNNGC", "GCNNGC")


def test_a_coupling_constraint_draws_the_joint_6mer_in_base_level_mode(compact):
    """Where the allowed 6-mers are not every combination of allowed bases, bp mode draws from the
    constrained joint distribution: greedy then equals token mode's greedy under the same constraint."""
    c = DesignConstraints.from_options(protein="MWKFLV")
    bp = generate(compact, "", None, constraints=c, temperature=0, mode="bp")
    token = generate(compact, "", None, constraints=c, temperature=0, mode="token")
    assert bp.sequences == token.sequences and str(Seq(bp.sequences[0]).translate()) == "MWKFLV"


