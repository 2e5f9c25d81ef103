"""Speculative decoding returns the target's own output (greedy) and distribution (sampling)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from carbon_app.errors import InputError
from carbon_app.inference.generate import generate
from carbon_app.inference.marginals import log_marginals


@pytest.fixture(scope="module")
def other_draft(tmp_path_factory):
    from carbon_app.model.bundle import load_bundle
    from tests.synthetic import write_model_dir

    return load_bundle(str(write_model_dir(tmp_path_factory.mktemp("draft") / "d", seed=7)))


# at least 61 bases (10 tokens), so drafting runs (shorter runs use the target alone)
@given(prompt=st.text("ACGT", max_size=25), mask=st.text(list("ACGTNNNNRYSW"), min_size=61, max_size=200),
       mode=st.sampled_from(["bp", "token"]), samples=st.integers(1, 3), agreeing_draft=st.booleans())
def test_greedy_output_is_identical_with_masks_and_odd_lengths(compact, other_draft, prompt, mask, mode, samples,
                                                               agreeing_draft):
    options = dict(mask=mask, temperature=0, mode=mode, samples=samples)
    alone = generate(compact, prompt, len(mask), **options)
    drafted = generate(compact, prompt, len(mask), draft=compact if agreeing_draft else other_draft, **options)
    assert drafted.sequences == alone.sequences
    assert drafted.speculative.proposed >= drafted.speculative.accepted


# each example patches in its own context; it makes four designs, so CI's many examples are capped at 100
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=min(100, settings().max_examples))
@given(mask=st.text(list("ACGTNNNNNNNNRY"), min_size=61, max_size=240), temperature=st.sampled_from([0.7, 1.0, 1.5]),
       top_k=st.sampled_from([0, 50]), top_p=st.sampled_from([1.0, 0.9]), mode=st.sampled_from(["bp", "token"]),
       samples=st.integers(1, 4), seed=st.integers(0, 2**40))
@example(mask="A" * 64, temperature=0.7, top_k=0, top_p=1.0, mode="bp", samples=1, seed=0)  # ends before judged
def test_sampling_with_a_draft_makes_the_targets_own_designs_for_a_seed(compact, other_draft, monkeypatch, mask,
                                                                        temperature, top_k, top_p, mode, samples, seed):
    """Same seed, same designs, with or without the draft and whatever the timing decided:
    drafted throughout, falling back at once, or re-measuring the target every round."""
    from carbon_app.inference import speculative

    n = len(mask)
    options = dict(mask=mask, temperature=temperature, top_k=top_k, top_p=top_p, mode=mode, samples=samples,
                   seed=seed)
    alone = generate(compact, "ACGTACGGT", n, **options)
    assert generate(compact, "ACGTACGGT", n, draft=other_draft, draft_always=True, **options).sequences \
        == alone.sequences
    with monkeypatch.context() as patch:
        patch.setattr(speculative, "FALLBACK_MARGIN", 1e6)  # judged not to pay after two rounds
        dropped = generate(compact, "ACGTACGGT", n, draft=other_draft, **options)
    # judged not to pay at its first judgement, so no round drafts past it; a short design whose draft agrees
    # (a mask of fixed bases) can end before that judgement, drafted throughout
    assert dropped.sequences == alone.sequences
    assert dropped.speculative.rounds <= speculative.STALL_PROOF_ROUNDS
    with monkeypatch.context() as patch:
        patch.setattr(speculative, "FALLBACK_MARGIN", 1e-6)
        patch.setattr(speculative, "PROBE_EVERY", 1)
        probed = generate(compact, "ACGTACGGT", n, draft=other_draft, **options)
    assert probed.sequences == alone.sequences


def test_a_perfect_draft_is_always_accepted(compact):
    for temperature in (0, 1.0):
        out = generate(compact, "ACGTAC", 120, temperature=temperature, draft=compact, seed=3, samples=2)
        assert out.speculative.acceptance_rate == 1.0 and all(len(s) == 120 for s in out.sequences)


def test_sampling_keeps_the_targets_base_distribution(compact, other_draft):
    """The first two tokens are fixed by the mask (they are also the speed calibration), so the
    third token, the first one drafted, has a known distribution."""
    fixed = "GATTACAGATTA"
    ids = torch.tensor([compact.tokenizer.encode("<dna>ACGTAC" + fixed)])
    with torch.no_grad():
        logits = compact.kmer_logits(compact.hidden_states(ids)[0, -1])
    marginals = log_marginals(torch.log_softmax(logits, -1)).exp().numpy()
    counts = np.zeros((6, 4))
    for seed in range(16):
        out = generate(compact, "ACGTAC", 72, mask=fixed + "N" * 60, temperature=1.0, seed=seed, samples=64,
                       draft=other_draft)
        assert out.speculative.rounds >= 1  # the third token always comes from the first drafted round
        assert out.speculative.acceptance_rate < 1.0  # the draft really is a different model
        for seq in out.sequences:
            for j, base in enumerate(seq[12:18]):
                counts[j, "ATCG".index(base)] += 1
    freq = counts / counts.sum(axis=1, keepdims=True)
    assert np.abs(freq - marginals).max() < 4.5 * np.sqrt(0.25 / 1024)


def test_incompatible_draft_is_refused(compact, carbon):
    with pytest.raises(InputError, match="cannot draft"):
        generate(compact, "ACGTAC", 12, draft=carbon)


def test_short_runs_use_the_target_alone(compact):
    out = generate(compact, "ACGTAC", 30, draft=compact, seed=2)
    assert out.speculative.proposed == 0 and "too few" in out.speculative.fallback_reason
    assert out.sequences == generate(compact, "ACGTAC", 30, seed=2).sequences


def test_a_draft_that_does_not_pay_is_dropped_with_a_reason(compact, other_draft, monkeypatch):
    """Made not to pay (it would have to be a million times faster): the target finishes alone,
    says why, and the output is the target's."""
    from carbon_app.inference import speculative

    monkeypatch.setattr(speculative, "FALLBACK_MARGIN", 1e6)
    alone = generate(compact, "ACGTACGGT", 300, temperature=0)
    drafted = generate(compact, "ACGTACGGT", 300, temperature=0, draft=other_draft)
    assert drafted.sequences == alone.sequences
    stats = drafted.speculative
    assert "did not pay" in stats.fallback_reason and stats.rounds >= 2 and stats.plain_ms_per_token > 0
    assert stats.plain_tokens > 0 and stats.plain_tokens + sum(stats.draft_lengths) >= 50


def _policy(rounds_ms: list[float], plain_ms: float, accepted: int, always: bool = False):
    """A DraftPolicy fed a plain speed and drafted rounds of one token each: its decisions, in order."""
    from carbon_app.inference.speculative import DraftPolicy, SpeculativeStats

    stats = SpeculativeStats(draft_model="d")
    policy = DraftPolicy(stats, n_steps=500, always=always)
    for _ in range(3):
        policy.plain_step_took(plain_ms / 1000)
    decisions = []
    for ms in rounds_ms:
        decision = policy.next()
        decisions.append(decision)
        if decision == "alone":
            break
        if decision == "probe":
            policy.plain_step_took(plain_ms / 1000)
            continue
        stats.rounds += 1
        stats.proposed += 1
        stats.accepted += accepted
        policy.round_took(ms / 1000, 1)
    return decisions, stats


def test_the_draft_policy_drops_a_slow_draft_keeps_a_fast_one_and_forgives_one_stall():
    from carbon_app.inference.speculative import MIN_ROUNDS_BEFORE_FALLBACK, PROBE_EVERY, STALL_PROOF_ROUNDS

    useless, stats = _policy([20.0] * 10, plain_ms=10.0, accepted=0)  # nothing accepted, twice as slow
    assert useless == ["draft"] * MIN_ROUNDS_BEFORE_FALLBACK + ["alone"] and "did not pay" in stats.fallback_reason
    slow, _ = _policy([20.0] * 10, plain_ms=10.0, accepted=1)  # accepted, but slow: judged on more rounds
    assert slow == ["draft"] * STALL_PROOF_ROUNDS + ["alone"]
    fast, stats = _policy([5.0] * 30, plain_ms=10.0, accepted=1)
    assert "alone" not in fast and stats.fallback_reason is None
    assert fast.count("probe") >= 2 and fast[PROBE_EVERY] == "probe"  # the target re-measured every 8 rounds
    stalled, stats = _policy([5.0, 5.0, 200.0, 5.0, 5.0, 5.0, 5.0], plain_ms=10.0, accepted=1)
    assert "alone" not in stalled and stats.fallback_reason is None  # the slowest round is left out
    always, _ = _policy([50.0] * 12, plain_ms=10.0, accepted=0, always=True)
    assert set(always) == {"draft"}


def test_speed_probes_between_rounds_keep_the_output_exact(compact, other_draft, monkeypatch):
    """Every few rounds the target makes one token alone to re-measure the speed to beat;
    those tokens are the target's own, so greedy output stays identical."""
    from carbon_app.inference import speculative

    monkeypatch.setattr(speculative, "FALLBACK_MARGIN", 1e-6)  # never judged not to pay: probes keep coming
    monkeypatch.setattr(speculative, "PROBE_EVERY", 2)
    for mode in ("bp", "token"):
        alone = generate(compact, "ACGTACGGT", 401, temperature=0, mode=mode, samples=2)
        drafted = generate(compact, "ACGTACGGT", 401, temperature=0, mode=mode, samples=2, draft=other_draft)
        stats = drafted.speculative
        assert drafted.sequences == alone.sequences and stats.fallback_reason is None
        assert stats.plain_tokens >= speculative.CALIBRATION_STEPS + stats.rounds // 2 - 1


def test_the_drafted_speed_leaves_out_one_stalled_round_once_there_are_enough():
    from collections import deque

    from carbon_app.inference.speculative import _drafted_ms_per_token

    steady = [(0.010, 5)] * 7
    assert _drafted_ms_per_token(deque(steady + [(0.500, 2)])) == pytest.approx(2.0)  # the stall is left out
    assert _drafted_ms_per_token(deque([(0.010, 5), (0.500, 2)])) == pytest.approx(1000 * 0.51 / 7)  # too few
    slow = [(0.030, 5)] * 8  # a draft that is slow in every round stays slow
    assert _drafted_ms_per_token(deque(slow)) == pytest.approx(6.0)
