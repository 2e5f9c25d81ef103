"""Carbon's DNA layer inside a vLLM server: a logits processor that makes each generated token a k-mer
drawn as the in-process engine draws it.

Load it with `--logits-processors carbon_app.serving.vllm_plugin:CarbonDesign` (deploy/vllm/serve.sh
does, with this package on PYTHONPATH). A request opts in through `vllm_xargs` (`design_args`); for it,
each step's row becomes `sampling.step_logprobs` of the k-mer logits: the request's mask at that step,
temperature, top-k and top-p, and in 'bp' mode the factorised base-level distribution; every id that is
not a k-mer gets -inf. The client then asks vLLM to sample that row as it is (temperature 1, or 0 for
greedy search, no top-k or top-p of its own), with its seed. Other requests pass through untouched.

This is the V1 model runner's interface (vLLM's CPU build runs no other; serve.sh selects it on a GPU
with VLLM_USE_V2_MODEL_RUNNER=0). It imports torch, numpy and vLLM only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from ..inference.sampling import StepMasks, step_logprobs
from .design_args import DesignArgs


@dataclass
class _Design:
    args: DesignArgs
    masks: StepMasks | None
    output: list[int]  # vLLM's running list of the request's generated ids: its length is the step


class CarbonDesign(LogitsProcessor):
    @classmethod
    def validate_params(cls, sampling_params) -> None:
        DesignArgs.from_xargs(sampling_params.extra_args)  # ValueError: the server answers 400, naming it

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.device = device
        self.designs: dict[int, _Design] = {}  # batch index -> the design request there

    def is_argmax_invariant(self) -> bool:
        return False  # masks and base-level sampling change which k-mer is most likely

    def _design(self, params, prompt_ids, output: list[int]) -> _Design | None:
        args = DesignArgs.from_xargs(params.extra_args)
        return None if args is None else _Design(args, args.step_masks(self.device), output)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.designs, batch_update, self._design)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, design in self.designs.items():
            start, n = design.args.kmer_start, design.args.n_kmers
            mask = design.masks[len(design.output)] if design.masks is not None else None
            row = step_logprobs(logits[index : index + 1, start : start + n], design.args.params, mask)
            logits[index].fill_(float("-inf"))
            logits[index, start : start + n] = row[0].to(logits.dtype)
        return logits
