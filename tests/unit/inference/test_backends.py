"""The backend interface (`model.backend.Backend`), one contract for both implementations: the bundled model
in this process, and the same model on a real vLLM server on loopback (its own environment; the integration
tier). Every test here runs against each, and asserts what the engine needs of any backend: k-mer
distributions, work fanned out in order and stoppable, one score for a substitution whichever path
reads it (a scan's shared windows, a variant's own, a genome batch's), designs that obey their masks, and
refusals that name what to do where a backend cannot do something."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from carbon_app.core.dna import BASES, read_fasta
from carbon_app.core.stopping import Stopped, checkpoint, stoppable
from carbon_app.core.tokens import dna_prompt
from carbon_app.errors import BackendError
from carbon_app.inference.generate import generate
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.score import score_variant
from carbon_app.model.backend import Backend
from tests.conftest import REPO

HBB = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence
SETUP = {"window": 300, "frames": 2, "strand_average": False}


@pytest.fixture(params=["in this process", pytest.param("on a vLLM server", marks=pytest.mark.integration)])
def backend(request) -> Backend:
    return request.getfixturevalue("demo" if request.param == "in this process" else "served")


def test_a_backend_says_where_it_runs_what_it_can_do_and_which_weights_these_are(backend):
    where = backend.capabilities.where
    assert where == "in this process" if backend.capabilities.holds_cache else where.startswith("on the server http")
    assert backend.capabilities.holds_cache or backend.capabilities.instead  # a refusal says what to do
    assert backend.weights.startswith("sha256:" if backend.capabilities.holds_cache else "served:carbon-demo@")
    described = backend.describe()
    assert described["name"] == "carbon-demo" and described["k"] == backend.k == 6
    assert described["context_bases"] == backend.max_bases == backend.max_tokens * 6


def test_window_logprobs_are_kmer_distributions_and_the_rows_asked_for_are_always_there(backend, demo):
    prefix = backend.tags.prefix(None, None)
    first = len(backend.tokenizer.encode(dna_prompt(prefix))) - 1
    prompts = [backend.tokenizer.encode(dna_prompt(prefix, HBB[1000:1000 + n])) for n in (60, 120)]
    rows = [{0, 9}, {3, 19}]
    got = [torch.cat([block for _, block in blocks]) for blocks in backend.window_logprobs(prompts, first, rows)]
    here = [torch.cat([block for _, block in blocks]) for blocks in demo.window_logprobs(prompts, first)]
    for logprobs, reference, wanted, prompt in zip(got, here, rows, prompts, strict=True):
        assert logprobs.shape == (len(prompt) - 1 - first, 4 ** 6)
        for row in wanted:
            assert torch.logsumexp(logprobs[row].double(), -1).item() == pytest.approx(0, abs=1e-4)
            torch.testing.assert_close(logprobs[row], reference[row], atol=1e-4, rtol=0)


def test_each_keeps_the_order_and_a_stop_reaches_the_work_it_fans_out(backend):
    seen = set()

    def square(n: int) -> int:
        checkpoint()
        seen.add(threading.get_ident())
        return n * n

    assert backend.each(square, list(range(20))) == [n * n for n in range(20)]
    asked = threading.Event()
    asked.set()
    with stoppable(asked), pytest.raises(Stopped):
        backend.each(square, list(range(20)))


def test_a_substitution_gets_one_score_whether_a_scan_a_variant_or_a_genome_batch_reads_it(backend, tmp_path):
    from carbon_app.genome.coordinates import parse_genomic
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.scoring import score_at, score_batch

    scan = scan_substitutions(backend, HBB, 1205, 1206, **SETUP)  # 1-based, inclusive
    for offset, pos in enumerate(range(1205, 1207)):
        for alt in BASES:
            if alt != HBB[pos - 1]:
                one = score_variant(backend, HBB, f"{pos}:{HBB[pos - 1]}>{alt}", **SETUP)
                assert scan.deltas[offset, BASES.index(alt)] == pytest.approx(one.delta, abs=1e-4)
    reference = Reference(REPO / "assets/examples/hbb.fa")
    contig = next(iter(reference.lengths))
    variants = [parse_genomic(f"{contig}:{change}", reference) for change in ("1206:A>T", "1300:CA>C")]
    batch = score_batch(backend, reference, variants, **SETUP)
    for variant, outcome in zip(variants, batch, strict=True):
        alone = score_at(backend, reference, variant, **SETUP)
        assert outcome.problem is None and outcome.delta == pytest.approx(alone.score.delta, abs=1e-4)


def test_a_greedy_design_takes_each_steps_most_likely_allowed_kmer_and_obeys_its_mask(backend):
    mask = "NNNNRRRRYYYYAAAACCCCNN"
    design = generate(backend, "ATGGCCACG", 22, temperature=0, mask=mask, mode="token")
    sequence = design.sequences[0]
    assert len(sequence) == 22 and sequence[12:20] == "AAAACCCC"
    assert set(sequence[4:8]) <= set("AG") and set(sequence[8:12]) <= set("CT")
    assert all(0.0 < p <= 1.0 for p in design.base_probs[0]) and design.provenance.weights == backend.weights


def test_work_that_needs_the_models_cache_runs_or_is_refused_with_what_to_do(backend):
    if backend.capabilities.holds_cache:
        design = generate(backend, "ATGGCC", 30, max_homopolymer=3, seed=3)
        assert "AAAA" not in design.sequences[0] and "TTTT" not in design.sequences[0]
        return
    with pytest.raises(BackendError, match=r"a design with constraints runs in this process only: design "
                                           r"constraints step back .*leave out --server \(CARBON_SERVER\)"):
        generate(backend, "ATGGCC", 30, max_homopolymer=3, seed=3)
    assert np.isfinite(score_variant(backend, HBB, "1206:A>T", **SETUP).delta)
