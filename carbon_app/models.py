"""Finding, loading and caching Carbon models.

A model is a directory in the Hugging Face format (`config.json`, safetensors
weights) plus `dna_config.json`, the text-tokenizer files and optionally
`tag_scheme.json`. It is named one of three ways:

- a bundled demo model: a folder name under `assets/models/`;
- a hub id such as `HuggingFaceBio/Carbon-3B`, optionally `@revision`;
- a local directory path.

`ModelManager` hands out loaded `ModelBundle`s, keeps the most recently used
ones within a memory budget (GPU memory on a GPU), loads each model once even
when many requests ask for it at the same moment, and never runs remote code
unless it was created with `trust_remote_code=True`.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .decoder import LeanDecoder
from .errors import ModelError
from .tags import TagScheme, load_tag_scheme
from .tokens import CarbonTokenizer, DnaConfig

ASSETS_MODELS = Path(__file__).resolve().parent.parent / "assets" / "models"

#: Released checkpoints and the draft each pairs with for speculative decoding.
#: Revisions are "main" until a deployment pins a commit with `id@<commit>` or
#: CARBON_MODEL; the hub cannot be reached to look the commits up from here.
HUB_MODELS = {
    "HuggingFaceBio/Carbon-500M": {"revision": "main", "draft": None},
    "HuggingFaceBio/Carbon-3B": {"revision": "main", "draft": "HuggingFaceBio/Carbon-500M"},
    "HuggingFaceBio/Carbon-8B": {"revision": "main", "draft": "HuggingFaceBio/Carbon-500M"},
}
_HUB_FILES = ["*.json", "*.safetensors", "merges.txt", "vocab.json", "*.model", "*.md"]


def bundled_models() -> list[str]:
    """Names of the demo models shipped in `assets/models/`."""
    if not ASSETS_MODELS.is_dir():
        return []
    return sorted(p.name for p in ASSETS_MODELS.iterdir() if (p / "config.json").exists())


def default_model_name() -> str:
    """CARBON_MODEL if set, else the bundled demo target."""
    configured = os.environ.get("CARBON_MODEL", "").strip()
    if configured:
        return configured
    for name in bundled_models():
        if (ASSETS_MODELS / name / "carbon_role.json").exists():
            role = json.loads((ASSETS_MODELS / name / "carbon_role.json").read_text())
            if role.get("role") == "target":
                return name
    bundled = bundled_models()
    if bundled:
        return bundled[0]
    raise ModelError("no model given and no bundled demo model found: pass a model name or directory")


@dataclass
class ModelBundle:
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
    draft: str | None = None
    info: dict = field(default_factory=dict)
    free_memory: Callable[[], int] | None = None  # bytes the manager's budget leaves for requests
    decoder: LeanDecoder | None = None  # the lean forward, where the architecture is one it computes

    @property
    def k(self) -> int:
        return self.tokenizer.k

    @property
    def max_bases(self) -> int:
        return self.max_tokens * self.k

    @torch.inference_mode()
    def hidden_states(self, input_ids: torch.Tensor, cache=None):
        """Final-norm hidden states of the decoder (no output projection)."""
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

    def working_bytes(self, kv_tokens: int, forward_tokens: int, scored_tokens: int) -> int:
        """About the memory a request needs beside the weights: keys and values for
        `kv_tokens` (summed over rows), one layer's activations for the
        `forward_tokens` of its largest forward pass, and fp32 k-mer log-probs
        (with their logits) for `scored_tokens` positions."""
        config = self.model.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        size = torch.tensor([], dtype=self.dtype).element_size()
        per_kv_token = 2 * config.num_hidden_layers * kv_heads * head_dim * size
        per_forward_token = (4 * config.hidden_size + 3 * config.intermediate_size) * size
        return (kv_tokens * per_kv_token + forward_tokens * per_forward_token
                + scored_tokens * self.tokenizer.n_kmers * 4 * 2)

    def check_memory(self, kv_tokens: int, forward_tokens: int, scored_tokens: int, what: str) -> None:
        """Refuse, before any work, a request that cannot fit in the memory budget."""
        if self.free_memory is None:
            return
        needed, free = self.working_bytes(kv_tokens, forward_tokens, scored_tokens), self.free_memory()
        if needed > free:
            raise ModelError(
                f"{what} needs about {needed / 2**20:,.0f} MiB of working memory beside the model weights, "
                f"but the memory budget (CARBON_MEMORY_BUDGET_GB) leaves {max(free, 0) / 2**20:,.0f} MiB: ask for "
                "fewer samples, fewer bases or a shorter window")

    @functools.cached_property
    def quality(self) -> dict | None:
        """The model's measured variant-effect quality on held-out genes (`eval.json`'s "quality",
        written by the demo-model pipeline), or None when the model ships no such measurement."""
        path = self.path / "eval.json"
        try:
            return json.loads(path.read_text()).get("quality") if path.exists() else None
        except (OSError, json.JSONDecodeError):
            return None

    def describe(self) -> dict:
        return {
            "name": self.name,
            "path": str(self.path),
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


def _split_revision(name: str) -> tuple[str, str | None]:
    if "@" in name:
        repo, revision = name.rsplit("@", 1)
        return repo, revision or None
    return name, None


def _looks_like_hub_id(name: str) -> bool:
    repo, _ = _split_revision(name)
    parts = repo.split("/")
    return len(parts) == 2 and all(parts) and not repo.startswith((".", "/", "~"))


def resolve_model_dir(name: str) -> Path:
    """Directory holding the files of model `name`, downloading from the hub if needed."""
    name = name.strip()
    if not name:
        raise ModelError("no model name given")
    if name in bundled_models():
        return ASSETS_MODELS / name
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / "config.json").exists():
            raise ModelError(f"the directory '{local}' holds no config.json: it is not a model directory")
        return local
    if _looks_like_hub_id(name):
        return _hub_snapshot(name)
    known = ", ".join(bundled_models() + list(HUB_MODELS)) or "none"
    raise ModelError(
        f"unknown model '{name}': not a bundled model, a local model directory, or a hub id "
        f"(known: {known})"
    )


def _hub_snapshot(name: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo, revision = _split_revision(name)
    revision = revision or HUB_MODELS.get(repo, {}).get("revision", "main")
    try:  # the cache first: no network when the files are already here
        return Path(snapshot_download(repo, revision=revision, allow_patterns=_HUB_FILES, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        raise ModelError(
            f"model '{repo}' (revision {revision}) is not in the local Hugging Face cache and "
            "HF_HUB_OFFLINE is set: download it first or point to a local directory"
        )
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=_HUB_FILES))
    except (HfHubHTTPError, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(
            f"model '{repo}' (revision {revision}) is not in the local cache and could not be "
            f"downloaded from the hub ({reason[:200]})"
        ) from None


# -- loading ----------------------------------------------------------------------------


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
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model_dir(name)
    device = device or default_device()
    dtype = dtype or default_dtype(device)
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
    probe = tags.probe_text() or "<dna>"
    text_tokenizer = _load_text_tokenizer(path, trust_remote_code, probe)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, local_files_only=True, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(f"the weights in '{path}' cannot be loaded: {str(exc).splitlines()[0][:200]}") from None
    tokenizer = CarbonTokenizer(dna_config, text_tokenizer)
    return make_bundle(name, path, model.to(device).eval(), tokenizer, tags, fp32_head)


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
        draft=draft_for(name, path),
        info={"architecture": (config.architectures or [type(model).__name__])[0], "lean_decoder": lean},
        decoder=LeanDecoder(model) if lean else None,
    )


def draft_for(name: str, path: Path | None = None) -> str | None:
    """Name of the draft model that pairs with target `name`, if any."""
    repo, _ = _split_revision(name)
    if repo in HUB_MODELS:
        return HUB_MODELS[repo]["draft"]
    role_file = (path or Path(name)) / "carbon_role.json"
    if role_file.exists():
        try:
            return json.loads(role_file.read_text()).get("draft")
        except (OSError, json.JSONDecodeError):
            return None
    return None


# -- the cache ------------------------------------------------------------------------


@contextmanager
def out_of_memory_as_error(what: str) -> Iterator[None]:
    """Turn running out of memory inside the block into a ModelError that says what to do.

    The failed request's tensors are freed when the error leaves the block (the
    original traceback, which holds them, is dropped), so the models that are
    loaded stay loaded and keep working.
    """
    try:
        yield
    except RuntimeError as exc:  # CUDA raises torch.OutOfMemoryError (a RuntimeError), the CPU allocator says so
        if not (isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)
                or "out of memory" in str(exc)):
            raise
        device = "GPU" if isinstance(exc, torch.OutOfMemoryError) else "machine"
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise ModelError(f"the {device} ran out of memory during {what}; the loaded models still work: ask for "
                         "fewer samples, fewer bases or a shorter window") from None


def _default_budget(device: torch.device) -> int:
    configured = os.environ.get("CARBON_MEMORY_BUDGET_GB")
    if configured:
        return int(float(configured) * 2**30)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory * 0.85)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.5)


class ModelManager:
    """Loaded models, least recently used first out, safe to share between threads."""

    def __init__(
        self,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        fp32_head: bool = True,
        memory_budget_bytes: int | None = None,
        trust_remote_code: bool = False,
    ):
        self.device = torch.device(device) if device is not None else default_device()
        self.dtype = dtype or default_dtype(self.device)
        self.fp32_head = fp32_head
        self.trust_remote_code = trust_remote_code
        self.memory_budget_bytes = memory_budget_bytes or _default_budget(self.device)
        if self.device.type == "cuda":  # the allocator itself then keeps to the budget
            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, self.memory_budget_bytes / total), self.device)
        self._cache: OrderedDict[str, ModelBundle] = OrderedDict()
        self._loading: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.loads = 0  # how many times a model was actually read from disk

    def get(self, name: str | None = None) -> ModelBundle:
        """The loaded model `name` (default: the configured or bundled one)."""
        name = (name or default_model_name()).strip()
        with self._lock:
            if name in self._cache:
                self._cache.move_to_end(name)
                return self._cache[name]
            future = self._loading.get(name)
            owner = future is None
            if owner:
                future = self._loading[name] = Future()
        if not owner:
            return future.result()  # another request is loading it: wait, share its result or error
        try:
            bundle = self._load(name)
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._loading.pop(name, None)
        future.set_result(bundle)
        return bundle

    def _load(self, name: str) -> ModelBundle:
        needed = weights_bytes(resolve_model_dir(name), self.dtype)
        if needed > self.memory_budget_bytes:
            raise ModelError(
                f"model '{name}' needs about {needed / 2**30:.2f} GiB, more than the "
                f"{self.memory_budget_bytes / 2**30:.2f} GiB memory budget"
            )
        with self._lock:
            self._evict_until_free(needed)
        bundle = load_bundle(name, self.device, self.dtype, self.fp32_head, self.trust_remote_code)
        self.loads += 1
        bundle.free_memory = self.free_bytes
        with self._lock:
            self._evict_until_free(bundle.n_bytes)
            self._cache[name] = bundle
        return bundle

    def _evict_until_free(self, needed: int) -> None:
        evicted = False
        while self._cache and self.used_bytes() + needed > self.memory_budget_bytes:
            self._cache.popitem(last=False)
            evicted = True
        if evicted and self.device.type == "cuda":
            torch.cuda.empty_cache()

    def used_bytes(self) -> int:
        return sum(b.n_bytes for b in self._cache.values())

    def free_bytes(self) -> int:
        """What the budget leaves for requests beside the loaded weights."""
        with self._lock:
            return self.memory_budget_bytes - self.used_bytes()

    def loaded(self) -> list[dict]:
        with self._lock:
            return [b.describe() for b in self._cache.values()]

    def unload(self, name: str) -> bool:
        with self._lock:
            removed = self._cache.pop(name, None) is not None
        if removed and self.device.type == "cuda":
            torch.cuda.empty_cache()
        return removed

    def draft_for(self, name: str | None = None) -> str | None:
        name = name or default_model_name()
        with self._lock:
            if name in self._cache:
                return self._cache[name].draft
        return draft_for(name, resolve_model_dir(name) if not _looks_like_hub_id(name) else None)
