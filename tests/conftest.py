"""Shared fixtures: small Carbon-format models with random weights, built once per run."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parent.parent


def random_dna(length: int, seed: int) -> str:
    """`length` uniformly random bases, the same ones for the same seed."""
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(length))

MARKERS = {
    "slow": "starts a server, trains, benchmarks or sweeps many cases (deselect with -m 'not slow')",
    "browser": "drives Debian's Chromium through the app",
    "gpu": "needs CUDA; skipped where there is none (CI never has a GPU)",
}


def pytest_configure(config):
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    no_gpu = pytest.mark.skip(reason="no CUDA device here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(no_gpu)
#: The real Carbon text-tokenizer files: beside the checkout, or where CARBON_TEXT_TOKENIZER_DIR says
#: (a host that has only a copy of the checkout).
SHARED_TOKENIZER = Path(os.environ.get("CARBON_TEXT_TOKENIZER_DIR") or REPO.parent / "shared" / "carbon-tokenizer")


@pytest.fixture(scope="session")
def carbon_tokenizer_dir() -> Path:
    """The real Carbon text-tokenizer files, when this host has them."""
    if not (SHARED_TOKENIZER / "vocab.json").exists():
        pytest.skip(f"the Carbon text-tokenizer files are not at {SHARED_TOKENIZER}")
    return SHARED_TOKENIZER


@pytest.fixture(scope="session")
def compact_model_dir(tmp_path_factory) -> Path:
    from carbon_app.tools.synthetic import write_model_dir

    return write_model_dir(tmp_path_factory.mktemp("models") / "compact", seed=1)


@pytest.fixture(scope="session")
def carbon_model_dir(tmp_path_factory, carbon_tokenizer_dir) -> Path:
    """Full released layout: 155,776 ids, first DNA id 151669, tied embeddings."""
    from carbon_app.tools.synthetic import write_model_dir

    return write_model_dir(
        tmp_path_factory.mktemp("models") / "carbon", layout="carbon", text_tokenizer_dir=carbon_tokenizer_dir, seed=2
    )


@pytest.fixture(scope="session")
def compact(compact_model_dir):
    from carbon_app.model.bundle import load_bundle

    return load_bundle(str(compact_model_dir))


@pytest.fixture(scope="session")
def carbon(carbon_model_dir):
    from carbon_app.model.bundle import load_bundle

    return load_bundle(str(carbon_model_dir))


@pytest.fixture(scope="session")
def qwen_bpe(carbon_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(carbon_tokenizer_dir), local_files_only=True)
