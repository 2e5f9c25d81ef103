"""A design made by an inference server: the request as vLLM samples it, the answer as the engine reads it.

With Carbon's plugin on the server (`vllm_plugin`), every step is shaped there exactly as in-process
(`sampling.step_logprobs`: masks, temperature, top-k, top-p, base-level sampling) and vLLM draws from
it with its own seed (`n` samples: seeds seed, seed+1, ...); without it, token mode on free bases runs
on vLLM's own sampler, limited to the k-mer ids. Each token's distribution comes back with it, so the
per-base confidences, entropies and marginals are those of the in-process engine.

A seed names one design on one server; the server's random numbers are not the engine's, so the same
seed gives another design here than in-process (the same distribution).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from ..inference.request import DesignRequest
from .client import ServerError
from .design_args import DesignArgs, encode_allowed

_NO_LOGPROB = -9999.0  # what vLLM writes for -inf


def needs_plugin(request: DesignRequest, allowed_hex: str | None) -> str | None:
    """Why a design needs the plugin on the server (None when vLLM's own sampler makes it)."""
    if request.sampling.mode == "bp":
        return "base-level sampling (mode 'bp')"
    if allowed_hex is not None:
        return "a mask, or a prompt that is not a whole number of k-mers (its last bases are fixed)"
    return None


def design_steps(served, plan, request: DesignRequest) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Per generated token, the chosen k-mer indices [samples] and the log-probs [samples, 4^k] they were
    drawn from, for a design made in one request on the server that runs `served` (a `served.ServedModel`,
    which asks this of it)."""
    tokenizer, params = served.tokenizer, request.sampling
    start, n = tokenizer.kmer_start_id, tokenizer.n_kmers
    allowed = encode_allowed(plan.allowed)
    why = needs_plugin(request, allowed)
    if why and not served.takes_designs:
        raise ServerError(f"{why} needs Carbon's plugin on the server {served.served.url}, which it does not run: "
                          "start it with deploy/vllm/serve.sh (it loads carbon_app.serving.vllm_plugin), or design "
                          "in token mode on a prompt of whole k-mers without a mask")
    greedy = {"temperature": 0.0}
    if served.takes_designs:
        # the plugin shapes each step; vLLM then draws from it as it is
        xargs = DesignArgs(params, start, served.k, allowed).to_xargs()
        sampling, allowed_ids = greedy if params.greedy else {"temperature": 1.0}, None
    else:
        xargs, allowed_ids = None, list(range(start, start + n))
        sampling = greedy if params.greedy else {"temperature": params.temperature, "top_p": params.top_p,
                                                 **({"top_k": params.top_k} if params.top_k else {})}
    samples = served.server.complete(served.served.model, plan.prompt_ids, plan.n_tokens, samples=request.samples,
                                     seed=request.seed, sampling=sampling, top_logprobs=n, xargs=xargs,
                                     allowed_ids=allowed_ids)
    for step in range(plan.n_tokens):
        kmers = torch.tensor([ids[step] - start for ids, _ in samples])
        if not ((kmers >= 0) & (kmers < n)).all():
            raise ServerError(f"the server {served.served.url} made a token that is not a k-mer at step {step + 1}: "
                              "is the plugin's k-mer range this model's?")
        rows = torch.full((len(samples), n), -math.inf, dtype=torch.float64)
        for row, (_, steps) in enumerate(samples):  # 4^k entries a step: read as arrays, not one by one
            returned = steps[step]
            ids = np.fromiter(returned.keys(), dtype=np.int64, count=len(returned))
            values = np.fromiter(returned.values(), dtype=np.float64, count=len(returned))
            keep = (ids >= start) & (ids < start + n) & (values > _NO_LOGPROB)
            rows[row, torch.from_numpy(ids[keep] - start)] = torch.from_numpy(values[keep])
        yield kmers, torch.log_softmax(rows, dim=-1).float()
