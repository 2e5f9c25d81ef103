"""A model in the released layout (155,776 ids, the k-mers last, the Qwen3 text tokenizer) served by a real
vLLM server started with deploy/vllm/serve.sh, whose --max-logprobs covers the DNA ids and 256 more, not the
whole vocabulary. Random weights rank text ids above most k-mers, so every exact score is refused there (a
trained Carbon model's k-mers fill the top of each DNA position); what such a server does is checked here:
how many log-probs it returns, a refused score that names the flag, and designs that keep their bases."""

from __future__ import annotations

import json

import pytest

from carbon_app.inference.generate import generate
from carbon_app.inference.score import score_variant
from carbon_app.model.bundle import load_bundle
from carbon_app.serving.served import KmersOutranked, connect
from tests.conftest import random_dna, vllm_serving


@pytest.fixture(scope="module")
def layout_model_dir(tmp_path_factory, carbon_tokenizer_dir):
    from tests.synthetic import write_model_dir

    return write_model_dir(tmp_path_factory.mktemp("models") / "carbon-small", "small", layout="carbon",
                           text_tokenizer_dir=carbon_tokenizer_dir, seed=2)


@pytest.fixture(scope="module")
def layout_server(tmp_path_factory, layout_model_dir):
    with vllm_serving(tmp_path_factory.mktemp("vllm"), str(layout_model_dir)) as url:
        yield url


def test_a_released_layout_server_is_read_right_refuses_inexact_scores_and_keeps_designs(
        layout_server, layout_model_dir, capsys, monkeypatch):
    from carbon_app.app.cli import main

    engine = load_bundle(str(layout_model_dir))
    served = connect(layout_server, str(layout_model_dir))
    kmers = engine.tokenizer.n_kmers
    # serve.sh's cap, not one more: vLLM adds a prompt's own token to its top ids where it is not among them
    dna_ids = json.loads((layout_model_dir / "dna_config.json").read_text())["dna_vocab_size"]
    assert served.served.vocab_returned == dna_ids + 256 < engine.decoder.config.vocab_size

    sequence = random_dna(600, seed=4)
    variant = f"300:{sequence[299]}>{'A' if sequence[299] != 'A' else 'C'}"
    asked, ask = [], served.server.prompt_logprobs
    monkeypatch.setattr(served.server, "prompt_logprobs",
                        lambda model, ids, top: asked.append(top) or ask(model, ids, top))
    with pytest.raises(KmersOutranked, match=r"returned [\d,]+ of the model's 4,096 k-mers at token 1 of a window "
                                             r".*--max-logprobs [\d,]+ at least \(up to the model's 155,776 ids\)"):
        score_variant(served, sequence, variant, window=120, frames=1, strand_average=False)
    # the reference's and the alternate's windows, each asked once: the 11 ids more that the server would
    # return cannot hold the thousands of k-mers missing
    assert kmers == 4096 and asked == [kmers + 256] * 2

    # a design is drawn on the server as here (greedy: the same bases); only its log-likelihood is missing, saying why
    monkeypatch.delenv("CARBON_MODEL", raising=False)
    assert main(["generate", "--model", str(layout_model_dir), "--server", layout_server, "--prompt", "ATGGCC",
                 "--bases", "24", "--temperature", "0", "--json"]) == 0
    design = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert design["sequences"] == generate(engine, "ATGGCC", 24, temperature=0).sequences
    (report,) = design["reports"]
    assert report["total"] is None and "--max-logprobs" in report["ll_missing"]
    assert main(["generate", "--model", str(layout_model_dir), "--server", layout_server, "--prompt", "ATGGCC",
                 "--bases", "24", "--seed", "7"]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith(">design_1 ") and "loglik=- rank=- (no log-likelihood: the server" in printed.err
