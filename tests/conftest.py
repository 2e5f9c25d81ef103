"""Shared fixtures: small Carbon-format models with random weights, built once per run."""

from __future__ import annotations

import os
import random
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parent.parent


def table_lines(path) -> list[str]:
    """A table this app wrote, without the leading ## lines that name what made it: its header, then its rows."""
    return [line for line in Path(path).read_text().splitlines() if not line.startswith("## ")]


def random_dna(length: int, seed: int) -> str:
    """`length` uniformly random bases, the same ones for the same seed."""
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(length))

MARKERS = {
    "integration": "the integration tier, every test under tests/integration/ (and a parameter of a unit test that "
                   "needs a server): launches a server or a browser, runs CLI subprocesses, a Ray cluster or a "
                   "benchmark, or trains a model (left out by default; run with -m integration)",
    "browser": "drives Debian's Chromium through the app",
    "gpu": "needs CUDA; skipped where there is none (CI never has a GPU)",
}

# Property tests: a few examples on every edit (the default tier, in CI too), many where CI runs them again
# (CARBON_HYPOTHESIS=ci, with the integration tier).
settings.register_profile("dev", max_examples=20, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("CARBON_HYPOTHESIS") or "dev")


def pytest_configure(config):
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


INTEGRATION = REPO / "tests" / "integration"


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_kept_in_the_run(tmp_path_factory):
    """gradio_client leaves an empty folder in the system's temporary directory for every file it downloads
    (thousands a run): this process's temporary files go to the run's own folder, which pytest prunes."""
    import tempfile

    kept, tempfile.tempdir = tempfile.tempdir, str(tmp_path_factory.mktemp("tmp"))
    yield
    tempfile.tempdir = kept


@pytest.hookimpl(tryfirst=True)  # before `-m` chooses: the folder is the tier
def pytest_collection_modifyitems(config, items):
    import torch

    no_gpu = None if torch.cuda.is_available() else pytest.mark.skip(reason="no CUDA device here")
    for item in items:
        if INTEGRATION in item.path.parents:
            item.add_marker(pytest.mark.integration)
        if no_gpu and "gpu" in item.keywords:
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
    from tests.synthetic import write_model_dir

    return write_model_dir(tmp_path_factory.mktemp("models") / "compact", seed=1)


@pytest.fixture(scope="session")
def carbon_model_dir(tmp_path_factory, carbon_tokenizer_dir) -> Path:
    """Full released layout: 155,776 ids, first DNA id 151669, tied embeddings."""
    from tests.synthetic import write_model_dir

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


# -- the bundled demo model, a service on it, and one launched app, each made once per run ---------------

@pytest.fixture(scope="session")
def demo_manager():
    """The model manager the shared demo bundle and service use (CPU)."""
    from carbon_app.model.manager import ModelManager

    return ModelManager(device="cpu")


@pytest.fixture(scope="session")
def demo(demo_manager):
    """The bundled carbon-demo model, as a user's notebook loads it."""
    return demo_manager.get("carbon-demo")


@pytest.fixture(scope="session")
def service(demo_manager, tmp_path_factory):
    """A service serving carbon-demo, as the app's handlers call it."""
    from carbon_app.app.service import AppConfig, Service

    return Service(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path_factory.mktemp("service")))


def launch_app(out_dir: Path, **env_extra):
    """A launched app (process, url) on the bundled models, as the Docker image runs it; its log in out_dir."""
    from benchmarks.soak import start_app

    try:
        return start_app(out_dir / "app.log", **{"CARBON_MODEL": "", "CARBON_OUTPUT_DIR": str(out_dir),
                                                 "HF_HUB_OFFLINE": "1", "MALLOC_ARENA_MAX": "2", **env_extra})
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def server_out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("app")


@pytest.fixture(scope="session")
def server_process(server_out):
    """The one launched app the integration tests share (those that need other settings launch their own)."""
    process, url = launch_app(server_out)
    yield process, url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="session")
def server(server_process) -> str:
    return server_process[1]


@pytest.fixture(scope="session")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False)


@pytest.fixture(scope="session")
def vllm_url(tmp_path_factory):
    """`deploy/vllm/serve.sh` on the bundled model, as the README starts it, shared by the run's tests."""
    with vllm_serving(tmp_path_factory.mktemp("vllm")) as url:
        yield url


@pytest.fixture(scope="session")
def served(vllm_url):
    """The bundled model as the vLLM server runs it: the served backend."""
    from carbon_app.serving.served import connect

    return connect(vllm_url, "carbon-demo")


@contextmanager
def vllm_serving(log_dir: Path, model: str = "assets/models/carbon-demo"):
    """`deploy/vllm/serve.sh` on `model`, as the README starts it: its URL while the block runs (the test skips
    where there is no vLLM environment, and fails with vLLM's log where it does not start)."""
    from benchmarks.server_bench import VLLM_PYTHON, start_vllm, stop_vllm

    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON} (deploy/vllm/install-cpu.sh makes it)")
    try:
        process, url = start_vllm(log_dir / "server.log", model)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        stop_vllm(process)
