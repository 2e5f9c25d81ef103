"""A Space made from this repository serves the released Carbon models with nothing configured, fetched from the
hub at start (here a loopback stand-in, reached through HF_ENDPOINT by the real huggingface_hub client) at the
revision the project pins, never because of a visitor's input; without the hub it starts from its cache, and
with neither it serves the bundled demo model and says so."""

from __future__ import annotations

from carbon_app.model import hub

RELEASED = "HuggingFaceBio/Carbon-500M"  # what a Space on CPU hardware serves


def test_nothing_configured_on_a_space_means_the_released_model_its_hardware_runs(monkeypatch):
    monkeypatch.delenv("CARBON_MODEL", raising=False)
    monkeypatch.delenv("CARBON_MODELS", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert hub.space_models() == []  # not a Space: the bundled model, as before
    monkeypatch.setenv("SPACE_ID", "someone/studio")
    assert hub.space_models() == [RELEASED]  # this machine has no GPU: a CPU Space's model
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert hub.space_models() == ["HuggingFaceBio/Carbon-3B"] and hub.draft_for("HuggingFaceBio/Carbon-3B") == RELEASED
    monkeypatch.setenv("CARBON_MODEL", "carbon-demo")
    assert hub.space_models() == []  # what the owner configures wins


