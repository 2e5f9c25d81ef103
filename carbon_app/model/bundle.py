"""A loaded model with what the engine needs beside it: codec, tags, the k-mer head, its card and memory.

Loading reads everything from the model's own files (`dna_config.json`, `tag_scheme.json`, the
tokenizer, `config.json` and the safetensors weights) into Carbon Studio's own decoder
(`checkpoint.load_decoder`); a checkpoint it does not compute runs on `transformers`' forward, never on
remote code unless asked.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.tags import TagScheme, load_tag_scheme
from ..core.tokens import CarbonTokenizer, DnaConfig
from ..errors import ModelError
from .backend import BackendFields, Capabilities
from .card import ModelCard
from .checkpoint import TransformersDecoder, load_decoder
from .decoder import Decoder, attention_kernels
from .hub import draft_for, resolve_model_dir
from .memory import WorkingMemory

HEAD_CHUNK = 2048  # tokens per block of the output projection, to bound memory on long inputs


@dataclass
class ModelBundle(BackendFields):
    """A loaded model with everything the engine needs to use it: the in-process `Backend`."""

    capabilities = Capabilities(where="in this process", holds_cache=True)

    decoder: Decoder | TransformersDecoder  # the forward pass: Carbon Studio's own, or transformers' fallback
    device: torch.device
    dtype: torch.dtype
    dna_head: torch.Tensor  # [4^k, hidden]: the k-mer rows of the output projection
    n_bytes: int
    memory: WorkingMemory  # what a request needs beside the weights, and the budget it must fit
    info: dict = field(default_factory=dict)
    graph_pools: OrderedDict = field(default_factory=OrderedDict)  # graphs.GraphPool kept between runs

    @property
    def weights(self) -> str:
        """Which weights these are: the hub commit or the weight files' checksum (`ModelCard.weights`)."""
        return self.card.weights

    @property
    def held_bytes(self) -> int:
        """The weights and the KV buffers kept with their CUDA graphs for the next run."""
        return self.n_bytes + sum(pool.n_bytes for pool in list(self.graph_pools.values()))

    @torch.inference_mode()
    def hidden_states(self, input_ids: torch.Tensor, cache=None):
        """Final-norm hidden states of the decoder (no output projection)."""
        with attention_kernels():
            return self.decoder(input_ids, cache)

    def continuations(self, cache, keep: int, rows: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states [n, branches, new, hidden] of continuations [n, branches, new] of the
        cache's rows `rows` after their first `keep` positions (the decoder's `continuations`)."""
        with attention_kernels():
            return self.decoder.continuations(cache, keep, rows, input_ids)

    @property
    def pass_tokens(self) -> int:
        """Tokens per batched forward pass: a GPU is fed whole batches (bounded for activation memory); a CPU
        slows beyond a couple of thousand (they no longer fit its caches: measured on the bundled model, 2
        cores)."""
        return 16_384 if self.device.type == "cuda" else 2_048

    def check_fits(self, kv_tokens: int, forward_tokens: int, scored_tokens: int, what: str) -> None:
        self.memory.check(kv_tokens, forward_tokens, scored_tokens, what)

    def each(self, fn, items: list) -> list:
        """`fn` over `items`, one at a time: the engine batches within each call, and one GPU runs one."""
        return [fn(item) for item in items]

    @torch.inference_mode()
    def window_logprobs(self, prompts: list[list[int]], first: int,
                        rows: list[set[int]] | None = None) -> Iterator[Iterator[tuple[int, torch.Tensor]]]:
        """Per prompt, its k-mer log-probs after `<dna>` (token `first`) as (first token, [tokens, 4^k])
        blocks, each computed as it is read, every row computed (`rows` saves nothing here: a window is one
        forward pass).

        Prompts are batched, each row left-aligned and filled out with the first k-mer id (the model is
        causal, so a row's filling never reaches its real tokens), and the k-mer head runs over at most
        HEAD_CHUNK tokens at a time."""
        widest = max(len(ids) for ids in prompts)
        per_row = max(1, self.pass_tokens // widest)
        block_tokens = min(per_row, len(prompts)) * widest
        # the output projection runs over one row's tokens at a time, at most HEAD_CHUNK of them
        self.check_fits(block_tokens, block_tokens, min(HEAD_CHUNK, widest),
                        f"scoring {len(prompts)} window(s) of up to {(widest - first - 1) * self.k:,} bases")
        for lo in range(0, len(prompts), per_row):
            block = prompts[lo : lo + per_row]
            width = max(len(ids) for ids in block) - 1
            ids = torch.full((len(block), width), self.tokenizer.kmer_start_id, dtype=torch.long)
            for row, prompt in enumerate(block):
                ids[row, : len(prompt) - 1] = torch.tensor(prompt[:-1])
            hidden = self.hidden_states(ids.to(self.device))
            for row, prompt in enumerate(block):
                yield self._head_blocks(hidden[row, first:], len(prompt) - 1 - first)

    def _head_blocks(self, hidden: torch.Tensor, n_tokens: int):
        """(first token, k-mer log-probs) of one row's hidden states, HEAD_CHUNK tokens at a time."""
        for start in range(0, n_tokens, HEAD_CHUNK):
            yield start, torch.log_softmax(self.kmer_logits(hidden[start : min(start + HEAD_CHUNK, n_tokens)]), dim=-1)

    def kmer_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., hidden] -> [..., 4^k] float32 logits over the k-mers only.

        DNA never needs the other ~150k rows of the output projection, so only
        the k-mer rows are multiplied (in fp32 when the head was upcast).
        """
        return (hidden.to(self.dna_head.dtype) @ self.dna_head.T).float()

    def describe(self) -> dict:
        return {
            "name": self.name,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "head_dtype": str(self.dna_head.dtype).replace("torch.", ""),
            "parameters": self.decoder.n_parameters,
            "forward": self.decoder.name,
            "memory_bytes": self.n_bytes,
            "context_tokens": self.max_tokens,
            "context_bases": self.max_bases,
            "k": self.k,
            "tag_scheme": self.tags.name,
            "draft": self.draft,
            **self.info,
        }


# -- locating a model's files -------------------------------------------------------


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _encodes_tags(tokenizer, probe: str) -> bool:
    try:
        ids = tokenizer.encode(probe, add_special_tokens=False)
        return bool(ids) and tokenizer.decode(ids) == probe
    except (ValueError, KeyError, TypeError, IndexError):
        return False


def _load_text_tokenizer(path: Path, trust_remote_code: bool, probe: str):
    """The BPE half, checked by a round trip of a tag string.

    A repository whose tokenizer config names a remote-code class still ships
    the stock Qwen3 BPE files; without remote code, `AutoTokenizer` can then
    return a tokenizer with an empty vocabulary (it encodes text to nothing),
    so those files are read with the stock Qwen2 class instead.
    """
    from transformers import AutoTokenizer, Qwen2Tokenizer

    reason = "it does not encode and decode the tag text faithfully"
    for load in (
        lambda: AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=trust_remote_code),
        lambda: Qwen2Tokenizer.from_pretrained(str(path), local_files_only=True),
    ):
        try:
            tokenizer = load()
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            continue
        if _encodes_tags(tokenizer, probe):
            return tokenizer
    raise ModelError(f"the text tokenizer in '{path}' cannot be loaded: {reason}")


def weights_bytes(path: Path, dtype: torch.dtype) -> int:
    """Bytes the model's parameters take in `dtype`, read from the safetensors headers."""
    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelError(f"'{path}' holds no .safetensors weights")
    count = 0
    try:
        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():
                    shape = handle.get_slice(key).get_shape()
                    n = 1
                    for dim in shape:
                        n *= dim
                    count += n
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise ModelError(f"the weights in '{path}' cannot be read: {str(exc)[:200]}") from None
    return count * torch.tensor([], dtype=dtype).element_size()


def load_bundle(
    name: str,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    fp32_head: bool = True,
    trust_remote_code: bool = False,
) -> ModelBundle:
    """Load model `name` (see module docstring) for inference."""
    path = resolve_model_dir(name)
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    tokenizer, tags, _ = load_codec(path, trust_remote_code)
    return make_bundle(name, path, load_decoder(path, device, dtype, trust_remote_code), tokenizer, tags, fp32_head)


def load_codec(path: Path, trust_remote_code: bool = False):
    """(tokenizer, tag scheme, transformers config) of a model directory, without its weights: what a client
    of a server that runs the model needs to speak to it."""
    from transformers import AutoConfig

    dna_config = DnaConfig.from_file(path / "dna_config.json")
    tags = load_tag_scheme(path)
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"the config in '{path}' cannot be loaded: {str(exc).splitlines()[0][:200]}") from None
    kmer_end = dna_config.kmer_start_id + dna_config.n_kmers
    if config.vocab_size < kmer_end:
        raise ModelError(
            f"dna_config.json in '{path}' puts the last k-mer at id {kmer_end - 1}, but the model "
            f"has only {config.vocab_size} ids: the DNA config does not match the weights"
        )
    text_tokenizer = _load_text_tokenizer(path, trust_remote_code, tags.probe_text() or "<dna>")
    return CarbonTokenizer(dna_config, text_tokenizer), tags, config


def make_bundle(
    name: str,
    path: Path,
    decoder: Decoder | TransformersDecoder,
    tokenizer: CarbonTokenizer,
    tags: TagScheme,
    fp32_head: bool = True,
) -> ModelBundle:
    """Wrap a loaded decoder (already on its device) for the engine: the k-mer rows of its output
    projection (upcast to fp32 where asked) beside it, its card and its working memory."""
    config = decoder.config
    weight = decoder.output
    kmer_start = tokenizer.kmer_start_id
    head = weight[kmer_start : kmer_start + tokenizer.n_kmers]
    if head.shape[0] != tokenizer.n_kmers:
        raise ModelError(f"the output projection of '{name}' is too small for its DNA config")
    upcast = fp32_head and head.dtype != torch.float32
    head = head.float().clone() if upcast else head
    n_bytes = decoder.n_bytes + (head.numel() * head.element_size() if upcast else 0)
    return ModelBundle(
        name=name,
        path=path,
        decoder=decoder,
        tokenizer=tokenizer,
        tags=tags,
        device=weight.device,
        dtype=weight.dtype,
        max_tokens=int(config.max_position_embeddings),
        dna_head=head,
        n_bytes=n_bytes,
        card=ModelCard(path),
        memory=WorkingMemory(config, weight.dtype, tokenizer.n_kmers),
        draft=draft_for(name, path),
        info={"architecture": decoder.architecture},
    )
