"""Speculative decoding: a small draft proposes 6-mers, the target checks them in one pass.

Both models draw from the same processed distribution (`sampling.step_logprobs`:
masks, temperature, top-k/top-p and, in bp mode, the factorised base-level
distribution) and, when sampling, with the same random numbers for the same
token (`sampling.StepNoise`: token i is argmax(log p - log E_i), E_i fixed by
the seed and i). One rule then serves greedy search and sampling: a proposal
is accepted while it equals the token the target itself picks at that
position, and the first disagreement is replaced by the target's pick. Every
token kept is therefore the one the target alone would have made with the same
seed: the output is identical with and without the draft, so its distribution
is the target's, and no timing decision (calibration, fall-back) can change it.

(The textbook rule, accepting x with probability min(1, p(x)/q(x)), accepts a
little more often, but its output depends on which tokens were drafted, so a
seed would no longer name one design.)

With several samples, each round keeps the tokens every row accepted; at the
first position some row rejected, every row takes the target's pick (equal to
the proposal where the row accepted it). The draft length adapts to how much
is accepted, and the statistics of the run come back as data.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field

import torch

from ..model.bundle import ModelBundle
from ..model.graphs import MAX_GRAPHED_TOKENS, forward_over
from ..model.kv import preallocated_cache
from .constraints import ConstraintChecker, constrained_logprobs, path_allowed
from .sampling import SamplingParams, StepMasks, StepNoise, choose, step_logprobs

# A round's draft grows by one token after a round wholly accepted, up to MAX_DRAFT: its verify pass of
# MAX_DRAFT + 1 tokens is the longest a GPU replays as a graph.
MIN_DRAFT, MAX_DRAFT = 1, MAX_GRAPHED_TOKENS - 1
CALIBRATION_STEPS = 2  # plain target steps that measure the speed to beat
MIN_ROUNDS_BEFORE_FALLBACK = 2  # for a draft that has had nothing accepted
STALL_PROOF_ROUNDS = 4  # a draft that agrees is judged on at least this many rounds, the slowest left out
FALLBACK_MARGIN = 0.95  # the draft must be at least 5% faster per token than the target alone
MIN_SPECULATIVE_TOKENS = 10  # below this, rounds are too few to measure or to win back their cost
PROBE_EVERY = 8  # drafted rounds between plain target steps that re-measure the speed to beat
# Both speeds are judged robustly and alike, so one stall on a busy machine neither condemns
# the draft nor flatters the target: the speed to beat is the median of the latest plain steps,
# the drafted speed is over the latest rounds less the slowest one.
PLAIN_SAMPLES = 3  # the speed to beat: the median of this many latest plain steps
RECENT_ROUNDS = 8  # the drafted speed: over this many latest rounds, the slowest left out


@dataclass
class SpeculativeStats:
    draft_model: str
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    draft_lengths: list[int] = field(default_factory=list)
    plain_tokens: int = 0  # tokens the target made alone: calibration, speed probes, fall-back
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    plain_ms_per_token: float | None = None  # the target alone, measured in this run
    speculative_ms_per_token: float | None = None
    fallback_reason: str | None = None

    @property
    def estimated_speedup(self) -> float | None:
        if self.plain_ms_per_token and self.speculative_ms_per_token:
            return self.plain_ms_per_token / self.speculative_ms_per_token
        return None

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(acceptance_rate=self.acceptance_rate, mean_accepted_per_round=self.mean_accepted_per_round,
                    estimated_speedup=self.estimated_speedup)
        return data


@contextmanager
def _timed(total: list[float], device: torch.device):
    """Add the wall time of the block (GPU work included) to total[0]."""
    began = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    total[0] += time.perf_counter() - began


def _drafted_ms_per_token(rounds: deque[tuple[float, int]]) -> float:
    """Milliseconds per token over (seconds, tokens) rounds, leaving out the slowest per token
    once there are enough rounds for one to be a stall rather than the draft's real speed."""
    kept = sorted(rounds, key=lambda r: r[0] / r[1])[:-1] if len(rounds) >= STALL_PROOF_ROUNDS else list(rounds)
    return 1000 * sum(t for t, _ in kept) / sum(n for _, n in kept)


class DraftPolicy:
    """When to draft: calibration, periodic re-measurement of the target alone, and the fall-back.

    Keeps the timing side of speculative decoding apart from the verify-and-accept
    core, and only ever decides *who* makes the next tokens, never which tokens.
    """

    def __init__(self, stats: SpeculativeStats, n_steps: int, always: bool):
        self.stats, self.always = stats, always
        self.plain_times: list[float] = []
        self.recent: deque[tuple[float, int]] = deque(maxlen=RECENT_ROUNDS)  # (seconds, tokens), latest rounds
        self.spec_seconds, self.spec_tokens = 0.0, 0
        self.probed_at = 0  # the round after which the target last ran a plain step
        if n_steps - min(CALIBRATION_STEPS, n_steps) < MIN_SPECULATIVE_TOKENS and not always:
            stats.fallback_reason = f"{n_steps} tokens are too few for drafting to pay off: the target ran alone"

    def plain_step_took(self, seconds: float) -> None:
        self.plain_times.append(seconds)
        self.stats.plain_tokens += 1
        self.stats.plain_ms_per_token = 1000 * statistics.median(self.plain_times[-PLAIN_SAMPLES:])

    def round_took(self, seconds: float, tokens: int) -> None:
        self.recent.append((seconds, tokens))
        self.spec_seconds += seconds
        self.spec_tokens += tokens
        self.stats.speculative_ms_per_token = 1000 * self.spec_seconds / self.spec_tokens

    def next(self) -> str:
        """'draft' (a drafted round), 'probe' (one plain step to re-measure the target) or 'alone'."""
        stats = self.stats
        judge_after = MIN_ROUNDS_BEFORE_FALLBACK if stats.accepted == 0 else STALL_PROOF_ROUNDS
        if not self.always and stats.fallback_reason is None and stats.rounds >= judge_after:
            recent_ms = _drafted_ms_per_token(self.recent)
            if recent_ms > stats.plain_ms_per_token / FALLBACK_MARGIN:
                stats.fallback_reason = (
                    f"the draft did not pay ({recent_ms:.1f} ms per token with it over the last {len(self.recent)} "
                    f"rounds, {stats.plain_ms_per_token:.1f} ms alone, {100 * stats.acceptance_rate:.0f}% "
                    "accepted): the target finished alone")
            elif stats.rounds - self.probed_at >= PROBE_EVERY:  # keep the speed to beat current as load moves
                self.probed_at = stats.rounds
                return "probe"
        return "alone" if stats.fallback_reason is not None else "draft"


def accepted_length(proposals: torch.Tensor, picks: torch.Tensor) -> tuple[int, torch.Tensor]:
    """How many leading proposals [S, gamma] every row keeps (each equal to the target's own pick
    [S, gamma] there), and each row's own count: the verify-and-accept rule."""
    per_row = torch.cumprod((proposals == picks).int(), dim=1).sum(dim=1)
    return int(per_row.min()), per_row


@torch.inference_mode()
def speculative_decode_kmers(
    target: ModelBundle,
    draft: ModelBundle,
    prompt_ids: list[int],
    allowed: torch.Tensor,
    params: SamplingParams,
    samples: int,
    noise: StepNoise | None,
    stats: SpeculativeStats,
    draft_length: int = 4,
    always: bool = False,
    checker: ConstraintChecker | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Same contract as `generate.decode_kmers`: yields (k-mer indices [samples],
    target log-probs [samples, 4^k]) per generated token, in order. `always`
    keeps drafting where it would not pay (for checks of exactness). With design
    constraints (`checker`) each token's mask follows the path it extends, for the
    draft's proposals and the target's check alike; a dead end raises `DeadEnd`
    (a drafted round cannot step back: the caller makes the design again alone)."""
    device, kmer_start = target.device, target.tokenizer.kmer_start_id
    n_steps = allowed.shape[0]
    masks = StepMasks(allowed)
    t_time, d_time = [0.0], [0.0]
    texts = [""] * samples  # each row's generated bases so far, for the constraints' masks

    def distribution(logits: torch.Tensor, step: int, paths: list[str]) -> torch.Tensor:
        """The log-probs to draw token `step` from, for rows whose generated bases are `paths`."""
        if checker is None:
            return step_logprobs(logits, params, masks[step])
        return constrained_logprobs(logits, params, path_allowed(checker, step, paths), checker)

    def extended(paths: list[str], tokens: torch.Tensor) -> list[str]:
        return paths if checker is None else checker.extended(paths, tokens)

    # Caches hold everything but the newest token ("pending"), which the next round feeds first.
    ids = torch.tensor([prompt_ids], device=device)
    capacity = len(prompt_ids) + n_steps + MAX_DRAFT  # a verify pass writes up to MAX_DRAFT + 1, then crops
    t_cache = preallocated_cache(target.decoder.config, capacity)
    d_cache = preallocated_cache(draft.decoder.config, capacity)
    with _timed(t_time, device):
        if ids.shape[1] > 1:
            target.hidden_states(ids[:, :-1], t_cache)
    with _timed(d_time, device):
        if ids.shape[1] > 1:
            draft.hidden_states(ids[:, :-1], d_cache)
    if samples > 1:
        t_cache.batch_repeat_interleave(samples)
        d_cache.batch_repeat_interleave(samples)
    t_forward, d_forward = forward_over(target, t_cache, samples), forward_over(draft, d_cache, samples)
    pending = ids[:, -1].expand(samples)  # the target's next input
    draft_feed = pending.unsqueeze(1)  # the draft's next inputs: tokens it has not seen yet
    done = 0
    policy = DraftPolicy(stats, n_steps, always)

    def plain_tokens(count: int, timed: bool = True):
        """`count` tokens from the target alone. Timed ones (calibration, probes) are each timed with the
        caller's work on it, as the drafted rounds are, so the two speeds compare like for like; after a
        fall-back they are not, since waiting for the GPU at every token would keep the host from
        queueing the next one and make the fall-back slower than the target alone."""
        nonlocal done, pending, draft_feed, texts
        for _ in range(count):
            began = time.perf_counter()
            with _timed(t_time, device) if timed else nullcontext():
                hidden = t_forward(pending.unsqueeze(1))[:, -1]
                p = distribution(target.kmer_logits(hidden), done, texts)
                token = choose(p, noise(done) if noise else None)
            texts = extended(texts, token)
            yield token, p
            if timed:
                policy.plain_step_took(time.perf_counter() - began)
            else:
                stats.plain_tokens += 1
            done += 1
            if stats.fallback_reason is None:  # the draft will read these tokens when it next proposes
                draft_feed = torch.cat([draft_feed, (token + kmer_start).unsqueeze(1)], dim=1)
            pending = token + kmer_start

    yield from plain_tokens(min(CALIBRATION_STEPS, n_steps))
    while done < n_steps:
        action = policy.next()
        if action == "probe":
            yield from plain_tokens(1)
            continue
        if action == "alone":
            with _timed(t_time, device):  # the rest as one stretch (the caller's work between tokens in it)
                yield from plain_tokens(n_steps - done, timed=False)
            break
        round_began, done_before = time.perf_counter(), done
        gamma = min(draft_length, n_steps - done)
        proposals = []
        noises = [noise(done + i) if noise else None for i in range(min(gamma + 1, n_steps - done))]
        paths = [texts]  # each proposal's path: the rows' bases before it
        with _timed(d_time, device):
            feed = draft_feed
            for i in range(gamma):
                hidden = d_forward(feed)[:, -1]
                x = choose(distribution(draft.kmer_logits(hidden), done + i, paths[i]), noises[i])
                proposals.append(x)
                paths.append(extended(paths[i], x))
                feed = (x + kmer_start).unsqueeze(1)
        with _timed(t_time, device):  # the target scores pending + all proposals in one pass
            verify = torch.stack([pending, *[x + kmer_start for x in proposals]], dim=1)
            logits = target.kmer_logits(t_forward(verify))[:, : len(noises)]  # [S, gamma + 1, 4^k]
            if checker is None and all(masks.free[done + i] for i in range(len(noises))):  # no mask to build
                p = list(step_logprobs(logits.flatten(0, 1), params).view(logits.shape).unbind(1))  # all at once
            else:
                p = [distribution(logits[:, i], done + i, paths[i]) for i in range(len(noises))]
        picks = [choose(p[i], noises[i]) for i in range(len(noises))]  # what the target alone makes
        x = torch.stack(proposals, dim=1)  # [S, gamma]
        m, per_row = accepted_length(x, torch.stack(picks[:gamma], dim=1))
        stats.rounds += 1
        stats.proposed += gamma * samples
        stats.accepted += int(per_row.sum())
        stats.draft_lengths.append(gamma)
        for i in range(m):
            yield x[:, i], p[i]
        done += m
        texts = paths[m]
        if m < gamma:  # a row rejected proposal m: every row takes the target's pick there
            token = picks[m]
            texts = extended(texts, token)
            yield token, p[m]
            done += 1
            t_cache.crop(-(gamma - m))  # drop the proposals after the kept ones
            if gamma - 1 - m:
                d_cache.crop(-(gamma - 1 - m))
            draft_feed = (token + kmer_start).unsqueeze(1)
        elif done < n_steps:  # all accepted: one more token from the target
            token = picks[gamma]
            texts = extended(texts, token)
            yield token, p[gamma]
            done += 1
            draft_feed = torch.stack([x[:, -1], token], dim=1) + kmer_start
        else:
            break
        pending = token + kmer_start
        draft_length = min(MAX_DRAFT, draft_length + 1) if m == gamma else max(MIN_DRAFT, m + 1)
        policy.round_took(time.perf_counter() - round_began, done - done_before)
    stats.target_seconds += t_time[0]
    stats.draft_seconds += d_time[0]
