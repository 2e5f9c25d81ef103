"""A checkpoint read into a decoder: Carbon Studio's own (`decoder.Decoder`) where it computes the
checkpoint, else `transformers`' forward, with a warning that names why (`TransformersDecoder`); and the
`transformers` model itself, the reference the tests compare against and the benchmarks' stock contender.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from ..errors import ModelError
from .decoder import Decoder, DecoderConfig, NotCovered
from .kv import branch

log = logging.getLogger("carbon_app")


#: Positions of copied prefixes the fallback's `continuations` holds at once (a GPU batch's worth).
_BRANCH_KV_TOKENS = 16_384


class TransformersDecoder:
    """A checkpoint this module does not compute, run on `transformers`' own forward: the fallback, slower
    (no fused projections, CUDA graphs or compiled step), named wherever the model is described."""

    static = False

    def __init__(self, model: torch.nn.Module, reason: str = ""):
        self.model, self.reason, self.config = model, reason, model.config
        why = f" (Carbon Studio's decoder does not compute {reason})" if reason else ""
        self.name = f"transformers' forward{why}"
        self.output = model.get_output_embeddings().weight.detach()
        self.architecture = (model.config.architectures or [type(model).__name__])[0]

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def n_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, cache=None) -> torch.Tensor:
        out = self.model.model(input_ids=input_ids, past_key_values=cache, use_cache=cache is not None)
        return out.last_hidden_state

    @torch.inference_mode()
    def continuations(self, cache, keep: int, rows: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        """`Decoder.continuations`, each branch from a copy of its row's prefix (`kv.branch`): transformers'
        forward takes no mask beside a cache."""
        n, branches, new = input_ids.shape
        sources, flat = rows.repeat_interleave(branches), input_ids.reshape(n * branches, new)
        step = max(1, _BRANCH_KV_TOKENS // (keep + new))  # copies of the prefix held at once
        hidden = [self(flat[lo : lo + step], branch(self.config, cache, keep, new, sources[lo : lo + step]))
                  for lo in range(0, len(flat), step)]
        return torch.cat(hidden).reshape(n, branches, new, -1)


def read_config(path: Path) -> dict:
    """A checkpoint's `config.json`, as written."""
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"the config in '{path}' cannot be read: {str(exc).splitlines()[0][:200]}") from None


def read_weights(path: Path, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint's safetensors files, by name, read straight onto `device` in `dtype`
    (a GPU's weights never pass through host memory whole)."""
    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelError(f"'{path}' holds no .safetensors weights")
    tensors = {}
    try:
        for file in files:
            with safe_open(str(file), framework="pt", device=str(device)) as handle:
                for name in handle.keys():
                    tensors[name] = handle.get_tensor(name).to(dtype)
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise ModelError(f"the weights in '{path}' cannot be read: {str(exc)[:200]}") from None
    return tensors


def load_decoder(path: Path, device: torch.device, dtype: torch.dtype,
                 trust_remote_code: bool = False) -> Decoder | TransformersDecoder:
    """The checkpoint in `path` as `Decoder`, or, where this module does not compute it, on `transformers`'
    forward (a warning names why; so does every description of the model)."""
    try:
        config = DecoderConfig.from_dict(read_config(path))
        return Decoder.from_tensors(config, read_weights(path, device, dtype))
    except NotCovered as exc:
        reason = str(exc)
    log.warning("%s runs on transformers' forward, not Carbon Studio's decoder, which does not compute %s: "
                "slower, without fused projections, CUDA graphs or a compiled step", path.name, reason)
    return TransformersDecoder(transformers_model(path, device, dtype, trust_remote_code), reason)


def transformers_model(path: Path, device: torch.device, dtype: torch.dtype,
                       trust_remote_code: bool = False) -> torch.nn.Module:
    """The checkpoint as `transformers` loads it (stock classes; remote code only when asked): the
    reference the tests compare against, the benchmarks' stock contender, and the fallback."""
    from transformers import AutoModelForCausalLM

    try:
        # on a GPU the weights go straight from the file to the device (accelerate's device_map)
        placement = {"device_map": device} if device.type == "cuda" else {}
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True,
                                                     trust_remote_code=trust_remote_code, **placement)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(f"the weights in '{path}' cannot be loaded: {str(exc).splitlines()[0][:200]}") from None
    return model.to(device).eval()


def decoder_of(model: torch.nn.Module) -> Decoder | TransformersDecoder:
    """The decoder of a `transformers` model already built (a synthetic one, a benchmark's): `Decoder` over
    the model's own weights where this module computes it, the model's q/k/v and gate/up modules re-pointed
    at row slices of the fused tensors (no memory added, and the model keeps working: the reference and
    stock contender beside it); else the model's own forward."""
    try:
        raw = model.config.to_dict()
        raw["architectures"] = raw.get("architectures") or [type(model).__name__]  # as saving it writes
        config = DecoderConfig.from_dict(raw)
        tensors = {name: t.detach() for name, t in model.state_dict().items()}
        if config.tie_word_embeddings:
            tensors.pop("lm_head.weight", None)
        decoder = Decoder.from_tensors(config, tensors)
    except NotCovered as exc:
        return TransformersDecoder(model, str(exc))
    for base, layer in zip(model.model.layers, decoder.layers, strict=True):
        attn, mlp = base.self_attn, base.mlp
        _share(layer.qkv, layer.qkv_bias, [attn.q_proj, attn.k_proj, attn.v_proj])
        _share(layer.gate_up, layer.gate_up_bias, [mlp.gate_proj, mlp.up_proj])
    return decoder


def _share(weight: torch.Tensor, bias: torch.Tensor | None, linears: list[torch.nn.Linear]) -> None:
    """Point each of `linears` at its rows of the fused `weight` (and `bias`)."""
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight = torch.nn.Parameter(weight[start : start + rows], requires_grad=False)
        if bias is not None:
            m.bias = torch.nn.Parameter(bias[start : start + rows], requires_grad=False)
        start += rows
