"""Design constraints enforced while sampling: every sample meets every constraint, conflicts are named."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from Bio.Seq import Seq

from carbon_app.core.dna import reverse_complement, satisfies
from carbon_app.inference.constraints import DesignConstraints
from carbon_app.inference.generate import generate

SITES = {"BsaI": "GGTCTC", "BsmBI": "CGTCTC", "EcoRI": "GAATTC"}


def _violations(seq: str, c: DesignConstraints, prompt: str = "", mask: str | None = None) -> list[str]:
    """Every constraint `seq` breaks, checked directly on the bases (independently of the engine)."""
    c = SimpleNamespace(**c.values())  # every field's value, off ones included
    found = []
    if c.protein and str(Seq(seq).translate(table=c.codon_table)) != c.protein:
        found.append("protein")
    junction = prompt[-12:] + seq  # sites may not form across the prompt/design junction either
    for name in c.avoid:
        site = SITES.get(name, name)
        for motif in {site, reverse_complement(site)}:
            pattern = "".join(f"[{''.join(sorted(set('ACGT') & set(_iupac(ch))))}]" for ch in motif)
            for m in re.finditer(f"(?=({pattern}))", junction):
                if m.start() + len(motif) > len(prompt[-12:]):  # ends in the design
                    found.append(f"site {motif}")
    if c.max_homopolymer and re.search("|".join(f"{b}{{{c.max_homopolymer + 1}}}" for b in "ACGT"),
                                       (prompt[-12:] + seq)[len(prompt[-12:]) - c.max_homopolymer:] if prompt
                                       else seq):
        found.append("homopolymer")
    if c.gc:
        lo, hi = c.gc
        gc = (seq.count("G") + seq.count("C")) / len(seq)
        if not lo - 1e-9 <= gc <= hi + 1e-9:
            found.append(f"GC {gc:.3f}")
        if c.gc_window:
            for i in range(len(seq) - c.gc_window + 1):
                window = seq[i : i + c.gc_window]
                share = (window.count("G") + window.count("C")) / c.gc_window
                if not lo - 1e-9 <= share <= hi + 1e-9:
                    found.append(f"GC window at {i + 1}")
                    break
    if mask and not satisfies(seq, mask):
        found.append("mask")
    return found


def _iupac(code: str) -> str:
    from carbon_app.core.dna import IUPAC

    return IUPAC[code]


@pytest.fixture(scope="module")
def other_draft(tmp_path_factory):
    from carbon_app.model.bundle import load_bundle
    from tests.synthetic import write_model_dir

    return load_bundle(str(write_model_dir(tmp_path_factory.mktemp("draft") / "d", seed=7)))


@pytest.mark.parametrize("temperature", [0, 0.9])
@pytest.mark.parametrize("options", [
    dict(protein="MSKGEELFTGVVPILVELDGDVNGHKF", avoid="BsaI, BsmBI", max_homopolymer=4),
    dict(avoid="EcoRI, GCNNGC", gc="40:60", gc_window=12),
])
def test_drafting_under_constraints_gives_the_targets_own_designs(compact, other_draft, temperature, options):
    n = None if options.get("protein") else 150
    c = DesignConstraints.from_options(**options)
    alone = generate(compact, "GCCACCA", n, constraints=c, seed=11, samples=2, temperature=temperature)
    for draft in (other_draft, compact):  # a draft that disagrees, and one that always agrees
        drafted = generate(compact, "GCCACCA", n, constraints=c, seed=11, samples=2, temperature=temperature,
                           draft=draft, draft_always=True)
        assert drafted.sequences == alone.sequences
        assert drafted.speculative.rounds > 0 or "dead end" in (drafted.speculative.fallback_reason or "")
        for seq in drafted.sequences:
            assert _violations(seq, c, "GCCACCA") == []


def test_a_dead_end_in_a_drafted_round_is_made_again_alone_with_the_same_result(compact, other_draft):
    c = DesignConstraints.from_options(protein="MSKGEELFTGVVPILVELDGDVNGHKF", gc="40:60", gc_window=12,
                                       max_homopolymer=3)
    restarted = 0
    for seed in range(8):
        alone = generate(compact, "GCCACCA", None, constraints=c, seed=seed, samples=2)
        drafted = generate(compact, "GCCACCA", None, constraints=c, seed=seed, samples=2, draft=other_draft,
                           draft_always=True)
        assert drafted.sequences == alone.sequences
        restarted += "dead end" in (drafted.speculative.fallback_reason or "")
    assert restarted >= 1  # the restart path ran, and still gave the target's own designs
