"""The Carbon arguments of a design request to an inference server, as this project's client writes them
and the server's plugin (`vllm_plugin`) reads them: one definition for both sides.

They travel in vLLM's `vllm_xargs` (flat strings and numbers): how each step is shaped (mode,
temperature, top-k, top-p; the rules of `sampling.step_logprobs`), where the k-mer ids lie, and, when
some generated base is fixed or masked, the bases each generated position allows, one hex digit a base
(bit i allows 'ATCG'[i]; 'f' allows all four). Light: torch and the sampling rules, nothing else of the
package, so it imports in the server's own environment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import errors
from ..inference.sampling import SamplingParams, StepMasks

PREFIX = "carbon_"


@dataclass(frozen=True)
class DesignArgs:
    """What the plugin needs of one request: the step rules, the k-mer ids, the allowed bases."""

    params: SamplingParams
    kmer_start: int
    k: int
    allowed: str | None = None  # one hex digit per generated base, None when every base is free

    @property
    def n_kmers(self) -> int:
        return 4 ** self.k

    def to_xargs(self) -> dict:
        args = {"mode": self.params.mode, "temperature": float(self.params.temperature),
                "top_k": int(self.params.top_k), "top_p": float(self.params.top_p),
                "kmer_start": self.kmer_start, "k": self.k}
        if self.allowed is not None:
            args["allowed"] = self.allowed
        return {PREFIX + key: value for key, value in args.items()}

    @classmethod
    def from_xargs(cls, extra: dict | None) -> DesignArgs | None:
        """The request's arguments, or None for a request that carries none (it is not a Carbon design).
        A malformed one raises ValueError naming the argument (the server answers HTTP 400)."""
        ours = {key[len(PREFIX):]: value for key, value in (extra or {}).items() if key.startswith(PREFIX)}
        if not ours:
            return None
        try:
            params = SamplingParams(mode=str(ours["mode"]), temperature=float(ours["temperature"]),
                                    top_k=int(ours["top_k"]), top_p=float(ours["top_p"]))
            kmer_start, k = int(ours["kmer_start"]), int(ours["k"])
        except KeyError as missing:
            raise ValueError(f"the Carbon design argument {PREFIX}{missing.args[0]} is missing") from None
        except (TypeError, ValueError, errors.CarbonError) as exc:
            raise ValueError(f"a Carbon design argument is malformed: {exc}") from None
        if not 1 <= k <= 8 or kmer_start < 0:
            raise ValueError(f"{PREFIX}k must be 1..8 and {PREFIX}kmer_start >= 0, not {k} and {kmer_start}")
        allowed = ours.get("allowed")
        if allowed is not None:
            allowed = str(allowed)
            if not allowed or len(allowed) % k or any(c not in "123456789abcdef" for c in allowed):
                raise ValueError(f"{PREFIX}allowed must be one hex digit 1-f per generated base, a whole number "
                                 f"of {k}-mers")
        return cls(params, kmer_start, k, allowed)

    def step_masks(self, device: torch.device) -> StepMasks | None:
        """The k-mer masks of each generated token, or None when every base is free."""
        if self.allowed is None:
            return None
        bits = np.frombuffer(self.allowed.encode(), dtype=np.uint8)
        digits = np.where(bits >= ord("a"), bits - ord("a") + 10, bits - ord("0"))
        allowed = (digits[:, None] >> np.arange(4)) & 1
        return StepMasks(torch.from_numpy(allowed.astype(bool)).reshape(-1, self.k, 4).to(device))


def encode_allowed(allowed: np.ndarray) -> str | None:
    """[n_tokens, k, 4] bool (A T C G) -> the hex string of `DesignArgs.allowed`, None when all are free."""
    flat = allowed.reshape(-1, 4)
    if flat.all():
        return None
    digits = (flat.astype(np.uint8) << np.arange(4, dtype=np.uint8)).sum(axis=1)
    return "".join("0123456789abcdef"[d] for d in digits)
