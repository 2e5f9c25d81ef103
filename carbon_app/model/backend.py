"""The one interface the engine runs a model through, wherever its forward passes run.

Two implementations: `model.bundle.ModelBundle` runs them in this process, `serving.served.ServedModel`
on an inference server. The engine (scoring, scans, batches, designs) is written once against `Backend`:
it asks for the k-mer log-probs of windows, fans work out with `each`, and reads `capabilities` for the
few things only one of them can do, never which class it holds.

What differs is whether the engine holds the model's KV cache. In this process it does: a scan branches
each substituted token from one cached window, a design steps back from a dead end or lets a draft model
propose tokens. A server lends no cache: each substitution is read alone in its own windows (the same
deltas), and the server makes a whole design in one request (`design_steps`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import torch

from ..core.tags import TagScheme
from ..core.tokens import CarbonTokenizer
from ..errors import BackendError
from .card import ModelCard

T = TypeVar("T")
R = TypeVar("R")

#: Why work that needs the model's KV cache held here cannot run on a backend that lends none.
STEPS_BACK = "design constraints step back from a dead end to an earlier token, which a server's sampler cannot"
OWN_DRAFTS = ("the server drafts with its own speculative decoding (vLLM's --speculative-config), not with a "
              "draft model here")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the forward passes every backend gives."""

    where: str  # where the forward passes run, as a sentence names it: "in this process", "on the server <url>"
    holds_cache: bool  # the engine holds the model's KV cache and takes one forward step at a time
    instead: str = ""  # where it does not: how to run work that needs it, as one clause


@dataclass(kw_only=True)
class BackendFields:
    """The fields of `Backend`, declared once for both implementations (each adds its own): what the model is
    called and where its files are, its codec, tags and card, what it reads at most, and its draft model."""

    name: str
    path: Path
    tokenizer: CarbonTokenizer
    tags: TagScheme
    max_tokens: int
    card: ModelCard
    draft: str | None = None  # in this process, the paired draft model; on a server, its own drafter, if any

    @property
    def k(self) -> int:
        return self.tokenizer.k

    @property
    def max_bases(self) -> int:
        return self.max_tokens * self.k


class Backend(Protocol):
    """A Carbon model as the engine reads it: its codec, its card, and its forward passes (the fields below
    are `BackendFields`, which both implementations extend)."""

    name: str
    path: Path
    tokenizer: CarbonTokenizer
    tags: TagScheme
    max_tokens: int
    card: ModelCard
    draft: str | None  # the paired draft model's name, where one is known
    capabilities: Capabilities

    @property
    def k(self) -> int: ...

    @property
    def max_bases(self) -> int: ...

    @property
    def weights(self) -> str:
        """Which weights these are (`ModelCard.weights`, or where a server serves them)."""

    def window_logprobs(self, prompts: list[list[int]], first: int,
                        rows: list[set[int]] | None = None) -> Iterator[Iterable[tuple[int, torch.Tensor]]]:
        """Per prompt, its k-mer log-probs after token `first` (`<dna>`) as (first token, [tokens, 4^k]) blocks,
        normalised over the k-mers. With `rows` (per prompt, the tokens whose distributions will be read) a
        backend may compute those alone and leave the rest NaN."""

    def each(self, fn: Callable[[T], R], items: list[T]) -> list[R]:
        """`fn` over `items` in order: one at a time, or as many at once as the backend batches well."""

    def check_fits(self, kv_tokens: int, forward_tokens: int, scored_tokens: int, what: str) -> None:
        """Refuse, before any work, a request whose working memory the backend cannot hold."""

    def design_steps(self, plan, request) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Per generated token of a whole design made by the backend, the chosen k-mer indices [samples] and
        the log-probs [samples, 4^k] they were drawn from. Asked only of a backend that holds no cache: where
        the engine holds it, the engine takes each step itself (`inference.generate`), and the in-process
        backend has no such method."""

    def describe(self) -> dict: ...


def require_cache(backend: Backend, what: str, why: str) -> None:
    """Refuse, with the reason and what to do, work that needs the model's KV cache held by the engine."""
    if not backend.capabilities.holds_cache:
        raise BackendError(f"{what} runs in this process only: {why}; {backend.capabilities.instead}")
