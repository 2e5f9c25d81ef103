"""A Space made from this repository serves the released Carbon models with nothing configured, fetched from the
hub at start (here a loopback stand-in, reached through HF_ENDPOINT by the real huggingface_hub client) at the
revision the project pins, never because of a visitor's input; without the hub it starts from its cache, and
with neither it serves the bundled demo model and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from carbon_app.model import hub
from tests.conftest import REPO, launch_app
from tests.hub_standin import HubStandIn

RELEASED = "HuggingFaceBio/Carbon-500M"  # what a Space on CPU hardware serves
HEAD = "1f3e5d7c9b0a2f4e6d8c0b1a3f5e7d9c2b4a6f8e"
PINNED = "0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b"


def _space(out_dir: Path, hub_url: str, hf_home: Path):
    """The app as a CPU Space starts it: SPACE_ID set, no CARBON_MODEL(S), the hub's address and cache."""
    out_dir.mkdir()
    return launch_app(out_dir, SPACE_ID="carbon-test/studio", CARBON_MODELS="", HF_ENDPOINT=hub_url,
                      HF_HOME=str(hf_home), HF_HUB_OFFLINE="0")


def _models(url: str) -> dict:
    from gradio_client import Client

    return Client(url, verbose=False).predict(api_name="/models")[2]


def test_a_released_model_is_fetched_at_its_pinned_revision_not_the_branch_head(carbon_model_dir, tmp_path):
    """A fresh interpreter (the hub client reads its endpoint and cache at import) with the release pinned to an
    older commit than the branch's head, as `HUB_MODELS` pins one."""
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "config.json").write_text("{}")  # the branch has moved on to files this version cannot read
    fetch = ("import sys; from carbon_app.model import hub; "
             f"hub.HUB_MODELS[{RELEASED!r}]['revision'] = {PINNED!r}; print(hub.resolve_model_dir({RELEASED!r}))")
    with HubStandIn({RELEASED: (HEAD, newer)}, older={RELEASED: (PINNED, carbon_model_dir)}) as stand_in:
        env = {**os.environ, "HF_ENDPOINT": stand_in.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        done = subprocess.run([sys.executable, "-c", fetch], env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.name == PINNED and (path / "model.safetensors").is_file()
    assert stand_in.fetched(RELEASED) and all(p.startswith(PINNED + "/") for p in stand_in.fetched(RELEASED))


def test_a_space_serves_the_released_model_offline_after_its_first_start_and_the_demo_model_without_a_hub(
        carbon_model_dir, tmp_path):
    from gradio_client import Client

    hf_home = tmp_path / "hf"
    revision = hub.HUB_MODELS[RELEASED]["revision"]
    with HubStandIn({RELEASED: (HEAD, carbon_model_dir)}) as stand_in:
        process, url = _space(tmp_path / "first", stand_in.url, hf_home)
        try:
            data = _models(url)
            assert data["configured"] == [RELEASED] and data["notice"] == ""
            fetched = stand_in.fetched(RELEASED)
            assert {"config.json", "model.safetensors", "vocab.json"} <= {p.split("/", 1)[1] for p in fetched}
            assert all(p.startswith(f"{revision if revision != 'main' else HEAD}/") for p in fetched)
            asked = len(stand_in.requests)
            client = Client(url, verbose=False)
            design = client.predict(RELEASED, "none", "none", "ACGTACGGTT", None, 24, "", "bp", 0.9, 0, 1.0, "5", 1,
                                    False, api_name="/generate")[-1]
            assert len(design["sequences"][0]) == 24
            for typed in ("HuggingFaceBio/Carbon-8B", "HuggingFaceBio/Carbon-3B@main", "someone/anything"):
                with pytest.raises(Exception, match="is not one of this server's models"):
                    client.predict(typed, api_name="/load_model")
                with pytest.raises(Exception, match="is not one of this server's models"):
                    client.predict(typed, "none", "none", "ACGT", None, 6, "", "bp", 0.9, 0, 1.0, "1", 1, False,
                                   api_name="/generate")
            assert len(stand_in.requests) == asked  # no visitor's input reached the hub
        finally:
            process.terminate()
            process.wait(timeout=60)
    # the hub is gone (its address refuses connections): the second start reads the cache
    process, url = _space(tmp_path / "second", stand_in.url, hf_home)
    try:
        data = _models(url)
        assert data["configured"] == [RELEASED] and data["notice"] == ""
    finally:
        process.terminate()
        process.wait(timeout=60)
    # no hub and no cache: the bundled demo model, said in the page and the log
    process, url = _space(tmp_path / "third", stand_in.url, tmp_path / "empty-cache")
    try:
        data = _models(url)
        assert data["configured"] == ["carbon-demo"]
        assert data["notice"].startswith(f"The released model {RELEASED} could not be fetched from the hub")
        assert "This Space serves the bundled demo model carbon-demo instead" in data["notice"]
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        assert "could not be fetched from the hub" in json.dumps(page)
    finally:
        process.terminate()
        process.wait(timeout=60)
    log = (tmp_path / "third" / "app.log").read_text()
    assert "This Space serves the bundled demo model carbon-demo instead" in log
