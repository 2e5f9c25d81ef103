"""The bundled demo models: the default with no configuration, small, paired, documented."""

from __future__ import annotations

import json

import numpy as np
import pytest

from carbon_app.inference.generate import generate
from carbon_app.model.hub import ASSETS_MODELS, bundled_models, default_model_name
from carbon_app.model.manager import ModelManager


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
    assert total < 30 * 2**20


def test_model_cards_carry_the_evaluation(manager):
    results = json.loads((ASSETS_MODELS / "carbon-demo" / "eval.json").read_text())
    card = (ASSETS_MODELS / "carbon-demo" / "README.md").read_text()
    assert "not for biological conclusions" in card
    assert "| carbon-demo, no tag | " in card
    assert f"{100 * results['target']['all']:.1f} |" in card
    assert f"{100 * results['markov']['all']:.1f} |" in card
    assert results["target"]["all"] > results["markov"]["all"]  # the goal the card reports
    assert (ASSETS_MODELS / "carbon-demo-draft" / "README.md").exists()


def test_demo_designs_dna_that_looks_like_a_trained_model_made_it(manager):
    target = manager.get("carbon-demo")
    greedy = generate(target, "ATGGCTTCAGATCTCGAAGCTTCAGCTCCA", 240, species="mammal", temperature=0, seed=0)
    assert len(greedy.sequences[0]) == 240
    # far more confident than uniform (0.25), as a model that learned real DNA is
    assert np.mean(greedy.base_probs[0]) > 0.3
    sampled = generate(target, "", 600, species="plant", seed=1, samples=2)
    for seq in sampled.sequences:
        gc = (seq.count("G") + seq.count("C")) / len(seq)
        assert 0.2 < gc < 0.7
