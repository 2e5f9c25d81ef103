"""Design constraints enforced while sampling: every sample meets every constraint, conflicts are named."""

from __future__ import annotations

import pytest

from carbon_app.inference.constraints import DesignConstraints
from carbon_app.inference.generate import generate
from tests.constraint_checks import violations


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
            assert violations(seq, c, "GCCACCA") == []


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
