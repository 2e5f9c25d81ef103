"""Model manager: caching, single-flight loading, LRU within a budget, clear failures."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
import torch

from carbon_app.errors import ModelError
from carbon_app.inference.generate import generate
from carbon_app.model.bundle import load_bundle
from carbon_app.model.hub import draft_for
from carbon_app.model.manager import ModelManager
from tests.conftest import REPO


def test_cached_and_loaded_once_under_concurrent_requests(compact_model_dir):
    manager = ModelManager(device="cpu")
    barrier = threading.Barrier(8)
    got = []

    def ask():
        barrier.wait()
        got.append(manager.get(str(compact_model_dir)))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert manager.loads == 1 and len({id(b) for b in got}) == 1
    assert manager.get(str(compact_model_dir)) is got[0] and manager.loads == 1


def test_least_recently_used_is_evicted_to_stay_in_budget(compact_model_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(compact_model_dir, other)
    one = ModelManager(device="cpu").get(str(compact_model_dir)).n_bytes
    manager = ModelManager(device="cpu", memory_budget_bytes=int(one * 1.5))
    manager.get(str(compact_model_dir))
    manager.get(str(other))
    assert [m["name"] for m in manager.loaded()] == [str(other)]
    assert manager.used_bytes() <= manager.memory_budget_bytes
    with pytest.raises(ModelError, match="memory budget"):
        ModelManager(device="cpu", memory_budget_bytes=one // 4).get(str(compact_model_dir))


def test_failures_are_clear_and_leave_loaded_models_working(compact_model_dir, tmp_path, monkeypatch):
    manager = ModelManager(device="cpu")
    good = manager.get(str(compact_model_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        manager.get("HuggingFaceBio/Carbon-3B")
    with pytest.raises(ModelError, match="unknown model"):
        manager.get("no-such-model")
    broken = tmp_path / "broken"
    shutil.copytree(compact_model_dir, broken)
    (broken / "dna_config.json").unlink()
    with pytest.raises(ModelError, match="dna_config.json is missing"):
        manager.get(str(broken))
    mismatched = tmp_path / "mismatched"
    shutil.copytree(compact_model_dir, mismatched)
    config = json.loads((mismatched / "dna_config.json").read_text())
    (mismatched / "dna_config.json").write_text(json.dumps({**config, "dna_start_id": 151669}))
    with pytest.raises(ModelError, match="does not match the weights"):
        manager.get(str(mismatched))
    truncated = tmp_path / "truncated"
    shutil.copytree(compact_model_dir, truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelError, match="cannot be read"):
        manager.get(str(truncated))
    assert generate(good, "ACGTAC", 12, seed=1).sequences[0]  # still serving
    assert [m["name"] for m in manager.loaded()] == [str(compact_model_dir)]


def test_remote_code_is_never_run_unless_asked(compact_model_dir, tmp_path):
    remote = tmp_path / "remote"
    shutil.copytree(compact_model_dir, remote)
    config = json.loads((remote / "config.json").read_text())
    config.update(model_type="carbon_remote", auto_map={"AutoConfig": "configuration_carbon.CarbonConfig"})
    (remote / "config.json").write_text(json.dumps(config))
    (remote / "configuration_carbon.py").write_text("raise SystemExit('remote code ran')\n")
    assert ModelManager(device="cpu").trust_remote_code is False
    with pytest.raises(ModelError, match="config"):
        ModelManager(device="cpu").get(str(remote))


def test_fp32_head_option_and_description(compact_model_dir):
    bf16 = load_bundle(str(compact_model_dir), device=torch.device("cpu"), dtype=torch.bfloat16, fp32_head=True)
    assert bf16.dtype == torch.bfloat16 and bf16.dna_head.dtype == torch.float32
    plain = load_bundle(str(compact_model_dir), device=torch.device("cpu"), dtype=torch.bfloat16, fp32_head=False)
    assert plain.dna_head.dtype == torch.bfloat16
    info = bf16.describe()
    assert info["dtype"] == "bfloat16" and info["head_dtype"] == "float32" and info["context_bases"] == 512 * 6
    assert generate(bf16, "ACGTAC", 7, seed=1).sequences[0]


def test_drafts_pair_with_targets():
    assert draft_for("HuggingFaceBio/Carbon-3B") == "HuggingFaceBio/Carbon-500M"
    assert draft_for("HuggingFaceBio/Carbon-8B@abc123") == "HuggingFaceBio/Carbon-500M"
    assert draft_for("HuggingFaceBio/Carbon-500M") is None


def test_remote_code_tokenizer_config_falls_back_to_the_stock_bpe(carbon_model_dir, tmp_path):
    """A tokenizer config naming a remote-code class must not yield an empty
    vocabulary (which would encode tags to nothing): the stock BPE files are used."""
    remote = tmp_path / "remote_tokenizer"
    shutil.copytree(carbon_model_dir, remote)
    config = json.loads((remote / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="CarbonTokenizer",
                  auto_map={"AutoTokenizer": ["tokenization_carbon.CarbonTokenizer", None]})
    (remote / "tokenizer_config.json").write_text(json.dumps(config))
    (remote / "tokenization_carbon.py").write_text("raise SystemExit('remote code ran')\n")
    bundle = load_bundle(str(remote))
    assert bundle.tokenizer.encode("<mammalian_species><dna>AAAAAA") == [
        13748, 8666, 10480, 74130, 29, 151669, 151672]


def test_a_local_model_directory_is_served_by_its_name_and_its_path_never_reaches_a_client(tmp_path, monkeypatch):
    """CARBON_MODELS with a NAME=PATH entry and a bare path: the page, /models and every result name the
    model by the name; each lookup of the name finds the directory."""
    from carbon_app.app.gradio_app import build_app
    from carbon_app.app.service import AppConfig
    from carbon_app.model.hub import configured_models, default_model_name, resolve_model_dir

    lab = tmp_path / "srv" / "weights-v2"
    shutil.copytree(REPO / "assets" / "models" / "carbon-demo", lab)
    bare = tmp_path / "srv" / "carbon-copy"
    shutil.copytree(REPO / "assets" / "models" / "carbon-demo", bare)
    monkeypatch.setenv("CARBON_MODELS", f"lab-demo={lab}, {bare}, carbon-demo-draft")
    monkeypatch.setenv("CARBON_MODEL", str(bare))
    assert configured_models() == {"lab-demo": str(lab), "carbon-copy": str(bare),
                                   "carbon-demo-draft": "carbon-demo-draft"}
    assert default_model_name() == "carbon-copy" and resolve_model_dir("lab-demo") == lab
    config = AppConfig.from_env()
    assert config.models == ["lab-demo", "carbon-copy", "carbon-demo-draft"]

    manager = ModelManager(device="cpu")
    fns = build_app(manager, config).fns
    models_info = next(fn.fn for fn in fns.values() if fn.api_name == "models")
    design = manager.get("lab-demo")
    assert design.name == "lab-demo" and design.path == lab
    shown = json.dumps([models_info(), design.describe()], default=str)
    assert "lab-demo" in shown and str(tmp_path) not in shown
    monkeypatch.setenv("CARBON_MODELS", f"=/srv/x, lab-demo={lab}")
    with pytest.raises(ModelError, match=r"the model entry '=/srv/x' is not NAME=PATH"):
        AppConfig.from_env()
