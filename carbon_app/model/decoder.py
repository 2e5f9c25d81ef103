"""A lean forward pass for Llama-style decoders (the Carbon architecture).

`transformers`' Llama forward is general: it builds attention masks, checks
its cache, dispatches its attention through a registry and calls seven
separate projections per layer. At batch 1 a decode step is a few matrix-vector
products per layer, so on a CPU that machinery costs about a fifth of the step
and on a GPU it is launch overhead. Here, as in gpt-fast, one layer is a dozen
tensor operations, and the q/k/v and gate/up projections are each one product
over fused weights.

The fused weights are the model's own: each layer's q, k and v weights (and
gate and up) are copied once into one tensor and the original modules are
pointed at row slices of it, so the model keeps working unchanged (the
`transformers` forward, `generate`, the benchmark's stock contender) and no
memory is added. Models this module does not recognise (other norms, q/k
norms, non-SiLU MLPs, tensor-parallel slices) keep the `transformers` forward:
`LeanDecoder.supports` says which.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

#: The attention kernels the engine lets PyTorch choose from. cuDNN's, PyTorch's first choice on an
#: H100, builds an execution plan for every new shape (about 45 ms there, measured), and the keys of a
#: decode step are one longer at every step, so each step paid for a new plan; the flash,
#: memory-efficient and math kernels need none.
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels():
    """A context in which scaled-dot-product attention picks among `ATTENTION_BACKENDS` only."""
    return sdpa_kernel(ATTENTION_BACKENDS)


def _fuse(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for `linears`, with each module re-pointed at its rows of it."""
    weight = torch.cat([m.weight.detach() for m in linears])
    has_bias = linears[0].bias is not None
    bias = torch.cat([m.bias.detach() for m in linears]) if has_bias else None
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight = nn.Parameter(weight[start : start + rows], requires_grad=False)
        if has_bias:
            m.bias = nn.Parameter(bias[start : start + rows], requires_grad=False)
        start += rows
    return weight, bias


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

def _attention_inputs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                      qkv_weight: torch.Tensor, qkv_bias: torch.Tensor | None, q_size: int, kv_size: int,
                      head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The new tokens' rotated queries and keys and their values, each [batch, heads, new, head_dim]."""
    batch, new = x.shape[:2]
    qkv = F.linear(_rms_norm(x, norm_weight, eps), qkv_weight, qkv_bias)
    q, k, v = qkv.split((q_size, kv_size, kv_size), dim=-1)
    q = _rotate(q.view(batch, new, -1, head_dim).transpose(1, 2), cos, sin)
    k = _rotate(k.view(batch, new, -1, head_dim).transpose(1, 2), cos, sin)
    return q, k, v.view(batch, new, -1, head_dim).transpose(1, 2)


def _layer_output(x: torch.Tensor, attn: torch.Tensor, o_weight: torch.Tensor, o_bias: torch.Tensor | None,
                  norm_weight: torch.Tensor, eps: float, gate_up_weight: torch.Tensor,
                  gate_up_bias: torch.Tensor | None, down_weight: torch.Tensor,
                  down_bias: torch.Tensor | None) -> torch.Tensor:
    """The residual stream after the attention output [batch, heads, new, head_dim] and the MLP."""
    batch, new = x.shape[:2]
    x = x + F.linear(attn.transpose(1, 2).reshape(batch, new, -1), o_weight, o_bias)
    gate, up = F.linear(_rms_norm(x, norm_weight, eps), gate_up_weight, gate_up_bias).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, down_weight, down_bias)


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
                  attention_inputs: tuple, output: tuple, attention=_masked_attention) -> torch.Tensor:
    """One layer over fixed key and value buffers: the new tokens' keys and values written at
    `positions` [new], then `attention` under `mask` [new, capacity] and the MLP."""
    q, k, v = _attention_inputs(x, cos, sin, *attention_inputs)
    keys.index_copy_(2, positions, k)
    values.index_copy_(2, positions, v)
    return _layer_output(x, attention(q, keys, values, mask, scale), *output)


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


class _Layer:
    def __init__(self, layer: nn.Module):
        attn, mlp = layer.self_attn, layer.mlp
        input_norm, post_norm = layer.input_layernorm, layer.post_attention_layernorm
        qkv_weight, qkv_bias = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        gate_up_weight, gate_up_bias = _fuse([mlp.gate_proj, mlp.up_proj])
        self.scaling = attn.scaling
        self.scale = torch.tensor(attn.scaling, dtype=torch.float32, device=qkv_weight.device)
        self.attention_inputs = (input_norm.weight, input_norm.variance_epsilon, qkv_weight, qkv_bias,
                                 attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0], attn.head_dim)
        self.output = (attn.o_proj.weight, attn.o_proj.bias, post_norm.weight, post_norm.variance_epsilon,
                       gate_up_weight, gate_up_bias, mlp.down_proj.weight, mlp.down_proj.bias)


class LeanDecoder:
    """The decoder stack of a Llama-style causal LM, run without `transformers`' forward.

    Call it like the model's `.model(input_ids, past_key_values=cache)`: it
    returns the final-norm hidden states [batch, tokens, hidden] and writes the
    new keys and values through `cache.update` (any `transformers` Cache,
    including the engine's preallocated one).
    All rows of a batch share their positions, as everywhere in this engine.
    """

    def __init__(self, model: nn.Module):
        if not self.supports(model):
            raise ValueError(f"{type(model).__name__} is not a plain Llama-style decoder")
        base = model.model
        self.embed, self.final_norm, self.rotary = base.embed_tokens, base.norm, base.rotary_emb
        self.layers = [_Layer(layer) for layer in base.layers]

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """Whether `model` is exactly what `LeanDecoder` computes (else keep its own forward)."""
        config, base = model.config, getattr(model, "model", None)
        layers = getattr(base, "layers", None)
        if layers is None or not hasattr(base, "rotary_emb") or not hasattr(base, "embed_tokens"):
            return False
        if getattr(config, "hidden_act", None) != "silu" or getattr(config, "pretraining_tp", 1) != 1:
            return False
        if getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", False):
            return False
        if set(getattr(config, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
            return False
        norms = [base.norm] + [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
        if any(type(n).__name__ not in ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm") for n in norms):
            return False
        for layer in layers:
            attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
            parts = [getattr(attn, p, None) for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
            parts += [getattr(mlp, p, None) for p in ("gate_proj", "up_proj", "down_proj")]
            if not all(isinstance(p, nn.Linear) for p in parts):
                return False
            if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
                return False
            if not hasattr(attn, "scaling") or not hasattr(attn, "head_dim"):
                return False
            fused_groups = (parts[0:3], parts[4:6])  # q/k/v and gate/up: each fused with one bias or none
            if any(len({p.bias is None for p in group}) > 1 for group in fused_groups):
                return False
        return True

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, cache=None) -> torch.Tensor:
        batch, new = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        positions = torch.arange(past, past + new, device=input_ids.device).unsqueeze(0)
        # One new token sees everything; a prompt with no history is plainly causal;
        # several new tokens after a history (a speculative verify) need the offset mask.
        mask, causal = None, False
        if new > 1 and past == 0:
            causal = True
        elif new > 1:
            mask = torch.ones(new, past + new, dtype=torch.bool, device=input_ids.device).tril(past)
        store = (lambda index, k, v: cache.update(k, v, index)) if cache is not None else None
        return self.forward(input_ids, positions, store, mask, causal)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, store, mask: torch.Tensor | None,
                causal: bool) -> torch.Tensor:
        """The stack itself, for new tokens at `positions` [1, new]: `store(layer index, keys, values)`
        keeps the new keys and values and returns all those to attend to (None: the new ones only);
        `mask` (True = attend) or `causal` says which of them each new token sees."""
        x = self.embed(input_ids)
        cos, sin = (t.unsqueeze(1) for t in self.rotary(x, positions))  # [1, 1, new, head_dim]
        for index, layer in enumerate(self.layers):
            q, k, v = _attention_inputs(x, cos, sin, *layer.attention_inputs)
            if store is not None:
                k, v = store(index, k, v)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  scale=layer.scaling, enable_gqa=True)
            x = _layer_output(x, attn, *layer.output)
        return self._final_norm(x)

    def static_forward(self, input_ids: torch.Tensor, positions: torch.Tensor, keys: list[torch.Tensor],
                       values: list[torch.Tensor], mask: torch.Tensor, compiled: bool = False) -> torch.Tensor:
        """The stack over fixed per-layer key and value buffers [batch, kv heads, capacity, head_dim]
        (a CUDA graph's): new tokens at `positions` [new] are written there and attend under `mask`
        [new, capacity]; `compiled` runs `compiled_static_layer`."""
        layer_step = compiled_static_layer() if compiled else _static_layer
        attention = static_attention(input_ids.shape[0])
        x = self.embed(input_ids)
        cos, sin = (t.unsqueeze(1) for t in self.rotary(x, positions.unsqueeze(0)))
        for layer, layer_keys, layer_values in zip(self.layers, keys, values, strict=True):
            x = layer_step(x, cos, sin, positions, mask, layer_keys, layer_values, layer.scale,
                           layer.attention_inputs, layer.output, attention)
        return self._final_norm(x)

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(x, self.final_norm.weight, self.final_norm.variance_epsilon)
