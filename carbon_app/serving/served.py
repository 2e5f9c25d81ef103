"""A Carbon model run by an inference server, as the scoring engine reads it.

`connect(url, model)` reads the model's codec (tokenizer, tags, card) from its own files here, asks the
server what it serves and refuses a server that serves another model or vocabulary, naming both. The
engine then scores windows as it does in-process: the server returns each position's log-probs over the
vocabulary (`prompt_logprobs`), renormalised here over the k-mers as the in-process engine normalises
them (its DNA head is the k-mer rows alone), and read into per-base scores by the same code.

Each position's log-probs are asked for the most likely 4^k + LOGPROB_HEADROOM ids, not the whole
vocabulary (a released checkpoint's 155,776 ids would be megabytes of JSON a position, and its k-mers are
its last ids, so no "ids up to the k-mers" bound is smaller). After `<dna>` the k-mers are what the model
predicts: they fill the top of the list, and the renormalisation over the k-mers needs nothing else. A
position where the server did not return every k-mer (other ids outranked some) is refused, naming the
position and the --max-logprobs that fixes it: exact, or refused, never an estimate.
"""

from __future__ import annotations

import contextvars
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import settings
from ..errors import ScoresUnavailable
from ..model.backend import BackendFields, Capabilities
from ..model.card import ModelCard
from .client import ServerClient, ServerError, ServerInfo
from .design import design_steps

IN_FLIGHT = 8  # requests one job keeps at the server at once (CARBON_SERVER_IN_FLIGHT): it batches them
ROWS_KEPT = 4096  # tokens' distributions kept for windows that share a prefix (16 KB each for a 6-mer model)
LOGPROB_HEADROOM = 256  # ids asked for beyond the k-mers, for other ids (tags, specials) that outrank some
_fanned_out = threading.local()  # set in the threads `ServedModel.each` runs work in


class KmersOutranked(ServerError, ScoresUnavailable):
    """A position's answer lacks `missing` k-mers: other ids outranked them within the log-probs asked for."""

    def __init__(self, message: str, missing: int):
        super().__init__(message)
        self.missing = missing


@dataclass
class ServedModel(BackendFields):
    """A Carbon model whose forward passes run on an inference server: the served `Backend` (its `draft`: the
    server's own drafter, if any)."""

    server: ServerClient
    served: ServerInfo
    vocab_size: int  # ids of the model's vocabulary: what --max-logprobs must cover
    takes_designs: bool = False  # the server runs Carbon's design plugin (masks, base-level sampling)
    in_flight: int = IN_FLIGHT  # requests one job keeps at the server at once

    def __post_init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.in_flight)
        self._lock = threading.Lock()
        self._rows: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()  # prefix -> k-mer log-probs

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(where=f"on the server {self.served.url}", holds_cache=False,
                            instead="leave out --server (CARBON_SERVER) to run it here")

    @property
    def weights(self) -> str:
        """Which weights these are: the server's, named by where they are served (a server says no checksum)."""
        return f"served:{self.served.model}@{self.served.url}"

    def check_fits(self, kv_tokens: int, forward_tokens: int, scored_tokens: int, what: str) -> None:
        """The server holds the model and its working memory (and refuses what it cannot hold): nothing is
        asked of this machine's budget."""

    def window_logprobs(self, prompts: list[list[int]], first: int,
                        rows: list[set[int]] | None = None) -> Iterator[list[tuple[int, torch.Tensor]]]:
        """Per prompt, one block: its k-mer log-probs after token `first` (`kmer_logprobs`)."""
        for logprobs in self.kmer_logprobs(prompts, first, rows):
            yield [(0, logprobs)]

    def design_steps(self, plan, request) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """A whole design made on the server in one request (`serving.design`)."""
        return design_steps(self, plan, request)

    def describe(self) -> dict:
        return {"name": self.name, "server": self.served.url, "served_as": self.served.model,
                "context_tokens": self.max_tokens, "context_bases": self.max_bases, "k": self.k,
                "tag_scheme": self.tags.name, "logprobs_per_position": self.served.vocab_returned,
                "design_plugin": self.takes_designs}

    def kmer_logprobs(self, prompts: list[list[int]], first: int,
                      rows: list[set[int]] | None = None) -> list[torch.Tensor]:
        """Per prompt, [tokens after index `first`, 4^k] log-probs of each k-mer given what precedes it,
        normalised over the k-mers (as the in-process engine's k-mer head normalises them).

        With `rows` (per prompt, the tokens whose distributions are wanted) the rest are NaN, so that nothing
        reads them unnoticed, and each wanted one is asked alone: one generation step's log-probs after its
        prefix (the server reuses the prefix's KV cache), once for all prompts that share that prefix, and
        kept (the last ROWS_KEPT) for later calls' windows that share it. A variant's delta within a radius
        needs a few tokens of each window, where the whole window's distributions would be megabytes of
        JSON."""
        if rows is None:
            return self._map(lambda prompt: self._window(prompt, first), prompts)
        prefixes = list(dict.fromkeys(tuple(prompt[: first + 1 + row])
                                      for prompt, wanted in zip(prompts, rows, strict=True) for row in wanted))
        with self._lock:
            asked = {prefix: self._rows[prefix] for prefix in prefixes if prefix in self._rows}
        missing = [prefix for prefix in prefixes if prefix not in asked]
        fetched = self._map(lambda prefix: self._widening(
            lambda top: [self.server.next_logprobs(self.served.model, list(prefix), top)], len(prefix) - first)[0],
            missing)
        asked.update(zip(missing, fetched, strict=True))
        with self._lock:  # kept for the windows of other calls that share these prefixes (a scan's, a batch's)
            self._rows.update(zip(missing, fetched, strict=True))
            while len(self._rows) > ROWS_KEPT:
                self._rows.popitem(last=False)
        out = []
        for prompt, wanted in zip(prompts, rows, strict=True):
            logprobs = torch.full((len(prompt) - 1 - first, self.tokenizer.n_kmers), math.nan)
            for row in wanted:
                logprobs[row] = asked[tuple(prompt[: first + 1 + row])]
            out.append(logprobs)
        return out

    def each(self, fn, items: list) -> list:
        """`fn` over `items` (variants of a batch, positions of a scan), `in_flight` at once, each in a copy
        of the caller's context (so a cancel or a shutdown reaches the checkpoints `fn` passes). Work fanned
        out inside `fn` (its windows' rows) runs in `fn`'s own thread: `in_flight` threads keep `in_flight`
        requests at the server, however deeply the work nests."""
        if len(items) <= 1 or getattr(_fanned_out, "inside", False):
            return [fn(item) for item in items]

        def inside(item):
            _fanned_out.inside = True
            return fn(item)

        with ThreadPoolExecutor(max_workers=min(self.in_flight, len(items))) as pool:
            return [job.result() for job in [pool.submit(contextvars.copy_context().run, inside, item)
                                             for item in items]]

    def _map(self, fn, items: list) -> list:
        """`fn` (one request) over `items` (`each`), with at most `in_flight` requests of this model at the
        server at once, however many jobs and threads ask (it batches them)."""
        def bounded(item):
            with self._slots:
                return fn(item)

        return self.each(bounded, items)

    def _top(self) -> int:
        """Log-probs asked per position: as many as the k-mers and LOGPROB_HEADROOM more, or all the server
        returns where that is fewer."""
        return min(self.served.vocab_returned, self.tokenizer.n_kmers + LOGPROB_HEADROOM)

    def _window(self, prompt: list[int], first: int) -> torch.Tensor:
        return self._widening(lambda top: self.server.prompt_logprobs(self.served.model, prompt, top)[first + 1:], 1)

    def _widening(self, ask, token: int) -> torch.Tensor:
        """[rows, 4^k] k-mer log-probs of the positions `ask(top)` returns (the first is token `token` of its
        window), asked with `_top()` ids a position; where some k-mer was outranked (a model whose text ids
        rank high after <dna>: random weights, say), asked again with all the server returns where that many
        more ids could hold the missing k-mers, else refused. A trained Carbon model's k-mers fill the top of
        every DNA position."""
        top = self._top()
        while True:
            returned = ask(top)
            try:
                return torch.stack([self._row(one, top, token + row) for row, one in enumerate(returned)])
            except KmersOutranked as exc:
                if top + exc.missing > self.served.vocab_returned:  # each id more holds one k-mer at most
                    raise
                top = self.served.vocab_returned

    def _row(self, returned: dict[int, float], top: int, token: int) -> torch.Tensor:
        """[4^k] k-mer log-probs, normalised over the k-mers, of one position's returned {id: log-prob};
        refused where some k-mer is not among them (its log-prob is then unknown)."""
        start, n = self.tokenizer.kmer_start_id, self.tokenizer.n_kmers
        ids = torch.tensor(list(returned), dtype=torch.long)
        values = torch.tensor(list(returned.values()), dtype=torch.float64)
        dna = (ids >= start) & (ids < start + n)
        got = int(dna.sum())
        if got < n:
            enough = min(self.vocab_size, top + n - got + LOGPROB_HEADROOM)
            raise KmersOutranked(
                f"the server {self.served.url} returned {got:,} of the model's {n:,} k-mers at token {token} of a "
                f"window (it returns the {top:,} most likely ids a position, and other ids outranked the rest): "
                f"start it with --max-logprobs {enough} at least (up to the model's {self.vocab_size:,} ids)", n - got)
        row = torch.full((n,), -math.inf, dtype=torch.float64)
        row[ids[dna] - start] = values[dna]
        return torch.log_softmax(row, dim=-1).float()


def connect(url: str, model: str, api_key: str | None = None, served_as: str | None = None) -> ServedModel:
    """The model `model` (its files here: a bundled name, a local directory or a hub id) as the server at
    `url` runs it (under the name `served_as`, else the only model it serves), checked against its codec."""
    from ..model.bundle import load_codec
    from ..model.hub import resolve_model_dir

    path = resolve_model_dir(model, weights=False)  # the weights stay on the server
    tokenizer, tags, config = load_codec(path)
    server = ServerClient(url, api_key)
    last_kmer = tokenizer.kmer_start_id + tokenizer.n_kmers - 1
    try:
        served = server.info(served_as, probe_ids=(tokenizer.open_id, last_kmer))
    except ServerError as exc:
        if "out of vocabulary" in str(exc):
            raise ServerError(f"the server {server.url} has no token {last_kmer}, {model}'s last k-mer: it serves "
                              "another vocabulary, not this model's") from None
        raise
    ours = {model, Path(model).name, path.name}
    theirs = {served.model, served.root, Path(served.root).name}
    if not served_as and not ours & theirs:
        raise ServerError(f"the server {server.url} serves '{served.model}' (loaded from '{Path(served.root).name}'), "
                          f"not {model}: point --model at the model it serves, or name it with --served-model if it "
                          "is the same model under another name")
    if served.vocab_returned > config.vocab_size:
        raise ServerError(f"the server {server.url} serves '{served.model}' with {served.vocab_returned:,} ids; "
                          f"{model} has {config.vocab_size:,}: it serves another model")
    for tag in {*tags.species.values(), *tags.regions.values()}:
        here, there = tokenizer.encode(tag), server.tokenize(served.model, tag)
        if there is None:  # a server without a tokenizer: its model's name, context and vocabulary were checked
            break
        if here != there:
            raise ServerError(f"the server {server.url} reads the tag {tag} as ids {there}, {model} as {here}: it "
                              f"serves another model ('{served.model}')")
    context = min(int(config.max_position_embeddings), served.max_tokens or config.max_position_embeddings)
    return ServedModel(name=model, path=path,
                       tokenizer=tokenizer, tags=tags, max_tokens=context, card=ModelCard(path), server=server,
                       served=served, vocab_size=int(config.vocab_size),
                       takes_designs=server.takes_designs(served.model, tokenizer.open_id),
                       in_flight=settings.get("CARBON_SERVER_IN_FLIGHT"))
