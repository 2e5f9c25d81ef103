"""Design constraints as parts: each is one object in its own module, every face takes its fields from it, and
generation composes any of them, one written outside the package too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from Bio.Seq import Seq

from carbon_app.errors import InputError
from carbon_app.inference.constraints import FIELDS, KINDS, Constraint, DesignConstraints
from carbon_app.inference.constraints.kinds.protein import EncodeProtein
from carbon_app.inference.constraints.part import Field, MotifRule, chisel_check, motif_matrix
from carbon_app.inference.generate import generate
from carbon_app.inference.request import DesignRequest


def test_each_constraint_module_holds_one_kind_and_every_face_takes_its_fields(demo_manager, tmp_path):
    from carbon_app.app.cli import build_parser
    from carbon_app.app.gradio_app import build_app
    from carbon_app.app.service import AppConfig
    from carbon_app.inference.constraints import kinds

    modules = sorted(p.stem for p in Path(kinds.__file__).parent.glob("*.py") if p.stem != "__init__")
    assert sorted(kind.__module__.rsplit(".", 1)[1] for kind in KINDS) == modules
    assert [f.name for f in FIELDS] == ["protein", "codon_table", "avoid", "max_homopolymer", "gc", "gc_window"]

    flags = {action.dest for action in build_parser()._subparsers._group_actions[0].choices["generate"]._actions}
    assert {f.name for f in FIELDS} <= flags  # the CLI's flags
    api = build_app(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path)).get_api_info()
    parameters = [p["parameter_name"] for p in api["named_endpoints"]["/generate"]["parameters"]]
    assert parameters[-len(FIELDS) - 1 :] == [*(f.name for f in FIELDS), "flank"]  # the page's, by name
    with pytest.raises(TypeError, match="unknown design constraint field"):
        DesignRequest.from_options("", 12, max_homopolymr=3)  # a misspelt field is named, not dropped


def test_one_value_carries_what_each_face_shows():
    c = DesignConstraints.from_options(protein="mk*", avoid="BsaI; EcoRI", max_homopolymer="4", gc="40:60",
                                       gc_window=12.0)
    assert c.options() == {"protein": "MK*", "codon_table": "1", "avoid": "BsaI,EcoRI", "max_homopolymer": "4",
                           "gc": "40:60", "gc_window": "12"}  # as the command line takes them (FASTA headers)
    assert c.describe() == {"protein": "MK*", "codon_table": 1, "avoid": ["BsaI", "EcoRI"], "max_homopolymer": 4,
                            "gc": [0.4, 0.6], "gc_window": 12}
    assert c.fixed_length() == (9, "the protein has 3 residues, 9 bases")
    assert DesignConstraints.from_options(gc_window=12).parts == ()  # a window without a range is off
    assert DesignConstraints.from_options().describe()["avoid"] == []


@dataclass(frozen=True)
class AvoidCpG(Constraint):
    """No CG dinucleotide: written here, wired nowhere."""

    fields = (Field("no_cpg", "Avoid CpG", "no CG dinucleotide"),)
    order = 99

    @classmethod
    def parse(cls, no_cpg=None):
        return cls() if no_cpg else None

    def options(self):
        return {"no_cpg": "yes"}

    @classmethod
    def values_off(cls):
        return {}

    def label(self):
        return "avoiding CpG"

    def reach(self):
        return 2

    def rule(self, layout):
        return MotifRule(layout, [motif_matrix("CG")])

    def checks(self, design, head):
        from dnachisel import AvoidPattern

        return [chisel_check("AvoidPattern(CG)", [AvoidPattern("CG")], design, head)]


@pytest.mark.parametrize("mode", ["bp", "token"])
def test_a_constraint_written_elsewhere_composes_with_the_shipped_ones(compact, mode):
    protein = "MRSAKT"  # arginine, serine and alanine have CG codons and others
    both = DesignConstraints((EncodeProtein(protein), AvoidCpG()))
    out = generate(compact, "GACG", None, constraints=both, seed=3, samples=3, mode=mode, temperature=1.0)
    for seq in out.sequences:
        assert str(Seq(seq).translate()) == protein
        assert "CG" not in "G" + seq  # nor across the junction with the prompt's last base
        assert [(c.specification, c.passes) for c in both.checks(seq, "GACG")] == [
            ("EnforceTranslation(table 1)", True), ("AvoidPattern(CG)", True)]
    alone = generate(compact, "GACG", None, constraints=DesignConstraints((EncodeProtein(protein),)), seed=3,
                     samples=3, mode=mode, temperature=1.0)
    assert any("CG" in seq for seq in alone.sequences)  # the part did the work


def test_a_conflict_with_the_mask_names_the_one_constraint_that_cannot_be_met(compact):
    with pytest.raises(InputError, match=re.escape("no design can meet avoiding CpG (with the mask and prompt)")):
        generate(compact, "", None, mask="NNNCGNNNNNNN", constraints=DesignConstraints((AvoidCpG(),)), seed=0)
    with pytest.raises(InputError, match=re.escape("no design can meet avoiding CG (with the mask and prompt)")):
        generate(compact, "", None, mask="NNNCGNNNNNNN", avoid="CG", seed=0)
