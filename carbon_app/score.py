"""Per-base scoring of sequences and reference-vs-alternate variant scoring.

The reference score (spec section 5): right-pad to whole k-mers, prefix
`<dna>`, one forward pass; the logits at token t give the marginals of the k
bases of token t+1. A base's log-probability is its marginal (an N: the best
of the four); padding positions are never scored. The optional `chain` method
splits each token's exact log-likelihood into per-base conditional terms.

Variant scores follow the Carbon evaluations (section 7): a window centred on
the variant, LL = sum of per-base log-probabilities over the window,
delta = LL(alt) - LL(ref), negative when the alternative is less likely.
Coordinates are 1-based and inclusive throughout, as in VCF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from .dna import BASES, clean_sequence, mask_from_template, reverse_complement
from .errors import InputError
from .marginals import base_logprobs_from_marginals, chain_logprobs, log_marginals
from .models import ModelBundle
from .tokens import DNA_OPEN

METHODS = ("marginal", "chain")
DEFAULT_WINDOW = 8000
_HEAD_CHUNK = 2048  # tokens per block of the output projection, to bound memory on long inputs


@dataclass
class SequenceScore:
    sequence: str
    logprobs: np.ndarray  # [L] log-probability of each base (natural log)
    probs: np.ndarray  # [L, 4] per-base marginals in A, T, C, G order
    method: str
    prompt_text: str
    prompt_ids: list[int]

    @property
    def total(self) -> float:
        return float(self.logprobs.sum())

    @property
    def mean(self) -> float:
        return float(self.logprobs.mean())


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise InputError(f"scoring method must be 'marginal' (reference FNS) or 'chain', not '{method}'")


def context_room_bases(bundle: ModelBundle, prefix_text: str) -> int:
    """How many bases one forward pass can score after the tag prefix and `<dna>`."""
    prefix_tokens = len(bundle.tokenizer.encode(prefix_text + DNA_OPEN))
    return (bundle.max_tokens - prefix_tokens + 1) * bundle.k  # the last token is read, never fed


@torch.inference_mode()
def score_sequence(
    bundle: ModelBundle,
    sequence: str,
    species: str | None = None,
    region: str | None = None,
    method: str = "marginal",
) -> SequenceScore:
    """Per-base log-probabilities of `sequence` under the model."""
    _check_method(method)
    seq = clean_sequence(sequence)
    prefix = bundle.tags.prefix(species, region)
    room = context_room_bases(bundle, prefix)
    if len(seq) > room:
        raise InputError(
            f"the sequence is {len(seq):,} bases; this model scores at most {room:,} bases at once "
            f"(context {bundle.max_tokens:,} tokens): score a shorter window"
        )
    k = bundle.k
    padded = seq + "A" * (-len(seq) % k)
    prompt_text = prefix + DNA_OPEN + padded
    ids = bundle.tokenizer.encode(prompt_text)
    n_tokens = len(padded) // k
    first = len(ids) - n_tokens - 1  # index of <dna>: its logits predict the first k-mer
    bundle.check_memory(len(ids), len(ids), _HEAD_CHUNK, f"scoring {len(seq):,} bases")
    hidden = bundle.hidden_states(torch.tensor([ids[:-1]], device=bundle.device))[0, first:]
    allowed = torch.ones(n_tokens * k, 4, dtype=torch.bool)
    allowed[: len(seq)] = torch.from_numpy(mask_from_template(seq))
    allowed = allowed.reshape(n_tokens, k, 4).to(bundle.device)
    per_base, probs = [], []
    for lo in range(0, n_tokens, _HEAD_CHUNK):
        kmer_logprobs = torch.log_softmax(bundle.kmer_logits(hidden[lo : lo + _HEAD_CHUNK]), dim=-1)
        marginals = log_marginals(kmer_logprobs)
        block_allowed = allowed[lo : lo + _HEAD_CHUNK]
        if method == "marginal":
            per_base.append(base_logprobs_from_marginals(marginals, block_allowed))
        else:
            per_base.append(chain_logprobs(kmer_logprobs, block_allowed))
        probs.append(marginals.exp())
    logprobs = torch.cat(per_base).flatten()[: len(seq)]
    return SequenceScore(
        sequence=seq,
        logprobs=logprobs.double().cpu().numpy(),
        probs=torch.cat(probs).reshape(-1, 4)[: len(seq)].double().cpu().numpy(),
        method=method,
        prompt_text=prompt_text,
        prompt_ids=ids,
    )


# -- variants -------------------------------------------------------------------------

_VARIANT = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z]+)\s*>\s*([A-Za-z]+)\s*$")
_VARIANT_FORM = "POS:REF>ALT, e.g. 120:A>G, 57:AT>A or 88:C>CTT"


@dataclass(frozen=True)
class Variant:
    """A change at 1-based position `pos`: the bases `ref` there become `alt`."""

    pos: int
    ref: str
    alt: str

    @classmethod
    def parse(cls, text: str) -> Variant:
        if text is None or not str(text).strip():
            raise InputError(f"the variant is empty; write it as {_VARIANT_FORM}")
        match = _VARIANT.match(str(text))
        if not match:
            shown = " ".join(str(text).split())[:60]  # one line, whatever was pasted
            if len(re.findall(r">", shown)) > 1 and re.search(r"[,;\s]", shown.strip()):
                raise InputError(f"'{shown}' holds several variants; score one at a time, as {_VARIANT_FORM}")
            raise InputError(f"the variant '{shown}' is not of the form {_VARIANT_FORM}")
        pos, ref, alt = int(match.group(1)), match.group(2).upper(), match.group(3).upper()
        if pos < 1:
            raise InputError(f"variant positions start at 1, not {pos}")
        for allele, name in ((ref, "reference"), (alt, "alternate")):
            bad = next((b for b in allele if b not in "ACGT"), None)
            if bad:
                what = f"is '{bad}'" if allele == bad else f"'{allele}' has '{bad}'"
                raise InputError(f"the {name} allele {what}; alleles are A, C, G and T only")
        if ref == alt:
            raise InputError(f"the variant {pos}:{ref}>{alt} changes nothing (REF equals ALT)")
        return cls(pos, ref, alt)

    def __str__(self) -> str:
        return f"{self.pos}:{self.ref}>{self.alt}"

    def alignment(self) -> list[tuple[int | None, int | None]]:
        """Column pairs (offset in REF, offset in ALT) aligning the two alleles.

        Shared leading and trailing bases pair up; of the rest, as many as
        possible pair as substitutions and the remainder are gaps (None).
        """
        lr, la = len(self.ref), len(self.alt)
        head = 0
        while head < min(lr, la) and self.ref[head] == self.alt[head]:
            head += 1
        tail = 0
        while tail < min(lr, la) - head and self.ref[lr - 1 - tail] == self.alt[la - 1 - tail]:
            tail += 1
        core_ref, core_alt = lr - head - tail, la - head - tail
        pairs = [(i, i) for i in range(head)]
        pairs += [(head + i, head + i) for i in range(min(core_ref, core_alt))]
        pairs += [(head + i, None) for i in range(core_alt, core_ref)]
        pairs += [(None, head + i) for i in range(core_ref, core_alt)]
        pairs += [(lr - tail + i, la - tail + i) for i in range(tail)]
        return pairs


@dataclass
class VariantScore:
    variant: str
    delta: float  # LL(alt) - LL(ref), natural log
    ll_ref: float
    ll_alt: float
    window_start: int  # 1-based, inclusive, in the input sequence
    window_end: int
    ref_window: str
    alt_window: str
    ref_logprobs: list[float]  # per base of ref_window
    alt_logprobs: list[float]  # per base of alt_window
    aligned_ref_pos: list[int | None]  # 1-based sequence position of each aligned column (None: inserted)
    aligned_ref_logprobs: list[float | None]
    aligned_alt_logprobs: list[float | None]
    site_probs_ref: dict[str, float]  # A/C/G/T probabilities at the variant's first base, ref context
    site_probs_alt: dict[str, float]
    method: str
    strand_average: bool
    species_tag: str = ""
    region_tag: str = ""
    prompt_text_ref: str = ""
    prompt_ids_ref: list[int] = field(default_factory=list)
    prompt_text_alt: str = ""
    prompt_ids_alt: list[int] = field(default_factory=list)

    @property
    def aligned_delta(self) -> list[float | None]:
        return [None if r is None or a is None else a - r
                for r, a in zip(self.aligned_ref_logprobs, self.aligned_alt_logprobs, strict=True)]

    def to_dict(self) -> dict:
        from dataclasses import asdict

        data = asdict(self)
        data["aligned_delta"] = self.aligned_delta
        return data


def variant_window(length: int, pos0: int, ref_len: int, window: int) -> tuple[int, int]:
    """0-based half-open [start, end) of a window of about `window` bases centred on the REF allele.

    Both flanks get the same number of bases (the window shrinks by one base
    when it cannot), and the window slides inward at the sequence ends. This
    makes the window of the reverse-complemented sequence the exact mirror,
    so strand-averaged scores do not depend on which strand was given.
    """
    if window >= length:
        return 0, length
    flank = max((window - ref_len) // 2, 0)
    size = ref_len + 2 * flank
    start = min(max(pos0 - flank, 0), length - size)
    return start, start + size


def _strand_scores(bundle, ref_window, alt_window, species, region, method, strand_average):
    """Per-base log-probs of both windows, averaged with the reverse strand if asked."""
    forward = [score_sequence(bundle, w, species, region, method) for w in (ref_window, alt_window)]
    tracks = [s.logprobs for s in forward]
    if strand_average:
        reverse = [score_sequence(bundle, reverse_complement(w), species, region, method)
                   for w in (ref_window, alt_window)]
        tracks = [(f + r.logprobs[::-1]) / 2 for f, r in zip(tracks, reverse, strict=True)]
    return forward, tracks


def score_variant(
    bundle: ModelBundle,
    sequence: str,
    variant: str | Variant,
    window: int = DEFAULT_WINDOW,
    strand_average: bool = False,
    species: str | None = None,
    region: str | None = None,
    method: str = "marginal",
) -> VariantScore:
    """Score `variant` in `sequence`: delta = LL(alt window) - LL(ref window)."""
    _check_method(method)
    seq = clean_sequence(sequence, what="reference sequence")
    var = variant if isinstance(variant, Variant) else Variant.parse(variant)
    pos0, lr, la = var.pos - 1, len(var.ref), len(var.alt)
    if pos0 + lr > len(seq):
        where = f"position {var.pos}" if lr == 1 else f"positions {var.pos}-{var.pos + lr - 1}"
        raise InputError(f"variant {var} needs {where}, beyond the {len(seq):,}-base sequence")
    present = seq[pos0 : pos0 + lr]
    if present != var.ref:
        where = f"position {var.pos}" if lr == 1 else f"positions {var.pos}-{var.pos + lr - 1}"
        raise InputError(
            f"the reference has '{present}' at {where}, not '{var.ref}' as variant {var} says"
        )
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise InputError(f"the window must be a positive number of bases, not {window!r}")
    prefix = bundle.tags.prefix(species, region)
    room = context_room_bases(bundle, prefix) - max(la - lr, 0)
    window = min(int(window), room)
    if window < lr:
        raise InputError(f"the {lr}-base reference allele does not fit the model's context")
    start, end = variant_window(len(seq), pos0, lr, window)
    ref_window = seq[start:end]
    offset = pos0 - start
    alt_window = ref_window[:offset] + var.alt + ref_window[offset + lr :]

    forward, (ref_track, alt_track) = _strand_scores(
        bundle, ref_window, alt_window, species, region, method, strand_average
    )
    columns = [(i, i) for i in range(offset)]
    columns += [(None if r is None else offset + r, None if a is None else offset + a) for r, a in var.alignment()]
    columns += [(offset + lr + i, offset + la + i) for i in range(len(ref_window) - offset - lr)]

    def site(score) -> dict[str, float]:
        return {base: float(score.probs[offset, BASES.index(base)]) for base in "ACGT"}

    ll_ref, ll_alt = float(ref_track.sum()), float(alt_track.sum())
    return VariantScore(
        variant=str(var),
        delta=ll_alt - ll_ref,
        ll_ref=ll_ref,
        ll_alt=ll_alt,
        window_start=start + 1,
        window_end=end,
        ref_window=ref_window,
        alt_window=alt_window,
        ref_logprobs=ref_track.tolist(),
        alt_logprobs=alt_track.tolist(),
        aligned_ref_pos=[None if r is None else start + r + 1 for r, _ in columns],
        aligned_ref_logprobs=[None if r is None else float(ref_track[r]) for r, _ in columns],
        aligned_alt_logprobs=[None if a is None else float(alt_track[a]) for _, a in columns],
        site_probs_ref=site(forward[0]),
        site_probs_alt=site(forward[1]),
        method=method,
        strand_average=strand_average,
        species_tag=bundle.tags.species_tag(species),
        region_tag=bundle.tags.region_tag(region),
        prompt_text_ref=forward[0].prompt_text,
        prompt_ids_ref=forward[0].prompt_ids,
        prompt_text_alt=forward[1].prompt_text,
        prompt_ids_alt=forward[1].prompt_ids,
    )
