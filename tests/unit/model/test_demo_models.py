"""The bundled demo models: the default with no configuration, small, paired, documented."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from carbon_app.assets import ASSETS
from carbon_app.core.dna import read_fasta
from carbon_app.inference.generate import generate
from carbon_app.inference.score import score_sequence
from carbon_app.model.hub import ASSETS_MODELS, bundled_models, default_model_name
from carbon_app.model.manager import ModelManager

ASSETS_EXAMPLES = ASSETS / "examples"
#: what the shipped demo model must reach on its held-out genes (docs/demo-models.md), whatever its exact figures
QUALITY_GOALS = {"stop_gain_vs_synonymous_auroc": 0.85, "splice_site_vs_deep_intronic_auroc": 0.75}
DRAFT_AGREEMENT_GOAL = 0.85  # the draft's greedy tokens that the target's agree with


def _check_quality_schema(quality: dict) -> None:
    """eval.json's `quality`, as the page and the trust note read it: each figure a fraction, its setup named."""
    for figures in (quality, *quality.get("other_methods", {}).values(), quality.get("whole_window") or {}):
        for name in ("stop_gain_vs_synonymous_auroc", "splice_site_vs_deep_intronic_auroc",
                     "random_snv_fraction_negative"):
            assert isinstance(figures[name], float) and 0 <= figures[name] <= 1, name
    assert isinstance(quality["window"], int) and quality["window"] > 0
    assert quality["method"] in ("marginal", "chain")
    radius = quality["delta_radius"]
    assert radius is None or (isinstance(radius, int) and radius >= 0)
    assert isinstance(quality["demo"], bool)


@pytest.fixture(scope="module")
def manager():
    return ModelManager(device="cpu")


def test_bundled_target_is_the_default_and_pairs_with_its_draft(manager, monkeypatch):
    monkeypatch.delenv("CARBON_MODEL", raising=False)
    assert set(bundled_models()) >= {"carbon-demo", "carbon-demo-draft"}
    assert default_model_name() == "carbon-demo"
    target = manager.get()
    assert target.name == "carbon-demo" and target.draft == "carbon-demo-draft"
    draft = manager.get(target.draft)
    assert draft.tokenizer.config == target.tokenizer.config
    prompt = "<fungi_species><protein_coding_region><dna>ATGGCC"
    assert draft.tokenizer.encode(prompt) == target.tokenizer.encode(prompt)
    monkeypatch.setenv("CARBON_MODEL", "HuggingFaceBio/Carbon-3B")
    assert default_model_name() == "HuggingFaceBio/Carbon-3B"


def test_shipped_weights_stay_small():
    total = sum(f.stat().st_size for name in ("carbon-demo", "carbon-demo-draft")
                for f in (ASSETS_MODELS / name).iterdir())
    assert total < 40 * 2**20  # the limit for the two bundled models together


def test_model_cards_carry_the_evaluation(manager):
    results = json.loads((ASSETS_MODELS / "carbon-demo" / "eval.json").read_text())
    card = (ASSETS_MODELS / "carbon-demo" / "README.md").read_text()
    assert "not for biological conclusions" in card
    assert "| carbon-demo, no tag | " in card
    assert f"{100 * results['target']['all']:.1f} |" in card
    assert f"{100 * results['markov']['all']:.1f} |" in card
    assert results["target"]["all"] > results["markov"]["all"] + 0.03  # recovery: 32.7% against 29.0%
    assert all(results["target"][group] > markov for group, markov in results["markov"].items())  # in every group
    variants = results["target_variants"]
    header = next(line for line in card.splitlines() if line.startswith("| task | group |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): [c.strip() for c in line.strip("|").split("|")]
            for line in card.splitlines() if line.startswith(("| stop-gain", "| splice", "| random"))}
    for task, words in (("coding", "stop-gain vs synonymous"), ("splice", "splice site vs matched deep intronic")):
        for group, value in variants[task]["auroc"].items():  # each figure in its task's row, its model's column
            assert rows[(words, group)][columns.index("carbon-demo")] == f"{value:.3f}"
            markov = results["markov_variants"][task]["auroc"][group]
            markov_column = columns.index(f"Markov, order {results['markov_scoring_order']}")
            assert rows[(words, group)][markov_column] == f"{markov:.3f}"
    assert rows[("random SNVs with delta < 0", "all")][columns.index("carbon-demo")] == \
        f"{100 * variants['random']['fraction_negative']:.1f}%"
    marginal = results["target_variants_marginal"]  # the same model read with the reference FNS marginals
    for group, value in marginal["coding"]["auroc"].items():
        assert rows[("stop-gain vs synonymous", group)][columns.index("carbon-demo, marginal")] == f"{value:.3f}"
    quality = results["quality"]
    _check_quality_schema(quality)
    assert quality["stop_gain_vs_synonymous_auroc"] == variants["coding"]["auroc"]["all"]
    assert quality["splice_site_vs_deep_intronic_auroc"] == variants["splice"]["auroc"]["all"]
    for figure, goal in QUALITY_GOALS.items():  # the shipped model meets the demo's goals
        assert quality[figure] >= goal, figure
    # the figures are read within the card's radius and with its method, which every path then reads by default
    scoring = json.loads((ASSETS_MODELS / "carbon-demo" / "scoring.json").read_text())
    assert quality["other_methods"]["marginal"]["stop_gain_vs_synonymous_auroc"] == marginal["coding"]["auroc"]["all"]
    bundle = manager.get("carbon-demo")
    assert bundle.card.quality == quality  # what the page shows beside a score
    assert quality["delta_radius"] == results["variant_delta_radius"] == bundle.card.delta_radius == \
        scoring["delta_radius"]
    assert quality["method"] == results["variant_method"] == bundle.card.method == scoring["method"]
    assert quality["window"] == scoring["window"] and scoring["measured"] is True
    assert manager.get("carbon-demo-draft").card.quality is None  # its own scores were not measured: no figures to show
    assert results["draft_greedy_agreement"]["token"] >= DRAFT_AGREEMENT_GOAL
    assert (ASSETS_MODELS / "carbon-demo-draft" / "README.md").exists()


def test_the_demo_model_knows_order_not_only_composition(manager):
    """The held-out HBB locus scores better than the same bases shuffled (same composition), by a margin a
    model with random weights does not reach; a design continues a coding prompt as confidently."""
    seq = read_fasta(ASSETS_EXAMPLES / "hbb.fa").sequence[:1500]
    for name in ("carbon-demo", "carbon-demo-draft"):
        bundle = manager.get(name)
        real = score_sequence(bundle, seq).mean
        shuffled = []
        for seed in range(3):
            bases = list(seq)
            random.Random(seed).shuffle(bases)
            shuffled.append(score_sequence(bundle, "".join(bases)).mean)
        assert real > max(shuffled) + 0.02, (name, real, shuffled)
    greedy = generate(manager.get("carbon-demo"), "ATGGCTTCAGATCTCGAAGCTTCAGCTCCA", 240, temperature=0, seed=0)
    assert len(greedy.sequences[0]) == 240 and np.mean(greedy.base_probs[0]) > 0.3
