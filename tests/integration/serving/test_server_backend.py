"""The server backend: a real vLLM server (CPU build, its own environment) on loopback serving the bundled
model, and this project's client scoring through it; a loopback HTTP server for the client's retries and
keys. Scores through the server must equal the in-process engine's (the issue's bound: 2e-3 nats)."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.soak import visitor
from carbon_app.core.dna import read_fasta
from carbon_app.errors import BackendError
from carbon_app.inference.score import score_sequence, score_variant
from carbon_app.serving.client import ServerClient, ServerError
from tests.conftest import REPO, table_lines

HBB = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def test_designs_through_the_server_are_the_engines_greedy_ones_and_draw_from_its_distributions(served, demo):
    """With Carbon's plugin on the server: greedy designs (masked, fixed leftover bases, both modes) are the
    in-process engine's, base for base and probability for probability; a sampled design's every step was
    drawn from the distribution the engine gives the same tokens; a seed names one design there."""
    import torch

    from carbon_app.inference.generate import generate, plan_generation
    from carbon_app.inference.marginals import log_marginals
    from carbon_app.inference.request import DesignRequest
    from carbon_app.inference.sampling import StepMasks, step_logprobs

    assert served.takes_designs
    for options in ({"mode": "bp"}, {"mode": "token"}, {"mask": "NNNNRRRRYYYYAAAACCCCNN", "mode": "bp"}):
        remote, local = (generate(model, "ATGGCCACG", 22, temperature=0, **options) for model in (served, demo))
        assert remote.sequences == local.sequences
        np.testing.assert_allclose(remote.base_probs, local.base_probs, atol=1e-4)
    assert remote.sequences[0].endswith("AAAACCCC", 0, 20)
    request = DesignRequest.from_options("ATGGCCACG", 22, seed=11, samples=3, mode="bp", temperature=0.8, top_k=900,
                                         top_p=0.95, mask="NNNNNNNNNNNNNNNNNNNNSS")
    remote = generate(served, request.prompt, 22, mask=request.mask, seed=11, samples=3, temperature=0.8, top_k=900,
                      top_p=0.95)
    assert len(set(remote.sequences)) == 3 and all(seq[-2:] in {"GG", "GC", "CG", "CC"} for seq in remote.sequences)
    again = generate(served, request.prompt, 22, mask=request.mask, seed=11, samples=3, temperature=0.8, top_k=900,
                     top_p=0.95)
    assert again.sequences == remote.sequences
    plan = plan_generation(demo, request)
    masks = StepMasks(torch.from_numpy(plan.allowed))
    for row, seq in enumerate(remote.sequences):
        made = (plan.fixed_bases + seq)[: (plan.n_tokens - 1) * demo.k]  # the tokens read before the last
        ids = plan.prompt_ids + demo.tokenizer.kmer_ids(made)
        hidden = demo.hidden_states(torch.tensor([ids]))[0, len(plan.prompt_ids) - 1:]
        engine = torch.cat([log_marginals(step_logprobs(demo.kmer_logits(hidden[step:step + 1]), request.sampling,
                                                        masks[step]), tails="drop")[0]
                            for step in range(plan.n_tokens)]).exp()
        start = len(plan.fixed_bases)
        assert torch.allclose(torch.from_numpy(remote.base_marginals[row]), engine[start:start + 22], atol=1e-4)


def test_a_server_without_the_plugin_designs_in_token_mode_and_refuses_what_needs_it(served, demo):
    from carbon_app.inference.generate import generate

    stock = replace(served, takes_designs=False)  # requests without Carbon's arguments: vLLM's own sampler
    remote, local = (generate(model, "ATGGCC", 18, temperature=0, mode="token") for model in (stock, demo))
    assert remote.sequences == local.sequences
    np.testing.assert_allclose(remote.base_probs, local.base_probs, atol=1e-4)
    sampled = generate(stock, "ATGGCC", 18, mode="token", seed=5, samples=2, top_k=40)
    assert len(set(sampled.sequences)) == 2
    with pytest.raises(ServerError, match=r"base-level sampling \(mode 'bp'\) needs Carbon's plugin on the server"):
        generate(stock, "ATGGCC", 18)
    with pytest.raises(ServerError, match="a mask, or a prompt that is not a whole number of k-mers"):
        generate(stock, "ATGGCCA", 18, mode="token")
    with pytest.raises(BackendError, match="a design with constraints runs in this process only: design constraints "
                                          "step back"):
        generate(served, "ATGGCC", 18, max_homopolymer=3)


def test_scans_contexts_and_region_scans_through_the_server_equal_the_engines(served, demo, tmp_path):
    """No KV cache is lent by a server, so each substitution is read alone there, in the windows the
    in-process scan shares: the same deltas, NaN in the same places, the same rankings."""
    from carbon_app.genome.coordinates import parse_genomic
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.regions import scan_regions
    from carbon_app.genome.scoring import score_batch
    from carbon_app.inference.annotate import describe_variant
    from carbon_app.inference.scan import scan_substitutions

    for options in ({"window": 300, "frames": 2, "strand_average": False},
                    {"window": 300, "frames": 1, "strand_average": True, "method": "marginal", "delta_radius": 12}):
        remote, local = (scan_substitutions(model, HBB, 1204, 1206, **options) for model in (served, demo))
        assert np.array_equal(np.isnan(remote.deltas), np.isnan(local.deltas)) and np.isnan(local.deltas).sum() == 3
        np.testing.assert_allclose(remote.deltas, local.deltas, atol=1e-4)
        assert remote.spec == local.spec and remote.prompt_text == local.prompt_text
    options = {"window": 300, "frames": 1, "strand_average": False}
    remote, local = (describe_variant(model, HBB, "1206:A>T", context=2, **options) for model in (served, demo))
    assert remote.context.count == local.context.count == 14
    np.testing.assert_allclose(np.sort(remote.context.others), np.sort(local.context.others), atol=1e-4)
    reference = Reference(REPO / "assets/examples/hbb.fa")
    contig = next(iter(reference.lengths))
    variants = [parse_genomic(f"{contig}:{change}", reference) for change in ("1206:A>T", "1209:A>G", "1300:CA>C")]
    remote, local = (score_batch(model, reference, variants, context=2, **options) for model in (served, demo))
    for there, here in zip(remote, local, strict=True):
        assert there.delta == pytest.approx(here.delta, abs=1e-4) and there.window == here.window
        assert (there.context is None) == (here.context is None)
        if here.context:  # on the contig, either way
            assert (there.context.start, there.context.end, there.context.count) == (
                here.context.start, here.context.end, here.context.count)
            assert there.context.more_damaging_than == pytest.approx(here.context.more_damaging_than)
    bed = tmp_path / "regions.bed"
    bed.write_text(f"{contig}\t1203\t1205\tsite\n")
    for name, model in (("there", served), ("here", demo)):
        scan_regions(model, reference, bed, tmp_path / f"{name}.tsv", **options)
    there, here = ([line.split("\t") for line in table_lines(tmp_path / f"{name}.tsv")[1:]]
                   for name in ("there", "here"))
    assert len(there) == len(here) == 6
    assert max(abs(float(a[5]) - float(b[5])) for a, b in zip(there, here, strict=True)) < 1e-4


def test_a_server_that_returns_too_few_logprobs_is_refused_where_a_kmer_is_missing(served):
    few = replace(served, served=replace(served.served, vocab_returned=50))
    with pytest.raises(ServerError, match=r"returned \d+ of the model's 4,096 k-mers at token 1 of a window \(it "
                                          r"returns the 50 most likely ids a position.*--max-logprobs 4124 at least"):
        score_variant(few, HBB, "1206:A>T", window=300, frames=1, strand_average=False)


def test_kmers_outranked_in_the_first_ask_are_asked_again_with_all_the_server_returns(served, demo, monkeypatch):
    """A model whose other ids outrank some k-mers (random weights in the released layout): the window is asked
    again with all the server returns, and the delta is the engine's, not refused."""
    from carbon_app.serving import served as served_module
    from carbon_app.serving.served import connect

    monkeypatch.setattr(served_module, "LOGPROB_HEADROOM", 50 - served.tokenizer.n_kmers)  # asks 50 ids first
    fresh = connect(served.served.url, "carbon-demo")  # nothing kept from other tests' windows
    asked, ask = {}, fresh.server.prompt_logprobs  # per window (its ids): the tops asked, in order

    def counted(model, ids, top):
        asked.setdefault(tuple(ids), []).append(top)  # windows are asked from several threads at once
        return ask(model, ids, top)

    monkeypatch.setattr(fresh.server, "prompt_logprobs", counted)
    there = score_variant(fresh, HBB, "1206:A>T", window=300, frames=1, strand_average=False)
    here = score_variant(demo, HBB, "1206:A>T", window=300, frames=1, strand_average=False)
    assert there.delta == pytest.approx(here.delta, abs=1e-4)
    assert asked and all(tops == [50, fresh.served.vocab_returned] for tops in asked.values()), asked


def test_the_command_line_scores_through_the_server_and_refuses_what_it_cannot_run_there(vllm_url, demo, capsys,
                                                                                         monkeypatch):
    from carbon_app.app.cli import main
    from carbon_app.inference.generate import generate

    monkeypatch.delenv("CARBON_MODEL", raising=False)
    assert main(["score", "--server", vllm_url, "--fasta", str(REPO / "assets/examples/hbb.fa"), "--variant",
                 "1206:A>T", "--window", "300", "--frames", "1", "--json"]) == 0, capsys.readouterr().err
    local = score_variant(demo, HBB, "1206:A>T", window=300, frames=1)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["delta"] == pytest.approx(local.delta, abs=1e-4)
    assert main(["generate", "--server", vllm_url, "--bases", "12", "--temperature", "0", "--json"]) == 0
    design = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert design["sequences"] == generate(demo, "", 12, temperature=0).sequences
    assert main(["generate", "--server", vllm_url, "--bases", "12", "--avoid", "EcoRI"]) == 2
    assert "a design with constraints runs in this process only" in capsys.readouterr().err
    monkeypatch.setenv("CARBON_SERVER", vllm_url)  # the setting, as a deployment gives it
    assert main(["score", "--model", "carbon-demo-draft", "--sequence", "ACGTACGTAC"]) == 2
    refused = capsys.readouterr().err
    assert "serves 'carbon-demo'" in refused and "not carbon-demo-draft" in refused


def test_a_vcf_through_the_server_gets_the_engines_deltas_and_a_failing_server_flags_each_record(vllm_url, served,
                                                                                              tmp_path, capsys):
    from carbon_app.app.cli import main
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.vcf import score_vcf

    vcf, fasta = REPO / "assets/examples/hbb_variants.vcf", REPO / "assets/examples/hbb.fa"
    tables = {}
    for where, server in (("here", []), ("there", ["--server", vllm_url])):
        tables[where] = tmp_path / f"{where}.tsv"
        assert main(["score-vcf", *server, "--model", "carbon-demo", "--reference", str(fasta), "--vcf", str(vcf),
                     "--out", str(tmp_path / f"{where}.vcf"), "--tsv", str(tables[where]), "--frames", "2"]) == 0
    rows = {where: [line.split("\t") for line in table_lines(table)[1:]]
            for where, table in tables.items()}
    deltas = [(float(a[6]), float(b[6])) for a, b in zip(rows["here"], rows["there"], strict=True) if a[6]]
    assert len(deltas) == 7 and max(abs(a - b) for a, b in deltas) < 1e-4
    assert [row[7] for row in rows["there"]] == [row[7] for row in rows["here"]]  # the REF mismatch flagged alike
    capsys.readouterr()
    gone = replace(served, server=ServerClient(f"http://127.0.0.1:{_free_port()}", tries=1))
    summary = score_vcf(gone, Reference(fasta), vcf, tmp_path / "gone.vcf", tmp_path / "gone.tsv", frames=2)
    assert summary.alts == 8 and summary.problems["server_error"] == 7  # flagged, written back, not lost
    kept = (tmp_path / "gone.tsv").read_text()
    assert kept.count("cannot be reached") == 7 and kept.count("REF_mismatch") == 1


def test_the_app_with_carbon_server_scores_and_designs_there_and_refuses_what_runs_here_only(vllm_url, demo, tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from carbon_app.inference.generate import generate
    from carbon_app.inference.scan import scan_substitutions
    from tests.conftest import launch_app

    process, url = launch_app(tmp_path, CARBON_SERVER=vllm_url, CARBON_SERVER_CONCURRENCY="3")
    try:
        client = Client(url, verbose=False)
        status = client.predict(api_name="/models")[2]
        assert status["server"]["answers"] and status["server"]["model"] == "carbon-demo"
        assert status["configured"] == ["carbon-demo"] and status["loaded"] == []  # nothing loaded here
        scored = client.predict("carbon-demo", "none", "none", HBB, None, "1206:A>T", "", 300, False, "marginal",
                                "none", "", 0, api_name="/score_variant")[-1]
        local = score_variant(demo, HBB, "1206:A>T", window=300, strand_average=False, method="marginal")
        assert scored["delta"] == pytest.approx(local.delta, abs=1e-4)
        rows = client.predict("carbon-demo", "none", "none", HBB, None, 1205, 1206, 300, "marginal", None, False,
                              api_name="/scan")[-1]["rows"]
        here = scan_substitutions(demo, HBB, 1205, 1206, window=300, method="marginal", strand_average=False).rows()
        assert [row[:3] for row in rows] == [list(row[:3]) for row in here] and len(rows) == 6
        assert max(abs(row[3] - near[3]) for row, near in zip(rows, here, strict=True)) < 1e-4
        design = client.predict("carbon-demo", "none", "none", "ATGGCC", None, 12, "", "bp", 0, 0, 1.0, 0, 1, False,
                                api_name="/generate")[-1]
        assert design["sequences"] == generate(demo, "ATGGCC", 12, temperature=0).sequences
        with pytest.raises(AppError, match="speculative decoding .*runs in this process only"):
            client.predict("carbon-demo", "none", "none", "ATGGCC", None, 12, "", "bp", 0, 0, 1.0, 0, 1, True,
                           api_name="/generate")
        # many users at once: up to CARBON_SERVER_CONCURRENCY requests run together, the rest wait their turn
        jobs = [Client(url, verbose=False, headers=visitor(seed)).submit(
            "carbon-demo", "none", "none", "", None, 240, "", "bp", 0.9, 0, 1.0, seed, 1, False, api_name="/generate")
            for seed in range(5)]  # five people
        together = set()
        while not all(job.done() for job in jobs):
            together.add(client.predict(api_name="/models")[2]["requests_running"])
            time.sleep(0.05)
        designs = [job.result()[-1]["sequences"][0] for job in jobs]
        assert max(together) == 3 and len(set(designs)) == 5 and {len(d) for d in designs} == {240}
    finally:
        process.terminate()
        process.wait(timeout=60)


