"""Carbon's decoder, our own: the Llama-style forward pass the engine runs, with its weights by name.

Carbon is a stock `LlamaForCausalLM`. `transformers`' forward for it is general: it builds attention
masks, checks its cache, dispatches attention through a registry and calls seven projections per layer.
At batch 1 a decode step is a few matrix-vector products per layer, so on a CPU that machinery costs
about a fifth of the step and on a GPU it is launch overhead. Here, as in gpt-fast's `model.py`, one
layer is a dozen tensor operations, and the q/k/v and gate/up projections are each one product over
fused weights.

A checkpoint's `config.json` (`DecoderConfig`) and weights by name (`Decoder.from_tensors`) are all it
reads: no `transformers` class is built, and nothing here depends on its internals. What this module does
not compute (other architectures, q/k norms, sliding windows, other activations or RoPE scalings, weights
it does not know) is refused with the reason (`NotCovered`); `checkpoint.load_decoder` then runs the model
on `transformers`' own forward, loudly. `transformers` stays the reference the tests hold this module to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

#: The attention kernels the engine lets PyTorch choose from. cuDNN's, PyTorch's first choice on an
#: H100, builds an execution plan for every new shape (about 45 ms there, measured), and the keys of a
#: decode step are one longer at every step, so each step paid for a new plan; the flash,
#: memory-efficient and math kernels need none.
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels():
    """A context in which scaled-dot-product attention picks among `ATTENTION_BACKENDS` only."""
    return sdpa_kernel(ATTENTION_BACKENDS)


class NotCovered(Exception):  # noqa: N818 - what the checkpoint is, as the loader reads it
    """A checkpoint this module does not compute; the message says what in it."""


# -- the config ---------------------------------------------------------------------------------------

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # one decoder: Qwen2 is Llama with q/k/v biases


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding: its base and the scalings this module computes ("default", "linear",
    "llama3", each as `transformers` defines it)."""

    theta: float
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    def inv_freq(self, head_dim: int) -> torch.Tensor:
        """[head_dim / 2] float32 inverse frequencies."""
        inv = 1.0 / (self.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        if self.kind == "linear":
            return inv / self.factor
        if self.kind == "llama3":
            low_wavelen = self.original_max_positions / self.low_freq_factor
            high_wavelen = self.original_max_positions / self.high_freq_factor
            wavelen = 2 * math.pi / inv
            scaled = torch.where(wavelen > low_wavelen, inv / self.factor, inv)
            smooth = (self.original_max_positions / wavelen - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor)
            smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
            medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
            return torch.where(medium, smoothed, scaled)
        return inv

    @classmethod
    def from_config(cls, raw: dict) -> Rope:
        """The RoPE of a `config.json`, as `transformers` 5 (`rope_parameters`) or 4 (`rope_theta`,
        `rope_scaling`) writes it."""
        params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        theta = params.get("rope_theta", raw.get("rope_theta", 10_000.0))
        kind = params.get("rope_type", params.get("type", "default"))
        if kind not in ("default", "linear", "llama3"):
            raise NotCovered(f"RoPE scaling '{kind}'")
        if params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0)) != 1.0:
            raise NotCovered("a partial rotary embedding")
        if kind == "default":
            return cls(float(theta))
        extra = {"low_freq_factor": params.get("low_freq_factor"), "high_freq_factor": params.get("high_freq_factor"),
                 "original_max_positions": params.get("original_max_position_embeddings")}
        return cls(float(theta), kind, float(params["factor"]), **{k: v for k, v in extra.items() if v is not None})


@dataclass(frozen=True)
class DecoderConfig:
    """What the forward pass needs of a checkpoint's `config.json` (under its names there)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope: Rope
    architecture: str = "LlamaForCausalLM"

    @classmethod
    def from_dict(cls, raw: dict) -> DecoderConfig:
        """The config of a checkpoint this module computes, else `NotCovered` naming what it is."""
        architecture = (raw.get("architectures") or ["?"])[0]
        if architecture not in ARCHITECTURES:
            raise NotCovered(f"architecture {architecture}")
        if raw.get("hidden_act", "silu") != "silu":
            raise NotCovered(f"activation {raw.get('hidden_act')}")
        if (raw.get("pretraining_tp") or 1) != 1:
            raise NotCovered("tensor-parallel slices (pretraining_tp)")
        if raw.get("use_sliding_window") or (raw.get("sliding_window") and architecture != "Qwen2ForCausalLM"):
            raise NotCovered("sliding-window attention")
        if set(raw.get("layer_types") or ["full_attention"]) != {"full_attention"}:
            raise NotCovered(f"layer types {sorted(set(raw['layer_types']))}")
        heads = int(raw["num_attention_heads"])
        return cls(vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
                   intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
                   num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
                   head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
                   rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                   max_position_embeddings=int(raw["max_position_embeddings"]),
                   tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)), rope=Rope.from_config(raw),
                   architecture=architecture)


# -- the weights, by name ---------------------------------------------------------------------------


class LayerWeights(NamedTuple):
    """One layer's weights ([out, in] as `F.linear` takes them), q/k/v and gate/up each fused into one.
    A named tuple: the compiled layer takes it as tensors, so one compiled version serves every layer."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


class LayerShape(NamedTuple):
    """The numbers a layer's forward reads beside its weights (the same for every layer of a model)."""

    q_size: int
    kv_size: int
    head_dim: int
    eps: float


#: A checkpoint's tensor names (as `transformers` saves a Llama) for each weight of `LayerWeights`, fused
#: in order where several: the only place the checkpoint's naming is known.
LAYER_NAMES = {
    "input_norm": ("input_layernorm.weight",),
    "qkv": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "qkv_bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "o": ("self_attn.o_proj.weight",),
    "o_bias": ("self_attn.o_proj.bias",),
    "post_norm": ("post_attention_layernorm.weight",),
    "gate_up": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
    "gate_up_bias": ("mlp.gate_proj.bias", "mlp.up_proj.bias"),
    "down": ("mlp.down_proj.weight",),
    "down_bias": ("mlp.down_proj.bias",),
}
_IGNORED = ("rotary_emb.inv_freq",)  # kept by some older checkpoints; recomputed here from the config


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm: statistics in float32, the weight applied in the input dtype."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


# A layer is these two parts with the cache write and attention between them. They take tensors and
# numbers only, so one compiled version (`compiled_static_layer`) serves every layer of every model.

def _attention_inputs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: LayerWeights,
                      shape: LayerShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The new tokens' rotated queries and keys and their values, each [batch, heads, new, head_dim]."""
    batch, new = x.shape[:2]
    qkv = F.linear(_rms_norm(x, layer.input_norm, shape.eps), layer.qkv, layer.qkv_bias)
    q, k, v = qkv.split((shape.q_size, shape.kv_size, shape.kv_size), dim=-1)
    q = _rotate(q.view(batch, new, -1, shape.head_dim).transpose(1, 2), cos, sin)
    k = _rotate(k.view(batch, new, -1, shape.head_dim).transpose(1, 2), cos, sin)
    return q, k, v.view(batch, new, -1, shape.head_dim).transpose(1, 2)


def _layer_output(x: torch.Tensor, attn: torch.Tensor, layer: LayerWeights, shape: LayerShape) -> torch.Tensor:
    """The residual stream after the attention output [batch, heads, new, head_dim] and the MLP."""
    batch, new = x.shape[:2]
    x = x + F.linear(attn.transpose(1, 2).reshape(batch, new, -1), layer.o, layer.o_bias)
    gate, up = F.linear(_rms_norm(x, layer.post_norm, shape.eps), layer.gate_up, layer.gate_up_bias).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, layer.down, layer.down_bias)


def _masked_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                      scale: torch.Tensor) -> torch.Tensor:
    """Attention of the new queries [batch, heads, new, head_dim] over whole key and value buffers
    [batch, kv heads, capacity, head_dim], `mask` [new, capacity] (True = attend). The query heads that
    share a key head are read as extra rows of that head, so keys are never repeated for them; scores
    and softmax are in float32. Written out rather than through scaled-dot-product attention, whose
    kernels for a mask with `enable_gqa` are its unfused reference ones (about eight per layer), so
    that a compiled layer fuses the scaling, mask and softmax into one kernel. (It writes the scores out,
    which a fused kernel does not: 64-sample designs took 10-17% longer with it on an H200 than with
    eager attention between two compiled halves; `_fused_attention` is the alternative for many rows.)"""
    batch, heads, new, head_dim = q.shape
    groups = heads // keys.shape[1]
    rows = q.reshape(batch, keys.shape[1], groups * new, head_dim)
    scores = torch.matmul(rows, keys.transpose(-1, -2)).float() * scale
    scores = scores.masked_fill(~mask.repeat(groups, 1), float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(values.dtype)
    return torch.matmul(weights, values).view(batch, heads, new, head_dim)


def _fused_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                     scale: torch.Tensor) -> torch.Tensor:
    """`_masked_attention` through scaled-dot-product attention: the grouped query heads are rows of
    their key head here too, so no key is repeated and the memory-efficient kernel takes the mask (it
    never writes the scores out). The queries are scaled first, since the kernel's scale is a number."""
    batch, heads, new, head_dim = q.shape
    groups = heads // keys.shape[1]
    rows = (q * scale).to(q.dtype).reshape(batch, keys.shape[1], groups * new, head_dim)
    attn = F.scaled_dot_product_attention(rows, keys, values, attn_mask=mask.repeat(groups, 1), scale=1.0)
    return attn.view(batch, heads, new, head_dim)


#: From this many rows (samples) a static layer's attention is `_fused_attention`, below it
#: `_masked_attention`; None: never. Which is faster at which batch is a GPU measurement
#: (the GPU report's `forward_step_64`), so the written-out form stays until one says otherwise.
FUSED_ATTENTION_FROM_ROWS: int | None = None


def static_attention(rows: int):
    """The attention a static layer over `rows` samples uses (`FUSED_ATTENTION_FROM_ROWS`)."""
    fused = FUSED_ATTENTION_FROM_ROWS is not None and rows >= FUSED_ATTENTION_FROM_ROWS
    return _fused_attention if fused else _masked_attention


def _static_layer(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                  mask: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: torch.Tensor,
                  layer: LayerWeights, shape: LayerShape, attention=_masked_attention) -> torch.Tensor:
    """One layer over fixed key and value buffers: the new tokens' keys and values written at
    `positions` [new], then `attention` under `mask` [new, capacity] and the MLP."""
    q, k, v = _attention_inputs(x, cos, sin, layer, shape)
    keys.index_copy_(2, positions, k)
    values.index_copy_(2, positions, v)
    return _layer_output(x, attention(q, keys, values, mask, scale), layer, shape)


_compiled_static_layer = None


def compiled_static_layer():
    """`_static_layer` compiled by `torch.compile` (once per process, shapes dynamic): at batch 1 a
    layer's norms, rotations, cache writes, softmax and activations are dozens of tiny kernels, and on a
    GPU their launches cost as much as reading the layer's weights; fused, a layer is about a dozen
    kernels. Every layer of every model shares it (the attention scale is a tensor, so a model's head
    size does not compile it again), and the compile limit covers the shapes a process meets (models,
    batch sizes, verify lengths)."""
    global _compiled_static_layer
    if _compiled_static_layer is None:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        _compiled_static_layer = torch.compile(_static_layer, dynamic=True)
    return _compiled_static_layer




class Decoder:
    """Carbon's decoder stack with its weights by name: embedding, layers, final norm and the output
    projection (the embedding itself where the checkpoint ties them).

    Call it with ids [batch, new] and a cache (`kv.preallocated_cache`, or any `transformers` Cache: it
    writes through `cache.update`) for the final-norm hidden states [batch, new, hidden]. All rows of a
    batch share their positions, as everywhere in this engine.
    """

    static = True  # it runs the shape-static step CUDA graphs replay (`static_forward`)
    name = "Carbon's own decoder"

    def __init__(self, config: DecoderConfig, embed: torch.Tensor, layers: list[LayerWeights], norm: torch.Tensor,
                 output: torch.Tensor):
        self.config, self.embed, self.layers, self.norm, self.output = config, embed, layers, norm, output
        self.shape = LayerShape(config.num_attention_heads * config.head_dim,
                                config.num_key_value_heads * config.head_dim, config.head_dim, config.rms_norm_eps)
        self.scaling = config.head_dim ** -0.5
        self.scale = torch.tensor(self.scaling, dtype=torch.float32, device=embed.device)
        self.inv_freq = config.rope.inv_freq(config.head_dim).to(embed.device)

    @classmethod
    def from_tensors(cls, config: DecoderConfig, tensors: dict[str, torch.Tensor]) -> Decoder:
        """The decoder of `tensors` (a checkpoint's names, each tensor on its device and in its dtype),
        fused; `NotCovered` naming a weight this module does not compute or one it lacks. The layers' tensors
        are taken out of `tensors` as they are fused, so the parts of a layer are let go as soon as its fused
        copy is made: loading holds the checkpoint and one layer's fused weights at most, not two copies."""
        known = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
        layers = []
        for index in range(config.num_hidden_layers):
            prefix = f"model.layers.{index}."
            parts = {}
            for field, names in LAYER_NAMES.items():
                found = [tensors.pop(prefix + name, None) for name in names]
                if all(t is None for t in found):
                    if not field.endswith("bias"):
                        raise NotCovered(f"no weight {prefix + names[0]}")
                    parts[field] = None
                elif any(t is None for t in found):
                    raise NotCovered(f"biases on some of {', '.join(prefix + n for n in names)} only")
                else:
                    parts[field] = found[0] if len(found) == 1 else torch.cat(found)
            layers.append(LayerWeights(**parts))
        unknown = sorted(name for name in tensors if name not in known and not name.endswith(_IGNORED))  # left over
        if unknown:
            raise NotCovered(f"weights it does not compute ({', '.join(unknown[:3])}"
                             f"{f' and {len(unknown) - 3} more' if len(unknown) > 3 else ''})")
        embed = tensors["model.embed_tokens.weight"]
        output = embed if config.tie_word_embeddings else tensors.get("lm_head.weight")
        if output is None:
            raise NotCovered("no output projection (lm_head.weight) and untied embeddings")
        return cls(config, embed, layers, tensors["model.norm.weight"], output)

    @property
    def n_parameters(self) -> int:
        return sum(t.numel() for t in self._weights())

    @property
    def n_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._weights())

    @property
    def architecture(self) -> str:
        return self.config.architecture

    def _weights(self) -> list[torch.Tensor]:
        """Every weight once (a tied output projection is the embedding)."""
        tensors = [self.embed, self.norm, *(t for layer in self.layers for t in layer if t is not None)]
        return tensors + ([] if self.output is self.embed else [self.output])

    def _rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [1, 1, new, head_dim] of `positions` [new], computed in float32 as `transformers` does."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype)[None, None], angles.sin().to(dtype)[None, None]

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, cache=None) -> torch.Tensor:
        batch, new = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        positions = torch.arange(past, past + new, device=input_ids.device)
        # One new token sees everything; a prompt with no history is plainly causal;
        # several new tokens after a history (a speculative verify) need the offset mask.
        mask, causal = None, False
        if new > 1 and past == 0:
            causal = True
        elif new > 1:
            mask = torch.ones(new, past + new, dtype=torch.bool, device=input_ids.device).tril(past)
        store = (lambda index, k, v: cache.update(k, v, index)) if cache is not None else None
        return self.forward(input_ids, positions, store, mask, causal)

    @torch.inference_mode()
    def continuations(self, cache, keep: int, rows: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states [n, branches, new, hidden] of `branches` continuations `input_ids`
        [n, branches, new] of each of the cache's rows `rows` [n] after its first `keep` positions, in one
        pass: the branches of a row are laid side by side, and each attends to the kept prefix and to its own
        tokens only (a block-diagonal mask, as a tree of drafts is verified), so the prefix is read once a
        row instead of copied once a branch. The cache is left as it was."""
        n, branches, new = input_ids.shape
        device = input_ids.device
        positions = torch.arange(keep, keep + new, device=device).repeat(branches)
        own = torch.ones(new, new, dtype=torch.bool, device=device).tril()
        mask = torch.cat([torch.ones(branches * new, keep, dtype=torch.bool, device=device),
                          torch.block_diag(*[own] * branches)], dim=1)

        def store(index: int, keys: torch.Tensor, values: torch.Tensor):
            layer = cache.layers[index]
            return (torch.cat([layer.keys[rows, :, :keep], keys], dim=2),
                    torch.cat([layer.values[rows, :, :keep], values], dim=2))

        hidden = self.forward(input_ids.reshape(n, branches * new), positions, store, mask, False)
        return hidden.reshape(n, branches, new, -1)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, store, mask: torch.Tensor | None,
                causal: bool) -> torch.Tensor:
        """The stack itself, for new tokens at `positions` [new]: `store(layer index, keys, values)`
        keeps the new keys and values and returns all those to attend to (None: the new ones only);
        `mask` (True = attend) or `causal` says which of them each new token sees."""
        x = F.embedding(input_ids, self.embed)
        cos, sin = self._rotary(positions, x.dtype)
        for index, layer in enumerate(self.layers):
            q, k, v = _attention_inputs(x, cos, sin, layer, self.shape)
            if store is not None:
                k, v = store(index, k, v)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=self.scaling,
                                                  enable_gqa=True)
            x = _layer_output(x, attn, layer, self.shape)
        return _rms_norm(x, self.norm, self.shape.eps)

    def static_forward(self, input_ids: torch.Tensor, positions: torch.Tensor, keys: list[torch.Tensor],
                       values: list[torch.Tensor], mask: torch.Tensor, compiled: bool = False) -> torch.Tensor:
        """The stack over fixed per-layer key and value buffers [batch, kv heads, capacity, head_dim]
        (a CUDA graph's): new tokens at `positions` [new] are written there and attend under `mask`
        [new, capacity]; `compiled` runs `compiled_static_layer`."""
        layer_step = compiled_static_layer() if compiled else _static_layer
        attention = static_attention(input_ids.shape[0])
        x = F.embedding(input_ids, self.embed)
        cos, sin = self._rotary(positions, x.dtype)
        for layer, layer_keys, layer_values in zip(self.layers, keys, values, strict=True):
            x = layer_step(x, cos, sin, positions, mask, layer_keys, layer_values, self.scale, layer, self.shape,
                           attention)
        return _rms_norm(x, self.norm, self.shape.eps)
