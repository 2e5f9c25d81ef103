"""A loaded model with what the engine needs beside it: codec, tags, the k-mer head, its card and memory.

Loading reads everything from the model's own files (`dna_config.json`,
`tag_scheme.json`, the tokenizer), runs stock `transformers` classes and never
remote code unless asked, and picks the lean forward where the architecture
is one it computes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.tags import TagScheme, load_tag_scheme
from ..core.tokens import CarbonTokenizer, DnaConfig
from ..errors import ModelError
from .card import ModelCard
from .decoder import LeanDecoder, attention_kernels
from .hub import draft_for, resolve_model_dir
from .memory import WorkingMemory


class Context:
    """What a model reads at most, in tokens and in bases: a loaded model's and a served one's alike."""

    tokenizer: CarbonTokenizer
    max_tokens: int

    @property
    def k(self) -> int:
        return self.tokenizer.k

    @property
    def max_bases(self) -> int:
        return self.max_tokens * self.k


@dataclass
class ModelBundle(Context):
    """A loaded model with everything the engine needs to use it."""

    name: str
    path: Path
    model: torch.nn.Module
    tokenizer: CarbonTokenizer
    tags: TagScheme
    device: torch.device
    dtype: torch.dtype
    max_tokens: int
    dna_head: torch.Tensor  # [4^k, hidden]: the k-mer rows of the output projection
    n_bytes: int
    card: ModelCard  # what the model's directory says of itself: its scoring setup and measured quality
    memory: WorkingMemory  # what a request needs beside the weights, and the budget it must fit
    draft: str | None = None
    info: dict = field(default_factory=dict)
    decoder: LeanDecoder | None = None  # the lean forward, where the architecture is one it computes
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
            if self.decoder is not None:
                return self.decoder(input_ids, cache)
            out = self.model.model(input_ids=input_ids, past_key_values=cache, use_cache=cache is not None)
            return out.last_hidden_state

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
            "parameters": sum(p.numel() for p in self.model.parameters()),
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
    from transformers import AutoModelForCausalLM

    path = resolve_model_dir(name)
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    tokenizer, tags, _ = load_codec(path, trust_remote_code)
    try:
        # on a GPU the weights go straight from the file to the device (accelerate's device_map), never
        # through a full copy in host memory
        placement = {"device_map": device} if device.type == "cuda" else {}
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, local_files_only=True, trust_remote_code=trust_remote_code, **placement
        )
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(f"the weights in '{path}' cannot be loaded: {str(exc).splitlines()[0][:200]}") from None
    return make_bundle(name, path, model.to(device).eval(), tokenizer, tags, fp32_head)


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
    model: torch.nn.Module,
    tokenizer: CarbonTokenizer,
    tags: TagScheme,
    fp32_head: bool = True,
) -> ModelBundle:
    """Wrap a loaded causal LM (already on its device) for the engine.

    Where `LeanDecoder` computes the architecture, the model's q/k/v and gate/up
    weights are fused in place for it; the model itself keeps working as before
    (and `dataclasses.replace(bundle, decoder=None)` runs the engine on it).
    """
    config = model.config
    weight = model.get_output_embeddings().weight.detach()
    kmer_start = tokenizer.kmer_start_id
    head = weight[kmer_start : kmer_start + tokenizer.n_kmers]
    if head.shape[0] != tokenizer.n_kmers:
        raise ModelError(f"the output projection of '{name}' is too small for its DNA config")
    upcast = fp32_head and head.dtype != torch.float32
    head = head.float().clone() if upcast else head
    lean = LeanDecoder.supports(model)
    n_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    n_bytes += head.numel() * head.element_size() if upcast else 0
    return ModelBundle(
        name=name,
        path=path,
        model=model,
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
        info={"architecture": (config.architectures or [type(model).__name__])[0], "lean_decoder": lean},
        decoder=LeanDecoder(model) if lean else None,
    )


