"""The server backend: a real vLLM server (CPU build, its own environment) on loopback serving the bundled
model, and this project's client scoring through it; a loopback HTTP server for the client's retries and
keys. Scores through the server must equal the in-process engine's (the issue's bound: 2e-3 nats)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from carbon_app.core.dna import read_fasta
from carbon_app.inference.score import score_sequence, score_variant
from carbon_app.serving.client import ServerClient, ServerError

from .conftest import REPO

HBB = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence
VLLM_PYTHON = Path(os.environ.get("CARBON_VLLM_PYTHON") or REPO / ".vllm-venv" / "bin" / "python")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    """`deploy/vllm/serve.sh` on the bundled model, as the README starts it."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM environment at {VLLM_PYTHON} (deploy/vllm/install-cpu.sh makes it)")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(REPO / "deploy" / "vllm" / "serve.sh"), "assets/models/carbon-demo", str(port)],
                                   cwd=REPO, env={**os.environ, "VLLM_PYTHON": str(VLLM_PYTHON)}, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    try:
        while time.time() < deadline:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                ServerClient(url, tries=1).info()
                break
            except ServerError:
                time.sleep(2)
        else:
            pytest.fail(f"vLLM did not start in 300 s: {log.read_text()[-3000:]}")
        yield url
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=60)


@pytest.fixture(scope="module")
def served(vllm_url):
    from carbon_app.serving.served import connect

    return connect(vllm_url, "carbon-demo")


@pytest.mark.integration
def test_scores_through_the_server_equal_the_engines(served, demo):
    deletion = f"1300:{HBB[1299:1301]}>{HBB[1299]}"
    for variant, options in (("1206:A>T", {"window": 300, "frames": 1, "strand_average": False}),
                             ("1205:G>A", {"window": 600, "frames": 2, "strand_average": False, "method": "chain",
                                          "delta_radius": "whole"}),
                             (deletion, {"window": 300, "frames": 1, "strand_average": False, "method": "marginal"})):
        remote, local = score_variant(served, HBB, variant, **options), score_variant(demo, HBB, variant, **options)
        assert remote.delta == pytest.approx(local.delta, abs=2e-3) and abs(remote.delta - local.delta) < 1e-4
        assert remote.spec == local.spec and remote.window_start == local.window_start
        assert max(abs(a - b) for a, b in zip(remote.ref_logprobs, local.ref_logprobs, strict=True)) < 1e-4
    whole_remote, whole_local = score_sequence(served, HBB[1000:1300]), score_sequence(demo, HBB[1000:1300])
    assert whole_remote.total == pytest.approx(whole_local.total, abs=2e-3)


@pytest.mark.integration
def test_a_server_that_returns_too_few_logprobs_is_refused_where_the_missing_mass_matters(served):
    few = replace(served, served=replace(served.served, vocab_returned=50))
    with pytest.raises(ServerError, match=r"returns the 50 most likely of the model's 4,124 ids a position.*"
                                          r"--max-logprobs 4124 or more"):
        score_variant(few, HBB, "1206:A>T", window=300, frames=1, strand_average=False)


@pytest.mark.integration
def test_the_command_line_scores_through_the_server_and_refuses_what_it_cannot_run_there(vllm_url, demo, capsys,
                                                                                         monkeypatch):
    from carbon_app.app.cli import main

    monkeypatch.delenv("CARBON_MODEL", raising=False)
    assert main(["score", "--server", vllm_url, "--fasta", str(REPO / "assets/examples/hbb.fa"), "--variant",
                 "1206:A>T", "--window", "300", "--frames", "1", "--json"]) == 0, capsys.readouterr().err
    local = score_variant(demo, HBB, "1206:A>T", window=300, frames=1)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["delta"] == pytest.approx(local.delta, abs=1e-4)
    assert main(["generate", "--server", vllm_url, "--bases", "12"]) == 2
    assert "generation runs in this process only" in capsys.readouterr().err
    monkeypatch.setenv("CARBON_SERVER", vllm_url)  # the setting, as a deployment gives it
    assert main(["score", "--model", "carbon-demo-draft", "--sequence", "ACGTACGTAC"]) == 2
    refused = capsys.readouterr().err
    assert "serves 'carbon-demo'" in refused and "not carbon-demo-draft" in refused


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


def test_the_client_retries_a_busy_server_names_a_refused_key_without_showing_it_and_an_unreachable_one_fast():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _Flaky.seen.clear()
        assert ServerClient(url, api_key="right-key").info().model == "carbon-demo"
        assert _Flaky.seen == ["Bearer right-key"] * 3  # two 503s waited out
        secret = "sk-never-shown-0123"
        client = ServerClient(url, api_key=secret)
        with pytest.raises(ServerError, match="refused the API key") as refused:
            client.info()
        assert secret not in str(refused.value) and secret not in repr(client)
    finally:
        server.shutdown()
    began = time.monotonic()
    with pytest.raises(ServerError, match=f"the server http://127.0.0.1:{_free_port()} cannot be reached|cannot be"):
        ServerClient(f"http://127.0.0.1:{_free_port()}").info()
    assert time.monotonic() - began < 10
    with pytest.raises(ServerError, match="is not an http:// or https:// address"):
        ServerClient("file:///etc/passwd")


@pytest.mark.integration
def test_the_app_with_carbon_server_scores_there_shows_the_server_and_refuses_what_runs_here_only(vllm_url, demo,
                                                                                                  tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from .conftest import launch_app

    process, url = launch_app(tmp_path, CARBON_SERVER=vllm_url)
    try:
        client = Client(url, verbose=False)
        status = client.predict(api_name="/models")[2]
        assert status["server"]["answers"] and status["server"]["model"] == "carbon-demo"
        assert status["configured"] == ["carbon-demo"] and status["loaded"] == []  # nothing loaded here
        scored = client.predict("carbon-demo", "none", "none", HBB, None, "1206:A>T", "", 300, False, "marginal",
                                "none", "", 0, api_name="/score_variant")[-1]
        local = score_variant(demo, HBB, "1206:A>T", window=300, strand_average=False, method="marginal")
        assert scored["delta"] == pytest.approx(local.delta, abs=1e-4)
        with pytest.raises(AppError, match="generation runs in this process only"):
            client.predict("carbon-demo", "none", "none", "ATGGCC", None, 12, "", "bp", 0, 0, 1.0, 0, 1, False,
                           api_name="/generate")
    finally:
        process.terminate()
        process.wait(timeout=60)


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
