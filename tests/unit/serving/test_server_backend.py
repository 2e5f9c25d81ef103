"""The server backend: a real vLLM server (CPU build, its own environment) on loopback serving the bundled
model, and this project's client scoring through it; a loopback HTTP server for the client's retries and
keys. Scores through the server must equal the in-process engine's (the issue's bound: 2e-3 nats)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from carbon_app.serving.client import ServerClient, ServerError
from tests.conftest import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Flaky(BaseHTTPRequestHandler):
    """Busy twice (503), then the one model; 401 for a wrong key."""

    seen: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        _Flaky.seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != "Bearer right-key":
            self._answer(401, {"error": {"message": "bad key"}})
        elif len(_Flaky.seen) <= 2:
            self._answer(503, {"error": {"message": "warming up"}})
        else:
            self._answer(200, {"data": [{"id": "carbon-demo", "max_model_len": 256}]})

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def _serving(handler):
    """`handler` answering on a loopback port while the block runs: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_client_retries_a_busy_server_names_a_refused_key_without_showing_it_and_an_unreachable_one_fast():
    with _serving(_Flaky) as url:
        _Flaky.seen.clear()
        assert ServerClient(url, api_key="right-key").info().model == "carbon-demo"
        assert _Flaky.seen == ["Bearer right-key"] * 3  # two 503s waited out
        secret = "sk-never-shown-0123"
        client = ServerClient(url, api_key=secret)
        with pytest.raises(ServerError, match="refused the API key") as refused:
            client.info()
        assert secret not in str(refused.value) and secret not in repr(client)
    began = time.monotonic()
    with pytest.raises(ServerError, match=f"the server http://127.0.0.1:{_free_port()} cannot be reached|cannot be"):
        ServerClient(f"http://127.0.0.1:{_free_port()}").info()
    assert time.monotonic() - began < 10
    with pytest.raises(ServerError, match="is not an http:// or https:// address"):
        ServerClient("file:///etc/passwd")


def test_a_client_of_a_server_reads_a_hub_models_codec_without_its_weights(tmp_path, monkeypatch):
    """A hub model's files in the Hugging Face cache, its weights left out (the server holds them): the
    client finds them offline and reads its tokenizer, tags and config."""
    import shutil

    import huggingface_hub.constants

    from carbon_app.model.bundle import load_codec
    from carbon_app.model.hub import resolve_model_dir

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--lab--carbon-demo"
    shutil.copytree(REPO / "assets" / "models" / "carbon-demo", repo / "snapshots" / commit,
                    ignore=shutil.ignore_patterns("*.safetensors"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = resolve_model_dir("lab/carbon-demo", weights=False)
    assert path.name == commit and not list(path.glob("*.safetensors"))
    tokenizer, tags, config = load_codec(path)
    assert tokenizer.k == 6 and tokenizer.n_kmers == 4096 and "mammal" in tags.species and config.vocab_size == 4124


def test_a_designs_arguments_reach_the_plugin_as_the_engine_holds_them_and_malformed_ones_are_named(demo):
    """The request's allowed bases, written by the client and read as the plugin reads them, are the
    engine's own step masks; a malformed argument is refused with its name (the server answers 400)."""
    import torch

    from carbon_app.inference.generate import plan_generation
    from carbon_app.inference.request import DesignRequest
    from carbon_app.inference.sampling import StepMasks
    from carbon_app.serving.design_args import DesignArgs, encode_allowed

    request = DesignRequest.from_options("ATGGCCAC", 20, mask="NNRYSWKMBDHVNNNNACGT", mode="token", temperature=0.7,
                                         top_k=9, top_p=0.9, seed=1)
    plan = plan_generation(demo, request)
    sent = DesignArgs(request.sampling, demo.tokenizer.kmer_start_id, demo.k, encode_allowed(plan.allowed))
    read = DesignArgs.from_xargs({**sent.to_xargs(), "unrelated": 1})
    assert read == sent and read.params == request.sampling
    engine, plugin = StepMasks(torch.from_numpy(plan.allowed)), read.step_masks(torch.device("cpu"))
    assert len(engine) == len(plugin) == plan.n_tokens
    for step in range(plan.n_tokens):
        assert torch.equal(engine[step], plugin[step])
    assert encode_allowed(plan_generation(demo, DesignRequest.from_options("ATGGCC", 20, seed=1)).allowed) is None
    assert DesignArgs.from_xargs({"other": 1}) is None  # not a Carbon design: the plugin leaves it alone
    for bad, named in (({"carbon_k": 6}, "carbon_mode is missing"),
                       ({**sent.to_xargs(), "carbon_allowed": "f0"}, "one hex digit 1-f per generated base"),
                       ({**sent.to_xargs(), "carbon_temperature": "hot"}, "malformed"),
                       ({**sent.to_xargs(), "carbon_mode": "codon"}, "mode must be 'bp'")):
        with pytest.raises(ValueError, match=named):
            DesignArgs.from_xargs(bad)


def test_the_plugins_own_imports_are_torch_and_numpy_only_so_it_loads_in_vllms_environment():
    """vLLM's environment has no Gradio, pysam, Biopython, plotly, Ray or httpx: the plugin's modules (all but
    vLLM's own interface) must import without them."""
    import sys

    script = ("import sys; import carbon_app.serving.design_args, carbon_app.inference.sampling; "
              "print(sorted({m.split('.')[0] for m in sys.modules} & "
              "{'gradio', 'pysam', 'Bio', 'plotly', 'ray', 'httpx', 'transformers', 'dnachisel', 'pandas'}))")
    shown = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]", shown.stdout + shown.stderr


class _OnlyModels(BaseHTTPRequestHandler):
    """An OpenAI-style server: /v1/models and nothing else (404), as vLLM answers a path it does not serve."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/v1/models":
            _Flaky._answer(self, 200, {"data": [{"id": "carbon-demo", "max_model_len": 256}]})
        else:
            _Flaky._answer(self, 404, {"detail": "Not Found"})

    def log_message(self, *args):
        pass


def test_the_server_address_is_taken_as_vllms_docs_write_it_and_a_wrong_one_is_named():
    with _serving(_OnlyModels) as base:
        for given in (base, base + "/", base + "/v1", base + "/v1/", f" {base}/v1 "):
            client = ServerClient(given, tries=1)
            assert client.url == base and client.info().model == "carbon-demo", given
        with pytest.raises(ServerError, match=rf"^{base}/openai is not an inference server's address: it answered "
                                              r"HTTP 404 to /v1/models \(give the server's base URL"):
            ServerClient(base + "/openai", tries=1).info()
