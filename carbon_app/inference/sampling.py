"""Turning k-mer logits into the distribution a generation step draws from.

Two modes, as in the Carbon release:

- ``bp`` (base level, the reference behaviour): temperature, top-k and top-p
  act on the k-mer distribution; its per-base marginals are taken and each
  base is chosen independently. Here that is done by drawing from the
  factorised distribution (the product of the marginals), which is the same
  thing and keeps one code path for greedy, sampling and speculative decoding.
- ``token``: the usual joint k-mer distribution.

Per-position masks are applied first, to the k-mer logits, so the marginals
are conditional on the allowed bases. Greedy (temperature 0) uses the
untempered distribution and ignores top-k/top-p, as `transformers` does.
"""

from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass

import torch

from ..core.validate import real_number, whole_number
from ..errors import InputError
from .marginals import factorised_logprobs, kmer_log_mask, log_marginals

MODES = ("bp", "token")


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How each step's distribution is shaped; typed values only (`checked` makes them from a form's)."""

    mode: str = "bp"
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"mode must be 'bp' (base level) or 'token' (6-mer), not '{self.mode}'")
        if not (_real(self.temperature) and _real(self.top_p) and isinstance(self.top_k, int)
                and not isinstance(self.top_k, bool)):
            raise TypeError("SamplingParams takes numbers (temperature, top_p) and an int (top_k); "
                            "SamplingParams.checked takes them as a form sends them")
        # the same bounds as `checked`, for values made in code
        real_number(self.temperature, "the temperature", 0, 10)
        whole_number(self.top_k, "top-k (0 = off)", 0)
        real_number(self.top_p, "top-p", 0, 1, above_low=True)

    @classmethod
    def checked(cls, mode="bp", temperature=1.0, top_k=0, top_p=1.0) -> SamplingParams:
        """Settings as any face sends them (a web form's 0.9, "40", None), each checked and named."""
        return cls(mode=mode, temperature=real_number(temperature, "the temperature", 0, 10),
                   top_k=whole_number(top_k, "top-k (0 = off)", 0),
                   top_p=real_number(top_p, "top-p", 0, 1, above_low=True))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class StepMasks:
    """The k-mer log-mask (0 / -inf) of each generated token, from `allowed` [n_steps, k, 4].

    Built when a step is reached, and None for unconstrained steps (most steps
    of most runs), so nothing of size n_steps x 4^k is ever held.
    """

    def __init__(self, allowed: torch.Tensor):
        self.allowed = allowed
        self.free = allowed.flatten(1).all(dim=1).tolist()

    def __len__(self) -> int:
        return len(self.free)

    def __getitem__(self, step: int) -> torch.Tensor | None:
        if step >= len(self.free) or self.free[step]:
            return None
        return kmer_log_mask(self.allowed[step])


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    # drop a k-mer when the ones ranked above it already reach p (the first always stays)
    drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def step_logprobs(
    kmer_logits: torch.Tensor, params: SamplingParams, log_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """[B, 4^k] raw k-mer logits -> [B, 4^k] log-probs of the distribution to draw from."""
    logits = kmer_logits.float()
    if log_mask is not None:
        logits = logits + log_mask
    if not params.greedy:
        logits = _top_p(_top_k(logits / params.temperature, params.top_k), params.top_p)
    logprobs = torch.log_softmax(logits, dim=-1)
    if params.mode == "bp":
        logprobs = factorised_logprobs(log_marginals(logprobs, tails="drop"))
    return logprobs


class StepNoise:
    """The random numbers of each generated token, fixed by the seed and the token's index.

    Token i of row r is drawn as argmax over k-mers of log p - log E, with E ~
    Exp(1) per k-mer (the exponential race, an exact draw from p). E is keyed
    on (seed, i), not taken from one running generator, so the draw of token i
    does not depend on how the tokens before it were made: speculative
    decoding then reproduces the target's own samples exactly, and a seed gives
    the same designs with or without a draft, however the run was timed.
    """

    def __init__(self, seed: int, rows: int, n_kmers: int, device: torch.device):
        self.seed, self.rows, self.n_kmers, self.device = seed, rows, n_kmers, device

    def __call__(self, step: int) -> torch.Tensor:
        """[rows, n_kmers] log E for generated token `step`."""
        key = hashlib.blake2b(f"{self.seed}:{step}".encode(), digest_size=8).digest()
        generator = torch.Generator(device=self.device).manual_seed(int.from_bytes(key) >> 1)
        race = torch.empty(self.rows, self.n_kmers, device=self.device).exponential_(generator=generator)
        return race.log()


def choose(logprobs: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
    """Pick one k-mer index per row: argmax (greedy, no noise), or the exact draw
    argmax(log p - log E) with a token's `StepNoise`."""
    return (logprobs if noise is None else logprobs - noise).argmax(dim=-1)


class DnaLogitsProcessor:
    """A `transformers` logits processor with the same rules, for stock `generate`.

    Keeps generation in DNA (every non-k-mer id gets -inf, so no `</dna>`, eos
    or text) and replaces the k-mer scores with `step_logprobs`, so stock
    greedy search, sampling (with temperature 1 and no other warpers) and
    assisted generation follow the same distribution as the engine.
    `allowed` [n_steps, k, 4] optionally masks each generated token.
    """

    def __init__(self, kmer_start_id: int, n_kmers: int, params: SamplingParams, prompt_length: int,
                 allowed: torch.Tensor | None = None):
        self.start, self.end = kmer_start_id, kmer_start_id + n_kmers
        self.params = params
        self.prompt_length = prompt_length
        self.masks = StepMasks(allowed) if allowed is not None else None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_length
        log_mask = self.masks[step] if self.masks is not None else None
        if log_mask is not None:
            log_mask = log_mask.to(scores.device)
        out = torch.full_like(scores, float("-inf"), dtype=torch.float32)
        out[:, self.start : self.end] = step_logprobs(scores[:, self.start : self.end], self.params, log_mask)
        return out
