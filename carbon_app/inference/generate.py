"""Base-exact DNA generation with tags, per-position masks and two sampling modes.

How a prompt whose length is not a multiple of k is handled: the whole k-mers
are the model's context, and the r leftover bases become *fixed positions* of
the first generated token (a mask allowing only that base). The model thus
continues from the prompt's real last base, never from the A-padding the stock
tokenizer would add, and the r bases are not part of the returned sequence.

An exact base count n is met by generating ceil((r + n) / k) tokens and keeping
bases r .. r+n-1; a mask (IUPAC template of length n) constrains those same
positions. Only k-mer ids are ever sampled, so generation cannot leave DNA.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..core.dna import BASE_INDEX, mask_from_template
from ..core.tokens import dna_prompt
from ..errors import InputError
from ..model.backend import OWN_DRAFTS, STEPS_BACK, Backend, require_cache
from ..model.bundle import ModelBundle
from ..model.graphs import forward_over
from ..model.kv import preallocated_cache
from .constraints import (
    MAX_STEPS_BACK,
    ConstraintChecker,
    DeadEnd,
    DesignConstraints,
    check_feasible,
    constrained_logprobs,
)
from .marginals import kmer_digits, log_marginals
from .provenance import Provenance
from .request import DesignRequest
from .sampling import SamplingParams, StepMasks, StepNoise, choose, step_logprobs
from .speculative import MAX_DRAFT, SpeculativeStats, speculative_decode_kmers


@dataclass
class GenerationPlan:
    """Everything fixed before the first forward pass."""

    prompt: str  # cleaned prompt bases
    context_bases: str  # the whole k-mers the model reads
    fixed_bases: str  # leftover bases, fixed at the start of the first new token
    n_bases: int
    mask: str | None
    prompt_text: str
    prompt_ids: list[int]
    n_tokens: int
    allowed: np.ndarray  # [n_tokens, k, 4] bool, bases allowed at each generated position


@dataclass
class GenerationResult:
    sequences: list[str]
    prompt_text: str
    prompt_ids: list[int]
    prompt: str
    fixed_bases: str
    n_bases: int
    mask: str | None
    mode: str
    temperature: float
    top_k: int
    top_p: float
    seed: int
    model: str
    n_tokens: int
    seconds: float
    base_probs: list[list[float]] = field(default_factory=list)  # P(chosen base) per position
    base_entropy: list[list[float]] = field(default_factory=list)  # bits, per position
    base_marginals: np.ndarray | None = None  # [samples, n_bases, 4] (A T C G): what each base was drawn from
    speculative: SpeculativeStats | None = None  # draft statistics when a draft model proposed tokens
    done: bool = True
    constraints: DesignConstraints | None = None  # enforced while sampling
    provenance: Provenance | None = None  # the app, the model and its weights, as every design file names them

    @property
    def tags(self) -> str:
        """The tag text the prompt began with ('' for none)."""
        return self.prompt_text.split("<dna>")[0]

    @property
    def bases_per_second(self) -> float:
        return sum(map(len, self.sequences)) / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["bases_per_second"] = self.bases_per_second
        data["speculative"] = self.speculative.to_dict() if self.speculative else None
        data["constraints"] = self.constraints.describe() if self.constraints else None
        data.pop("base_marginals")  # 4 numbers a base: for plots and notebooks, too many for every JSON
        return data


def plan_generation(bundle: Backend, request: DesignRequest) -> GenerationPlan:
    """Fix a checked request's prompt, tokens and masks for the model, refusing what does not fit it."""
    k, prompt, n_bases = bundle.k, request.prompt, request.n_bases
    leftover = len(prompt) % k
    context, fixed = prompt[: len(prompt) - leftover], prompt[len(prompt) - leftover :]
    bad = next((i for i, b in enumerate(fixed) if b not in "ACGT"), None)
    if bad is not None:
        raise InputError(
            f"the prompt has '{fixed[bad]}' at position {len(context) + bad + 1}, among its last "
            f"{leftover} bases; those continue into the first generated {k}-mer and must be A, C, G or T "
            f"(trim the prompt to a multiple of {k} bases or replace the code)"
        )
    prompt_text = dna_prompt(bundle.tags.prefix(request.species, request.region), context)
    prompt_ids = bundle.tokenizer.encode(prompt_text)
    n_tokens = math.ceil((leftover + n_bases) / k)
    room = bundle.max_tokens - len(prompt_ids)
    if n_tokens > room:
        fits = max(room * k - leftover, 0)
        raise InputError(
            f"{n_bases:,} bases do not fit: the model's context is {bundle.max_tokens:,} tokens "
            f"({bundle.max_bases:,} bases) and the prompt uses {len(prompt_ids):,} of them, "
            f"leaving room for {fits:,} new bases"
        )
    allowed = np.ones((n_tokens * k, 4), dtype=bool)
    for i, base in enumerate(fixed):
        allowed[i] = False
        allowed[i, BASE_INDEX[base]] = True
    if request.mask is not None:
        allowed[leftover : leftover + n_bases] = mask_from_template(request.mask)
    return GenerationPlan(
        prompt=prompt,
        context_bases=context,
        fixed_bases=fixed,
        n_bases=n_bases,
        mask=request.mask,
        prompt_text=prompt_text,
        prompt_ids=prompt_ids,
        n_tokens=n_tokens,
        allowed=allowed.reshape(n_tokens, k, 4),
    )


def _prefill(bundle: ModelBundle, prompt_ids: list[int], n_steps: int, samples: int):
    """(KV cache with room for `n_steps` more tokens, the hidden state that predicts the first) after one
    prefill of the shared prompt, repeated for the samples."""
    ids = torch.tensor([prompt_ids], device=bundle.device)
    cache = preallocated_cache(bundle.decoder.config, len(prompt_ids) + n_steps)
    hidden = bundle.hidden_states(ids, cache)[:, -1]
    if samples > 1:
        cache.batch_repeat_interleave(samples)
        hidden = hidden.expand(samples, -1)
    return cache, hidden


@torch.inference_mode()
def decode_kmers(
    bundle: ModelBundle,
    prompt_ids: list[int],
    allowed: torch.Tensor,
    params: SamplingParams,
    samples: int,
    noise: StepNoise | None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield, per generated token, the chosen k-mer indices [samples] and the
    log-probs [samples, 4^k] they were drawn from.

    One prefill for the shared prompt, its KV cache repeated for the samples,
    then one forward pass per token through the decoder and the k-mer rows of
    the output projection only.
    """
    cache, hidden = _prefill(bundle, prompt_ids, allowed.shape[0], samples)
    forward = forward_over(bundle, cache, samples)
    masks = StepMasks(allowed)
    for step in range(len(masks)):
        logprobs = step_logprobs(bundle.kmer_logits(hidden), params, masks[step])
        kmers = choose(logprobs, noise(step) if noise else None)
        yield kmers, logprobs
        if step + 1 < len(masks):
            next_ids = (kmers + bundle.tokenizer.kmer_start_id).unsqueeze(1)
            hidden = forward(next_ids)[:, -1]


@torch.inference_mode()
def decode_kmers_constrained(
    bundle: ModelBundle,
    prompt_ids: list[int],
    n_steps: int,
    params: SamplingParams,
    samples: int,
    noise: StepNoise | None,
    checker: ConstraintChecker,
) -> Iterator[tuple[int, tuple[torch.Tensor, torch.Tensor]]]:
    """As `decode_kmers`, each token limited to the 6-mers the constraints allow given the bases before it.
    Yields (step, (k-mers, log-probs)); after a dead end it steps back one token (ruling out, for the rows
    that met it, the choice that led there) and yields that step again. Every row steps back together
    (they share the cache); the others choose as before, since a token's draw depends only on its seed,
    its index and what precedes it."""
    k = bundle.k
    cache, hidden = _prefill(bundle, prompt_ids, n_steps, samples)
    forward = forward_over(bundle, cache, samples)
    hiddens, picks, texts = [hidden], [], [""] * samples
    ruled_out: dict[tuple[int, int], np.ndarray] = {}
    step = back = 0
    while step < n_steps:
        ok = np.stack([checker.allowed(step, texts[r]) & ~ruled_out.get((r, step), False) for r in range(samples)])
        dead = ~ok.any(axis=1)
        if dead.any():
            if step == 0 or back >= MAX_STEPS_BACK:
                raise InputError("the constraints could not be met for this design within "
                                 f"{MAX_STEPS_BACK:,} steps back; loosen one of them")
            back += 1
            for r in np.nonzero(dead)[0]:
                ruled_out.setdefault((r, step - 1), np.zeros(ok.shape[1], dtype=bool))[int(picks[-1][r])] = True
                ruled_out.pop((r, step), None)
            picks.pop()
            hiddens.pop()
            cache.crop(-1)
            step -= 1
            texts = [t[: step * k] for t in texts]
            continue
        logprobs = constrained_logprobs(bundle.kmer_logits(hiddens[step]), params, ok, checker)
        kmers = choose(logprobs, noise(step) if noise else None)
        picks.append(kmers)
        texts = checker.extended(texts, kmers)
        yield step, (kmers, logprobs)
        if step + 1 < n_steps:
            next_ids = (kmers + bundle.tokenizer.kmer_start_id).unsqueeze(1)
            hiddens.append(forward(next_ids)[:, -1])
        step += 1


def _drafted_under_constraints(bundle, draft, plan, allowed, params, samples, noise, stats, checker, always):
    """Speculative decoding with each token masked along its path; at a dead end, which a drafted round
    cannot step back from, the target makes the design again alone from the start (a token's draw
    depends only on its seed, its index and what precedes it, so the result is what the target alone
    makes either way)."""
    try:
        yield from enumerate(speculative_decode_kmers(bundle, draft, plan.prompt_ids, allowed, params, samples, noise,
                                                      stats, always=always, checker=checker))
    except DeadEnd as end:
        stats.fallback_reason = (f"a dead end under the design constraints at token {end.args[0] + 1}: the target "
                                 "made the design again alone")
        yield from decode_kmers_constrained(bundle, plan.prompt_ids, plan.n_tokens, params, samples, noise, checker)


def check_draft(target: ModelBundle, draft: ModelBundle) -> None:
    """A draft must speak the target's token language exactly."""
    if draft.tokenizer.config != target.tokenizer.config or draft.device != target.device:
        raise InputError(f"'{draft.name}' cannot draft for '{target.name}': their DNA token layouts "
                         "or devices differ")
    if target.tokenizer.text_tokenizer is None or draft.tokenizer.text_tokenizer is None:
        return  # DNA-only bundles (benchmarks): the DNA layouts already agree
    probe = dna_prompt(target.tags.probe_text())
    if draft.tokenizer.encode(probe) != target.tokenizer.encode(probe):
        raise InputError(f"'{draft.name}' cannot draft for '{target.name}': their tag tokens differ")


#: How the engine chooses the tokens where it holds the model's KV cache, picked once per run from what
#: it has: design constraints, a draft model. A backend that lends no cache makes the whole design.
STRATEGIES = {(False, False): "plain", (True, False): "constrained", (False, True): "speculative",
              (True, True): "speculative, constrained"}


def _decode_steps(bundle: Backend, draft, plan, request, stats, checker):
    """The run's (step, (k-mers, log-probs)): a step may come again after a step back."""
    if not bundle.capabilities.holds_cache:
        return enumerate(bundle.design_steps(plan, request))
    params, samples, seed = request.sampling, request.samples, request.seed
    noise = None if params.greedy else StepNoise(seed, samples, bundle.tokenizer.n_kmers, bundle.device)
    allowed = torch.from_numpy(plan.allowed).to(bundle.device)
    strategy = STRATEGIES[checker is not None, draft is not None]
    if strategy == "plain":
        return enumerate(decode_kmers(bundle, plan.prompt_ids, allowed, params, samples, noise))
    if strategy == "constrained":
        return decode_kmers_constrained(bundle, plan.prompt_ids, plan.n_tokens, params, samples, noise, checker)
    if strategy == "speculative":
        return enumerate(speculative_decode_kmers(bundle, draft, plan.prompt_ids, allowed, params, samples, noise,
                                                  stats, always=request.draft_always))
    return _drafted_under_constraints(bundle, draft, plan, allowed, params, samples, noise, stats, checker,
                                      request.draft_always)


def generate_stream(bundle: Backend, prompt: str = "", n_bases: int | None = None, *,
                    draft: ModelBundle | None = None, stream_every: int = 0, **options) -> Iterator[GenerationResult]:
    """Like `generate`, yielding partial results (done=False) every `stream_every`
    tokens when it is positive, and always the final result last."""
    yield from run_design(bundle, DesignRequest.from_options(prompt, n_bases, **options), draft, stream_every)


def run_design(bundle: Backend, request: DesignRequest, draft: ModelBundle | None = None,
               stream_every: int = 0) -> Iterator[GenerationResult]:
    """The engine's design: a checked `request` on `bundle` (with `draft` proposing tokens, if given),
    yielding partial results every `stream_every` tokens when it is positive and the final result last."""
    params, samples, seed, constraints = request.sampling, request.samples, request.seed, request.constraints
    if constraints:
        require_cache(bundle, "a design with constraints", STEPS_BACK)
    if draft is not None:
        require_cache(bundle, "a draft model", OWN_DRAFTS)
    plan = plan_generation(bundle, request)
    checker = None
    if constraints:
        checker = ConstraintChecker.build(constraints, bundle.k, len(plan.fixed_bases), plan.n_bases,
                                          plan.context_bases, plan.allowed.reshape(-1, 4))
        check_feasible(checker, plan.n_tokens)
    total_tokens = len(plan.prompt_ids) + plan.n_tokens
    bundle.check_fits(samples * total_tokens, max(len(plan.prompt_ids), samples), samples * (MAX_DRAFT + 1),
                        f"{samples} sample{'s' if samples > 1 else ''} of {total_tokens:,} tokens")
    if draft is not None:
        check_draft(bundle, draft)
    stats = SpeculativeStats(draft_model=draft.name) if draft is not None else None
    k, start = bundle.k, len(plan.fixed_bases)
    kmers, probs, entropy, marginal_steps = [], [], [], []
    began = time.perf_counter()
    made_by = Provenance.of(bundle)

    def result(done: bool) -> GenerationResult:
        chosen = torch.stack(kmers, dim=1).cpu().numpy() if kmers else np.zeros((samples, 0), dtype=np.int64)
        end = start + plan.n_bases
        sequences = [bundle.tokenizer.kmer_bases(row)[start:end] for row in chosen]
        p = torch.cat(probs, dim=1)[:, start:end].cpu() if probs else torch.zeros(samples, 0)
        m = torch.cat(marginal_steps, dim=1)[:, start:end].cpu().numpy() if done and marginal_steps else None
        h = torch.cat(entropy, dim=1)[:, start:end].cpu() if entropy else torch.zeros(samples, 0)
        return GenerationResult(
            sequences=sequences,
            prompt_text=plan.prompt_text,
            prompt_ids=plan.prompt_ids,
            prompt=plan.prompt,
            fixed_bases=plan.fixed_bases,
            n_bases=plan.n_bases,
            mask=plan.mask,
            mode=params.mode,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            seed=seed,
            model=bundle.name,
            n_tokens=len(kmers),
            seconds=time.perf_counter() - began,
            base_probs=p.tolist(),
            base_entropy=h.tolist(),
            base_marginals=m,
            speculative=stats,
            done=done,
            constraints=constraints,
            provenance=made_by,
        )

    for step, (kmer, logprobs) in _decode_steps(bundle, draft, plan, request, stats, checker):
        del kmers[step:], probs[step:], entropy[step:], marginal_steps[step:]  # a step back retakes from `step`
        kmers.append(kmer)
        # confidence of each chosen base under the marginals it was drawn from
        marginals = log_marginals(logprobs, tails="drop")  # [samples, k, 4]; no wait for the GPU
        digits = kmer_digits(kmer, k)
        probs.append(marginals.gather(-1, digits.unsqueeze(-1)).squeeze(-1).exp())
        entropy.append(torch.special.entr(marginals.exp()).sum(-1).div(math.log(2)))
        marginal_steps.append(marginals.exp())
        if stream_every > 0 and len(kmers) % stream_every == 0 and len(kmers) < plan.n_tokens:
            yield result(done=False)
    yield result(done=True)


def generate(bundle: Backend, prompt: str = "", n_bases: int | None = None, **options) -> GenerationResult:
    """Generate exactly `n_bases` new bases after DNA `prompt`, `samples` times.

    Options: mask (IUPAC template of n_bases positions), species, region (tag
    scheme keys or literal tags), mode ('bp' base level, the reference; 'token'
    joint 6-mer), temperature (0 = greedy; default 0.9, since long designs at
    T <= 0.5 fall into repeats), top_k, top_p, seed (same seed, same output),
    samples, draft (a paired draft model for speculative decoding: greedy output
    is the target's own, sampling keeps the target's distribution; the target
    finishes alone where the draft does not pay, unless draft_always), and design
    constraints enforced while sampling, by their fields (`constraints.FIELDS`:
    protein with codon_table, avoid (enzyme names or IUPAC motifs), max_homopolymer,
    gc ("40:60") and gc_window), or a `DesignConstraints` as constraints. Returns
    the new bases only, with the exact prompt text and ids.
    """
    *_, final = generate_stream(bundle, prompt, n_bases, **options)
    return final
