"""Train a demo Carbon model: the Carbon recipe in miniature, one readable loop.

    python -m carbon_app.training.train --preset target
    python -m carbon_app.training.train --preset draft      # distilled from the trained target

A Llama decoder over the demo tokenizer, trained on the windows of
`carbon_app.training.data` with cross-entropy over the 4,096 6-mers, then, for
the last part of training, cross-entropy plus Factorised Nucleotide
Supervision (the per-base cross-entropy of the six marginals, spec section 5).
The draft model adds distillation from the target (KL divergence of the
6-mer distributions), which raises how often the two agree. With
`--frame-weight`, a linear reading-frame probe on the decoder's last hidden
state learns each coming 6-mer's codon place (or "not coding") from the
frame labels of annotated transcripts (`data.py`), a share of the loss: it
asks the decoder to carry the reading frame, which is what lets the 6-mer
head avoid in-frame stop codons. With `--stop-weight`, the 6-mer head is
also told so directly where the labels know the frame: an unlikelihood term,
-log(1 - p), on the probability p it gives 6-mers that would put a stop
codon in the labelled frame (of the gene read forwards or backwards), at
every coding token whose true 6-mer holds none. With `--stop-contrast-weight`,
each coding 6-mer's cross-entropy is taken among itself and those of its
single-base substitutions that would put a stop codon in the labelled frame,
the comparison a stop-gain variant's score makes. With
`--splice-contrast-weight`, each splice 6-mer's cross-entropy is taken among
its rivals only, the 6-mers that differ from it at its splice bases (16 for a
whole GT or AG): the dinucleotide given the 6-mer's other bases, which is what
a splice-site variant's score compares. With `--coding-distill-weight` (beside
a `--teacher`), the KL divergence from the teacher is taken again at the coding
tokens alone; with `--anchor-weight`, at every token: the whole distribution
held near it as strongly as the added terms pull. With `--protect held`, each
step's gradient goes through gradient surgery (PCGrad): where the rest of the
loss pulls against the data's own loss and the teacher's KL terms, the rest
loses its component along their gradient, so the added terms teach only what
costs them nothing to first order. The terms read the annotation of the
training genes only; the reading-frame probe is training scaffolding,
not part of the saved model, which stays a plain Llama decoder. Seeded,
resumable (`--resume`), progress printed; the result is a standard Hugging
Face model directory with `dna_config.json` and the tokenizer files, which
the model manager loads exactly like a Carbon checkpoint.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from Bio.Data.CodonTable import standard_dna_table

from ..core.dna import BASES, reverse_complement
from ..core.tokens import DnaConfig
from ..core.validate import argument_type, real_number, whole_number
from ..inference.marginals import k_of, kmer_digits, kmer_index, log_marginals
from .data import (
    ANTISENSE,
    FRAME_LABEL_RULE,
    FRAME_LABELS,
    GROUPS,
    NOT_CODING,
    SPLICE_MARKS,
    named_shares,
    trained_tag_scheme,
)

SHAPE = ("batch", "hidden", "layers", "heads", "kv_heads", "ffn")  # what a larger (GPU) run overrides
# the loss's terms and the rows' draw, as the command line names them and a run's command is written with them
OBJECTIVE = ("frame_weight", "stop_weight", "stop_contrast_weight", "splice_contrast_weight", "group_weights",
             "distill_weight", "coding_distill_weight", "anchor_weight", "mix_data", "mix_share", "protect",
             "splice_side_weights")
PRESETS = {
    "target": dict(preset="target", name="carbon-demo", hidden=256, layers=8, heads=8, kv_heads=4, ffn=704,
                   steps=2800),
    "draft": dict(preset="draft", name="carbon-demo-draft", hidden=128, layers=2, heads=4, kv_heads=2, ffn=352,
                  steps=600, teacher="runs/carbon-demo/model", distill_weight=0.5),
}


@dataclass
class TrainConfig:
    preset: str = "target"
    name: str = "carbon-demo"
    data: str = "data/demo"
    out_root: str = "runs"
    hidden: int = 256
    layers: int = 6
    heads: int = 8
    kv_heads: int = 4
    ffn: int = 704
    context_tokens: int = 256
    steps: int = 2800
    batch: int = 32
    lr: float = 2e-3
    min_lr: float = 1e-4
    warmup: int = 150
    weight_decay: float = 0.1
    fns_from: float = 0.7  # fraction of steps after which FNS joins the loss
    # a draft's teacher, which it is distilled from; or, for a target, the model it is kept near while it learns
    # something new (the KL divergence from it, at `distill_weight`, holds the rest of its predictions in place)
    teacher: str | None = None
    distill_weight: float = 0.0
    # the KL divergence from the teacher again at the coding tokens alone, added with this weight: what a
    # stop-gain's score reads held in place while the rest (the introns' splice sites) may move
    coding_distill_weight: float = 0.0
    # the KL divergence from the teacher at every token, added with this weight: the whole distribution held near
    # the teacher at the strength of the added terms, where `distill_weight`, a share, can only trade it for the data
    anchor_weight: float = 0.0
    seed: int = 0
    eval_every: int = 200
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    bf16_autocast: bool | None = None  # matrix products in bf16, losses fp32; None: where the hardware has bf16
    init: str | None = None  # a model directory to start from (continued training) instead of random weights
    compile: bool = True  # torch.compile the decoder: fused element-wise kernels, ~1.6x faster steps on a CPU
    minutes: float | None = None  # a wall-clock budget: once the speed is measured, fewer steps if need be
    frame_weight: float = 0.0  # share of the loss given to the reading-frame probe (0: no probe)
    stop_weight: float = 0.0  # weight of the in-frame stop unlikelihood term added to the loss (0: none)
    stop_contrast_weight: float = 0.0  # weight of coding 6-mers' cross-entropy against their stop-making SNVs
    splice_contrast_weight: float = 0.0  # weight of the splice 6-mers' cross-entropy among their rivals (0: none)
    # "donor"/"acceptor" -> the share of the splice contrast each side's 6-mers take (a side left out: 1)
    splice_side_weights: dict[str, float] | None = None
    group_weights: dict[str, float] | None = None  # group -> how much more often its rows are drawn (others 1)
    # a second training-data folder (rows a target wrote, draft_data) whose rows make `mix_share` of the draw
    mix_data: str | None = None
    mix_share: float = 0.0
    # gradient surgery: the rest of the loss's gradient is bent wherever it pulls against the gradient of what is
    # kept ("held": HELD_TERMS), so that what the added terms teach is not paid for there (to first order);
    # None: no surgery
    protect: str | None = None

    @property
    def out(self) -> Path:
        return Path(self.out_root) / self.name


def native_bf16(device: str) -> bool:
    """Whether bf16 matrix products run faster than float32: a GPU's tensor cores, or a CPU with AMX tiles.
    AVX512-BF16 alone does not suffice: on such a Xeon a 2048-square bf16 matmul measured 1.6x slower than
    float32 (0.10 s vs 0.062 s), and on an AVX2-only CPU bf16 is emulated, 60x slower."""
    if torch.device(device).type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.cpu._is_amx_tile_supported()  # torch's own (private) CPU feature check


TIMED_STEPS = range(10, 30)  # the steps timed for a budget: after compilation and the first allocations


def steps_within(cfg: TrainConfig, step: int, elapsed_s: float, per_step_s: float) -> int:
    """The step count that ends training (its schedule included) inside `cfg.minutes`, never more than
    planned: what is left of the budget, less a 5% margin for validation and saving, at the measured speed."""
    left = 0.95 * cfg.minutes * 60 - elapsed_s
    return max(step + 1, min(cfg.steps, step + int(left / per_step_s)))


def shape_of(config) -> dict:
    """A model config's shape, in TrainConfig's names."""
    return dict(hidden=config.hidden_size, layers=config.num_hidden_layers, heads=config.num_attention_heads,
                kv_heads=config.num_key_value_heads, ffn=config.intermediate_size)


def learning_rate(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def build_model(cfg: TrainConfig, vocab_size: int, eos_id: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.ffn, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.context_tokens,
        rope_theta=10_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(cfg.seed)
    return LlamaForCausalLM(config)


# the terms added to the loss, each at its own weight: the term (a Losses field) -> its TrainConfig weight
ADDED_TERMS = {"stop": "stop_weight", "stop_contrast": "stop_contrast_weight",
               "splice_contrast": "splice_contrast_weight", "coding_kl": "coding_distill_weight", "kl": "anchor_weight"}
FRAME_CLASSES = len(FRAME_LABELS)  # codon place 0-2 of the coming 6-mer's first base, not coding, antisense 0-2
STOP_CODONS = frozenset(standard_dna_table.stop_codons)  # as the held-out variant sets read them


def holds_stop(kmer: str, place: int) -> bool:
    """Whether `kmer`, its first base at codon place `place`, holds a whole stop codon in that frame."""
    return any(kmer[at : at + 3] in STOP_CODONS for at in range((3 - place) % 3, len(kmer) - 2, 3))


BASE_PAIRS = len(BASES) ** 2  # the last two bases of a k-mer id (bases in id order, last fastest): id % BASE_PAIRS
UNKNOWN_BEFORE = BASE_PAIRS  # a `stop_table` row: the bases before the token are not the same gene's coding sequence


def is_coding(labels: torch.Tensor) -> torch.Tensor:
    """The tokens a frame label places in a gene's coding sequence, on either strand (the others are
    NOT_CODING or FRAME_UNKNOWN)."""
    return (labels >= 0) & (labels != NOT_CODING)


def stop_table(k: int) -> torch.Tensor:
    """[FRAME_CLASSES, BASE_PAIRS + 1, 4^k] bool: the k-mers (in id order) that make a stop codon in each
    label's frame, after each pair of bases before them (row 4 x first + second, bases in id order) or, in the last row,
    inside the k-mer alone. A codon the 6-mers split (a third of the codons where a token starts at codon
    place 1 or 2) is completed by the second token's first bases, so a stop there is that token's doing.
    An antisense k-mer is read backwards: its reverse complement is the gene's own sequence, whose first
    base sits k - 1 bases before the labelled one."""
    kmers = ["".join(bases) for bases in itertools.product(BASES, repeat=k)]
    befores = ["".join(pair) for pair in itertools.product(BASES, repeat=2)] + [""]
    table = torch.zeros(FRAME_CLASSES, len(befores), len(kmers), dtype=torch.bool)
    for place in range(3):
        for row, before in enumerate(befores):
            first = (place - len(before)) % 3  # the codon place of the bases' first
            table[place, row] = torch.tensor([holds_stop(before + kmer, first) for kmer in kmers])
            table[ANTISENSE + place, row] = torch.tensor([holds_stop(reverse_complement(before + kmer),
                                                                     (place - k + 1) % 3) for kmer in kmers])
    return table


def bases_before(previous: torch.Tensor, previous_labels: torch.Tensor, labels: torch.Tensor,
                 n_kmers: int) -> torch.Tensor:
    """Each token's `stop_table` row: the last two bases of the token before it where that token is a k-mer
    of the same gene's coding sequence in the same frame (consecutive coding 6-mers share a label), else
    UNKNOWN_BEFORE (a tag, the first token, an intron or another strand before it)."""
    same_gene = is_coding(labels) & (previous >= 0) & (previous < n_kmers) & (previous_labels == labels)
    return torch.where(same_gene, previous.clamp(min=0) % BASE_PAIRS, UNKNOWN_BEFORE)


def stop_free_coding(kmer: torch.Tensor, labels: torch.Tensor, before: torch.Tensor,
                     stops: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The coding tokens whose true 6-mer makes no stop codon in its labelled frame (the annotated stop
    codon itself is left alone), and every token's row of `stops` (its frame, the bases before it): where
    the stop terms apply."""
    row = (labels.clamp(min=0).long(), before)
    return is_coding(labels) & ~stops[(*row, kmer)], row


def stop_loss(logprobs: torch.Tensor, kmer: torch.Tensor, labels: torch.Tensor, before: torch.Tensor,
              stops: torch.Tensor) -> torch.Tensor:
    """Mean -log(1 - p(a 6-mer making an in-frame stop)) over the coding tokens whose true 6-mer makes none."""
    coding, (frame, before) = stop_free_coding(kmer, labels, before, stops)
    if not coding.any():
        return torch.zeros((), device=logprobs.device)
    forbidden = stops[frame[coding], before[coding]]  # [n, 4^k]
    p_stop = logprobs[coding].masked_fill(~forbidden, -math.inf).logsumexp(-1)
    return -torch.log(-torch.expm1(p_stop.clamp(max=-1e-6))).mean()


@cache
def single_substitutions(k: int) -> torch.Tensor:
    """[4^k, 3k]: the ids of each k-mer's single-base substitutions, the k-mers an SNV inside it makes."""
    digits = kmer_digits(torch.arange(4**k), k)
    made = []
    for place in range(k):
        for shift in (1, 2, 3):
            changed = digits.clone()
            changed[:, place] = (changed[:, place] + shift) % 4
            made.append(kmer_index(changed))
    return torch.stack(made, -1)


def stop_contrast_loss(logprobs: torch.Tensor, kmer: torch.Tensor, labels: torch.Tensor, before: torch.Tensor,
                       stops: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of each coding token's true 6-mer among itself and its single-base substitutions
    that make a stop codon in the labelled frame: the comparison a stop-gain variant's score makes. Over
    the coding tokens whose true 6-mer makes no stop and is one SNV from one; the gradient lowers those
    rivals against the true 6-mer, however small their share of the 4,096 already is."""
    coding, (frame, before) = stop_free_coding(kmer, labels, before, stops)
    rivals = single_substitutions(k_of(logprobs.shape[-1])).to(kmer.device)[kmer]  # [n, 3k]
    stop_rivals = stops[frame.unsqueeze(-1), before.unsqueeze(-1), rivals]
    coding &= stop_rivals.any(-1)
    if not coding.any():
        return torch.zeros((), device=logprobs.device)
    true = logprobs[coding].gather(-1, kmer[coding].unsqueeze(-1))
    rival = logprobs[coding].gather(-1, rivals[coding]).masked_fill(~stop_rivals[coding], -math.inf)
    return (torch.cat([true, rival], -1).logsumexp(-1) - true.squeeze(-1)).mean()


def mixed_precision(cfg: TrainConfig):
    """The context a forward pass runs in: matrix products in bf16 where `cfg.bf16_autocast` says so."""
    return torch.autocast(torch.device(cfg.device).type, dtype=torch.bfloat16, enabled=cfg.bf16_autocast)


#: Batches a new reading-frame probe is fitted on before a continued run trains the model through it.
PROBE_FIT_STEPS = 50


def fit_probe(model, probe, rows: torch.Tensor, n_rows: int, cfg: TrainConfig, probe_loss) -> list[float]:
    """Fit a new probe to a trained model's hidden states, the model held still; returns the probe's loss
    (`probe_loss(probe, hidden, batch_index)`) on each batch that holds a label for it. A probe starting at
    random sends its first, large errors back into the model: continuing the installed target 100 steps
    with its own recipe cost 0.027 validation bits/base so, 0.014 with the reading-frame probe fitted first
    and 0.007 without a probe."""
    generator = torch.Generator().manual_seed(cfg.seed)
    optimizer = torch.optim.Adam(probe.parameters(), lr=3e-3)
    model.eval()
    losses = []
    for _ in range(PROBE_FIT_STEPS):
        index = torch.randint(0, n_rows, (cfg.batch,), generator=generator)
        with torch.no_grad(), mixed_precision(cfg):
            hidden = model.model(input_ids=rows[index, :-1].to(cfg.device)).last_hidden_state
        loss = probe_loss(probe, hidden.float(), index)
        if not loss.requires_grad:  # nothing labelled in these windows: nothing to fit to
            continue
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def frame_loss(probe, hidden: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the probe's reading frame for the coming token, where its label is known."""
    known = frames[:, 1:] >= 0
    if not known.any():
        return torch.zeros((), device=hidden.device)
    return F.cross_entropy(probe(hidden[known]).float(), frames[:, 1:][known].long())


def true_base_logprobs(logprobs: torch.Tensor, kmer: torch.Tensor, k: int) -> torch.Tensor:
    """[tokens, 4^k] 6-mer log-probs and the true 6-mers -> [tokens, k] the log-marginal of each true base."""
    return log_marginals(logprobs, tails="clamp").gather(-1, kmer_digits(kmer, k).unsqueeze(-1)).squeeze(-1)


def marked_bases(marks: torch.Tensor, k: int) -> torch.Tensor:
    """Splice marks [n] (bit j for a 6-mer's j-th base) -> [n, k] bool: which bases are splice bases."""
    return (marks.unsqueeze(-1) >> torch.arange(k, device=marks.device)) & 1 == 1


def splice_contrast_loss(logprobs: torch.Tensor, kmer: torch.Tensor, varied: torch.Tensor,
                         weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy of each true 6-mer among its rivals: the 6-mers that differ from it at its marked
    splice bases only (`varied`, [n, k] from `marked_bases`). It is the splice dinucleotide given the 6-mer's
    other bases, the very comparison a splice-site variant's score makes; its gradient reaches the rivals'
    logits only (through the shared decoder the rest still move, as every term's do). With `weights` [n],
    each 6-mer's cross-entropy counts at its weight (still divided by n: a weight of 1 pulls as before)."""
    k = varied.shape[-1]
    digits = kmer_digits(kmer, k)  # [n, k]
    every = kmer_digits(torch.arange(4**k, device=kmer.device), k)  # [4^k, k]
    rivals = ((every.unsqueeze(0) == digits.unsqueeze(1)) | varied.unsqueeze(1)).all(-1)  # [n, 4^k], true too
    true = logprobs.gather(-1, kmer.unsqueeze(-1)).squeeze(-1)
    among = true - logprobs.masked_fill(~rivals, -math.inf).logsumexp(-1)
    return -(among.mean() if weights is None else (weights * among).sum() / len(among))


# an intron's end dinucleotides as a window reads them: GT...AG on the transcript's strand, CT...AC read backward
SPLICE_SIDES = {"donor": ("GT", "AC"), "acceptor": ("AG", "CT")}
# the same as codes of a pair of base digits (first * 4 + second), as splice_side_tokens compares them
SPLICE_SIDE_CODES = {side: tuple(BASES.index(a) * len(BASES) + BASES.index(b) for a, b in pairs)
                     for side, pairs in SPLICE_SIDES.items()}


def splice_side_tokens(targets: torch.Tensor, marks: torch.Tensor, kmer_start: int, n_kmers: int
                       ) -> dict[str, torch.Tensor]:
    """Rows of token targets [B, T] and their splice marks [B, T] -> for each side of SPLICE_SIDES, [B, T]
    bool: the 6-mers holding a base of that side's dinucleotide. Each marked pair of bases (in one 6-mer or
    across two) is told by its own letters, which differ for every side and strand."""
    k = k_of(n_kmers)
    bases = kmer_digits((targets - kmer_start).clamp(0, n_kmers - 1), k).flatten(1)  # [B, T*k], reading order
    marked = (marked_bases(marks, k) & is_kmer(targets, kmer_start, n_kmers).unsqueeze(-1)).flatten(1)
    begins = marked[:, :-1] & marked[:, 1:]  # a marked pair of bases starts here
    pair = bases[:, :-1] * len(BASES) + bases[:, 1:]
    sides = {}
    for side, codes in SPLICE_SIDE_CODES.items():
        starts = begins & torch.isin(pair, torch.tensor(codes, device=pair.device))
        pair_bases = F.pad(starts, (0, 1)) | F.pad(starts, (1, 0))
        sides[side] = pair_bases.view(*targets.shape, k).any(-1)
    return sides


class Losses(NamedTuple):
    """One batch's loss terms (each 0 where the batch or the run has nothing for it; fns NaN before its stage)."""
    ce: torch.Tensor
    fns: torch.Tensor
    kl: torch.Tensor
    frame: torch.Tensor
    stop: torch.Tensor
    stop_contrast: torch.Tensor
    splice_contrast: torch.Tensor
    coding_kl: torch.Tensor


def is_kmer(ids, kmer_start: int, n_kmers: int):
    """Where ids (a tensor or an array) are 6-mer tokens: not tags, pads or <oov>."""
    return (ids >= kmer_start) & (ids < kmer_start + n_kmers)


def kmer_losses(model, rows: torch.Tensor, kmer_start: int, n_kmers: int, teacher=None, with_fns: bool = True,
                probe=None, frames: torch.Tensor | None = None, stops: torch.Tensor | None = None,
                splice_sites: torch.Tensor | None = None, side_weights: dict[str, float] | None = None) -> Losses:
    """The batch's Losses: cross-entropy over the k-mers, FNS per-base loss, (with a teacher) KL at k-mer
    targets, (with a probe and the rows' frame labels) the reading-frame loss, (with the in-frame stop
    table) the stop unlikelihood and the coding 6-mers' cross-entropy against their stop-making SNVs, and
    (with the rows' splice-site marks) the splice-site 6-mers' cross-entropy among their rivals, which
    `side_weights` weighs by the side (donor, acceptor) of each site's dinucleotide."""
    inputs, targets = rows[:, :-1], rows[:, 1:]
    hidden = model.model(input_ids=inputs).last_hidden_state
    frame = frame_loss(probe, hidden, frames) if probe is not None else torch.zeros((), device=rows.device)
    head = model.get_output_embeddings().weight[kmer_start : kmer_start + n_kmers]
    keep = is_kmer(targets, kmer_start, n_kmers)
    logits = hidden[keep] @ head.T
    kmer = targets[keep] - kmer_start
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    ce = F.nll_loss(logprobs, kmer)
    if with_fns:
        fns = -true_base_logprobs(logprobs, kmer, k_of(n_kmers)).mean()
    else:  # before its stage FNS is neither trained nor worth its cost on every step
        fns = torch.full((), float("nan"), device=rows.device)
    labels = None if frames is None else frames[:, 1:][keep]  # each k-mer target's frame label
    kl = coding_kl = torch.zeros((), device=rows.device)
    if teacher is not None:
        with torch.no_grad():
            t_hidden = teacher.model(input_ids=inputs).last_hidden_state[keep]
            t_head = teacher.get_output_embeddings().weight[kmer_start : kmer_start + n_kmers]
            t_logprobs = torch.log_softmax((t_hidden @ t_head.T).float(), dim=-1)
        token_kl = F.kl_div(logprobs, t_logprobs, log_target=True, reduction="none").sum(-1)
        kl = token_kl.mean()
        if labels is not None:
            coding = is_coding(labels)
            if coding.any():
                coding_kl = token_kl[coding].mean()
    stop = stop_contrast = torch.zeros((), device=rows.device)
    if stops is not None:
        before = bases_before(inputs[keep] - kmer_start, frames[:, :-1][keep], labels, n_kmers)
        stop = stop_loss(logprobs, kmer, labels, before, stops)
        stop_contrast = stop_contrast_loss(logprobs, kmer, labels, before, stops)
    splice_contrast = torch.zeros((), device=rows.device)
    if splice_sites is not None:
        marks = splice_sites[:, 1:][keep]
        at_site = marks != 0
        if at_site.any():
            is_site_base = marked_bases(marks[at_site], k_of(n_kmers))
            weights = None
            if side_weights:
                sides = splice_side_tokens(targets, splice_sites[:, 1:], kmer_start, n_kmers)
                weights = torch.ones(int(at_site.sum()), device=rows.device)
                for side, weight in side_weights.items():
                    weights[sides[side][keep][at_site]] = weight
            splice_contrast = splice_contrast_loss(logprobs[at_site], kmer[at_site], is_site_base, weights)
    return Losses(ce, fns, kl, frame, stop, stop_contrast, splice_contrast, coding_kl)


def step_loss(cfg: TrainConfig, terms: Losses, with_fns: bool, with_teacher: bool, with_probe: bool) -> torch.Tensor:
    """The loss a step descends: the data's (cross-entropy, and the FNS per-base loss from its stage), the
    teacher's KL at its share, the probe's frame loss at its share, then each added term at its weight."""
    loss = 0.5 * (terms.ce + terms.fns) if with_fns else terms.ce
    if with_teacher:
        loss = (1 - cfg.distill_weight) * loss + cfg.distill_weight * terms.kl
    if with_probe:
        loss = (1 - cfg.frame_weight) * loss + cfg.frame_weight * terms.frame
    return loss + sum(getattr(cfg, weight) * getattr(terms, term) for term, weight in ADDED_TERMS.items())


# what --protect keeps whole, as Losses fields: "held", the data's loss and the teacher's KL terms
KEPT_TERMS = {"held": ("ce", "fns", "kl", "coding_kl")}


def part_loss(cfg: TrainConfig, terms: Losses, names: tuple[str, ...], with_fns: bool, with_teacher: bool,
              with_probe: bool) -> torch.Tensor:
    """The part of the step's loss these Losses fields make, as `step_loss` counts it: that loss with every
    other term at 0 (the data's own loss at the share the teacher's KL and the probe leave it, and so on)."""
    zero = torch.zeros((), device=terms.ce.device)
    return step_loss(cfg, terms._replace(**{name: zero for name in Losses._fields if name not in names}),
                     with_fns, with_teacher, with_probe)


def kept_gradient(kept_loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The kept loss's gradient for each parameter (zeros where it reaches none, as a probe's)."""
    grads = torch.autograd.grad(kept_loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]


def _flat(grads) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads]).double()


def protect_gradient(params: list[torch.Tensor], kept_grads: list[torch.Tensor]) -> float:
    """Gradient surgery as in PCGrad (Yu et al. 2020), with the kept loss the task ranked first: each parameter's
    gradient (that of the whole loss) is split into the kept loss's (`kept_grads`) and the rest's (the added
    terms' and the probe's). Where the rest pulls against the kept loss (their dot product below 0), it loses
    its component along the kept gradient; a step then lowers the rest only in directions that do not raise
    the kept loss, to first order, and descends the kept loss as its own gradient would. Returns the cosine of
    the kept gradient and the rest's before surgery. (The kept gradient comes from a forward pass of its own: a
    compiled decoder's backward does not run twice through one graph.)"""
    for p in params:
        if p.grad is None:  # a parameter the whole loss does not reach
            p.grad = torch.zeros_like(p)
    whole = _flat(p.grad for p in params)
    kept = _flat(kept_grads)
    rest = whole - kept
    pull = rest @ kept
    cosine = float(pull / (kept.norm() * rest.norm()).clamp(min=1e-30))
    if pull < 0:
        surgered = kept + rest - pull / (kept @ kept) * kept
        offset = 0
        for p in params:
            p.grad.copy_(surgered[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
    return cosine


# a weighted batch is drawn from a generator seeded by seed * SEED_STRIDE + step: a seed below 2**31 keeps that
# within the 64 bits a torch generator takes for any step count (generation's seeds may go to 2**63 - 1)
SEED_STRIDE = 1_000_003
MAX_TRAINING_SEED = 2**31 - 1


def row_weights(cfg: TrainConfig, data: Path, n_rows: int) -> torch.Tensor:
    """How often each of a folder's rows is drawn, relatively: its group's weight (every row alike without
    `cfg.group_weights`)."""
    if not cfg.group_weights:
        return torch.ones(n_rows, dtype=torch.float64)
    if not (data / "train_groups.npy").exists():
        raise SystemExit(f"--group-weights needs {data}/train_groups.npy: rebuild the data with this version")
    groups = torch.from_numpy(np.load(data / "train_groups.npy").astype(np.int64))
    if len(groups) != n_rows:
        raise SystemExit(f"{data}/train_groups.npy does not match train_rows.npy: rebuild the data")
    per_group = torch.tensor([cfg.group_weights.get(group, 1.0) for group in GROUPS], dtype=torch.float64)
    return per_group[groups]


def batch_sampler(cfg: TrainConfig, data: Path, n_rows: int, n_mixed: int = 0):
    """step -> the rows of its batch. Plainly, epochs of one seeded shuffle. With `cfg.group_weights`, each
    row is drawn (without replacement within a batch) with its group's weight, so that a group the held-out
    tasks find weakest can be seen more often in continued training; with `n_mixed` rows of `cfg.mix_data`
    after the `n_rows` of `data`, those make `cfg.mix_share` of the draw (the group weights holding within
    each part). Such draws come from a generator seeded by the step, so that a resumed run draws what the
    uninterrupted one would have."""
    if not cfg.group_weights and not n_mixed:
        order = torch.randperm(n_rows, generator=torch.Generator().manual_seed(cfg.seed))
        return lambda step: order[(torch.arange(cfg.batch) + step * cfg.batch) % n_rows]
    weights = row_weights(cfg, data, n_rows)
    if n_mixed:
        mixed = row_weights(cfg, Path(cfg.mix_data), n_mixed)
        if not (weights.sum() > 0 and mixed.sum() > 0):
            raise SystemExit("--group-weights leaves no row to draw in --data or in --mix-data")
        weights = torch.cat([weights / weights.sum() * (1 - cfg.mix_share), mixed / mixed.sum() * cfg.mix_share])
    if int((weights > 0).sum()) < cfg.batch:
        raise SystemExit(f"--group-weights leaves fewer rows to draw than a batch ({cfg.batch})")
    return lambda step: torch.multinomial(weights, cfg.batch, replacement=False,
                                          generator=torch.Generator().manual_seed(cfg.seed * SEED_STRIDE + step))


def mixed_in(mix: Path, name: str, main: torch.Tensor) -> torch.Tensor:
    """The `--data` folder's array `main` with the `--mix-data` folder's array of that name after it."""
    if not (mix / name).exists():
        raise SystemExit(f"--mix-data {mix}: no {name}, which this loss reads; write the folder again with "
                         "this version (python -m carbon_app.training.draft_data)")
    added = torch.from_numpy(np.load(mix / name).astype(main.numpy().dtype))
    if added.shape[1:] != main.shape[1:]:
        raise SystemExit(f"--mix-data {mix}: its {name} rows are {tuple(added.shape[1:])}, the --data "
                         f"folder's {tuple(main.shape[1:])}")
    return torch.cat([main, added])


def eval_rows(validation: list[dict], tokenizer) -> torch.Tensor:
    return torch.tensor([[tokenizer.open_id, *tokenizer.kmer_ids(w["seq"][: len(w["seq"]) // 6 * 6])]
                         for w in validation])


#: Validation windows read in one forward pass. The whole set at once raised a run's peak by ~4 GB (the
#: installed target's read: 4.4 GB at once, 0.7 GB so), and a run beside another process was killed out of
#: memory at its last step.
VALIDATION_BATCH = 32


@torch.no_grad()
def validation_losses(model, validation: torch.Tensor, kmer_start: int, n_kmers: int,
                      batch: int = VALIDATION_BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """The validation rows' mean cross-entropy per 6-mer token and FNS loss per base, read `batch` rows at a
    time: each batch's means weighted by its 6-mer tokens, so the figures are those of one pass over all."""
    targets = validation[:, 1:]
    tokens = is_kmer(targets, kmer_start, n_kmers).sum(-1)
    ce = fns = torch.zeros((), dtype=torch.float64, device=validation.device)
    for start in range(0, len(validation), batch):
        weight = tokens[start : start + batch].sum()
        if not weight:
            continue
        terms = kmer_losses(model, validation[start : start + batch], kmer_start, n_kmers)
        ce, fns = ce + weight * terms.ce.double(), fns + weight * terms.fns.double()
    return ce / tokens.sum(), fns / tokens.sum()


def train(cfg: TrainConfig, resume: bool = False) -> Path:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from ..core.tokens import CarbonTokenizer

    if cfg.bf16_autocast is None:
        cfg = replace(cfg, bf16_autocast=native_bf16(cfg.device))
    data = Path(cfg.data)
    if not (data / "train_rows.npy").exists() or not (data / "tokenizer").is_dir():
        raise SystemExit(f"no training data in {data}: build it first with "
                         f"`python -m carbon_app.training.data --out {data}`")
    for flag, folder in (("--init", cfg.init), ("--teacher", cfg.teacher)):
        if problem := not_a_model(flag, folder):
            raise SystemExit(problem)
    text = PreTrainedTokenizerFast.from_pretrained(str(data / "tokenizer"))
    dna_config = DnaConfig.from_file(data / "tokenizer" / "dna_config.json")
    tokenizer = CarbonTokenizer(dna_config, text)
    rows = torch.from_numpy(np.load(data / "train_rows.npy").astype(np.int64))
    card = json.loads((data / "data_card.json").read_text())
    frames = probe = stops = None
    stop_terms = {"--stop-weight": cfg.stop_weight, "--stop-contrast-weight": cfg.stop_contrast_weight}
    framed_terms = {"--frame-weight": cfg.frame_weight, **stop_terms,
                    "--coding-distill-weight": cfg.coding_distill_weight}
    if any(framed_terms.values()):
        flag = next(flag for flag, w in framed_terms.items() if w)
        if not (data / "train_frames.npy").exists():
            raise SystemExit(f"{flag} needs {data}/train_frames.npy: rebuild the data with this version")
        if card.get("frame_labels") != FRAME_LABEL_RULE:  # older builds framed 6-mers leaving the CDS
            raise SystemExit(f"{flag}: {data}/train_frames.npy gives a frame to 6-mers that leave the CDS "
                             "(into an intron, past the stop codon): rebuild the data with this version")
        frames = torch.from_numpy(np.load(data / "train_frames.npy"))
        if int(frames.max()) >= FRAME_CLASSES:
            raise SystemExit(f"{data}/train_frames.npy has labels this version does not know: rebuild the data")
    if any(stop_terms.values()):
        stops = stop_table(tokenizer.k).to(cfg.device)
    splice_sites = None
    if cfg.splice_contrast_weight:
        flag = "--splice-contrast-weight"
        if not (data / "train_splice.npy").exists():
            raise SystemExit(f"{flag} needs {data}/train_splice.npy: rebuild the data with this version")
        splice_sites = torch.from_numpy(np.load(data / "train_splice.npy"))
        if card.get("splice_marks") != SPLICE_MARKS:  # an older build marks 6-mers only
            raise SystemExit(f"{flag} needs {data}/train_splice.npy to mark each splice base: "
                             "rebuild the data with this version")
    n_rows = len(rows)
    if cfg.mix_data:
        mix = Path(cfg.mix_data)
        if not (mix / "tokenizer" / "dna_config.json").exists() or DnaConfig.from_file(
                mix / "tokenizer" / "dna_config.json") != dna_config:
            raise SystemExit(f"--mix-data {mix}: not training data with the --data folder's tokenizer")
        rows = mixed_in(mix, "train_rows.npy", rows)
        frames = None if frames is None else mixed_in(mix, "train_frames.npy", frames)
        splice_sites = None if splice_sites is None else mixed_in(mix, "train_splice.npy", splice_sites)
    validation = eval_rows(json.loads((data / "validation.json").read_text()), tokenizer)
    validation = validation.to(cfg.device)
    if cfg.init:
        model = LlamaForCausalLM.from_pretrained(cfg.init, dtype=torch.float32)
        cfg = replace(cfg, **shape_of(model.config))  # the record says the shape trained, not the preset's
    else:
        model = build_model(cfg, dna_config.min_vocab_size, text.pad_token_id)
    model.to(cfg.device)
    teacher = None
    if cfg.teacher:
        teacher = LlamaForCausalLM.from_pretrained(cfg.teacher, dtype=torch.float32).to(cfg.device).eval()
    if cfg.compile:  # in place: parameter names, checkpoints and the saved model are unchanged
        model.model.compile()
        if teacher is not None:
            teacher.model.compile()
    trained = list(model.parameters())
    torch.manual_seed(cfg.seed)  # the probe starts alike in every run of a seed, --init's included
    if cfg.frame_weight:
        probe = torch.nn.Linear(model.config.hidden_size, FRAME_CLASSES).to(cfg.device)
        trained += list(probe.parameters())
    optimizer = torch.optim.AdamW(trained, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    cfg.out.mkdir(parents=True, exist_ok=True)
    checkpoint = cfg.out / "checkpoint.pt"
    log: list[dict] = []
    step = 0
    if resume and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        if probe is not None:
            probe.load_state_dict(state["probe"])
        optimizer.load_state_dict(state["optimizer"])
        step, log = state["step"], state["log"]
        torch.set_rng_state(state["rng"])
        print(f"resumed at step {step}")
    elif cfg.init and probe is not None:
        fitted = fit_probe(model, probe, rows, n_rows, cfg,
                           lambda probe, hidden, index: frame_loss(probe, hidden, frames[index].to(cfg.device)))
        if fitted:
            print(f"a new reading-frame probe fitted to the --init model, which stays as it is: loss "
                  f"{fitted[0]:.3f} -> {statistics.mean(fitted[-10:]):.3f} over {len(fitted)} batches", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{cfg.name}: {n_params / 1e6:.2f}M parameters, {n_rows:,} windows"
          + (f" and {len(rows) - n_rows:,} of {cfg.mix_data} ({cfg.mix_share:.0%} of the draw)" if cfg.mix_data else "")
          + f", {cfg.steps} steps of {cfg.batch} x {rows.shape[1] - 1} tokens", flush=True)
    draw = batch_sampler(cfg, data, n_rows, len(rows) - n_rows)
    began = time.perf_counter()
    first_step, timed_from = step, began  # a budget times this run's own steps (a resumed run's too)
    kmer_start, n_kmers = tokenizer.kmer_start_id, tokenizer.n_kmers
    cosines: list[float] = []  # with --protect: each step's cosine of the kept loss's gradient and the rest's
    while step < cfg.steps:
        model.train()
        batch_index = draw(step)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg, step)
        with_fns = step >= cfg.fns_from * cfg.steps
        batch_rows = rows[batch_index].to(cfg.device)
        kept = None  # with --protect: the kept loss's own gradient, from a forward pass of its terms alone
        batch_frames = None if frames is None else frames[batch_index].to(cfg.device)
        if cfg.protect:
            with mixed_precision(cfg):
                kept_terms = kmer_losses(model, batch_rows, kmer_start, n_kmers, teacher, with_fns,
                                         frames=batch_frames)
            kept = kept_gradient(part_loss(cfg, kept_terms, KEPT_TERMS[cfg.protect], with_fns, teacher is not None,
                                           probe is not None), trained)
        with mixed_precision(cfg):
            terms = kmer_losses(
                model, batch_rows, kmer_start, n_kmers, teacher, with_fns, probe, batch_frames, stops,
                None if splice_sites is None else splice_sites[batch_index].to(cfg.device), cfg.splice_side_weights)
        ce, fns, kl, frame = terms.ce, terms.fns, terms.kl, terms.frame
        loss = step_loss(cfg, terms, with_fns, teacher is not None, probe is not None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if kept is not None:
            cosines.append(protect_gradient(trained, kept))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if cfg.minutes and step - first_step == TIMED_STEPS.start:
            timed_from = time.perf_counter()
        elif cfg.minutes and step - first_step == TIMED_STEPS.stop:
            per_step = (time.perf_counter() - timed_from) / len(TIMED_STEPS)
            fitted = steps_within(cfg, step, time.perf_counter() - began, per_step)
            if fitted < cfg.steps:
                print(f"{per_step:.2f} s a step: {fitted} steps fit {cfg.minutes:g} minutes "
                      f"(not {cfg.steps}); the schedule follows", flush=True)
                cfg = replace(cfg, steps=fitted)
        if step % 50 == 0 or step == cfg.steps:
            fns_text = f"{fns.item():.4f}" if with_fns else "(not yet in the loss)"
            print(f"step {step:5d}  loss {loss.item():.4f}  ce {ce.item():.4f}  fns/base {fns_text}  "
                  f"kl {kl.item():.4f}/{terms.coding_kl.item():.4f} coding  frame {frame.item():.4f}  "
                  f"stop {terms.stop.item():.4f}"
                  f"/{terms.stop_contrast.item():.4f} among SNVs  splice {terms.splice_contrast.item():.4f} among "
                  "rivals  "
                  + (f"{cfg.protect}/rest gradient cosine {statistics.mean(cosines[-50:]):+.3f} "
                     f"({sum(c < 0 for c in cosines[-50:])} of {len(cosines[-50:])} steps against)  "
                     if cosines else "")
                  + f"lr {learning_rate(cfg, step - 1):.2e}  "
                  f"{(time.perf_counter() - began) / 60:.1f} min", flush=True)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            v_ce, v_fns = validation_losses(model, validation, kmer_start, n_kmers)
            entry = {"step": step, "train_loss": loss.item(), "train_ce": ce.item(),
                     "train_fns": fns.item() if with_fns else None,
                     "train_frame": frame.item() if probe is not None else None,
                     "train_stop": terms.stop.item() if stops is not None else None,
                     "train_stop_contrast": terms.stop_contrast.item() if stops is not None else None,
                     "train_splice_contrast": terms.splice_contrast.item() if splice_sites is not None else None,
                     "train_coding_kl": terms.coding_kl.item() if cfg.coding_distill_weight else None,
                     # with --protect: the steps so far whose added terms pulled against the kept loss, surgery made
                     "steps_protected": sum(c < 0 for c in cosines) if cfg.protect else None,
                     "val_ce": v_ce.item(),
                     "val_fns_per_base": v_fns.item(), "val_bits_per_base": v_ce.item()
                     / tokenizer.k / math.log(2), "minutes": (time.perf_counter() - began) / 60}
            log.append(entry)
            print(f"  validation: ce/token {v_ce.item():.4f} ({entry['val_bits_per_base']:.3f} bits/base), "
                  f"fns/base {v_fns.item():.4f}", flush=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                        "log": log, "rng": torch.get_rng_state(),
                        "probe": None if probe is None else probe.state_dict()}, checkpoint)
    return save_model_dir(cfg, model, data, n_params, log)


def model_folder(out_root: str, name: str) -> Path:
    """Where the run `name` saves its model: the folder `--init` and `--teacher` name."""
    return Path(out_root) / name / "model"


def not_a_model(flag: str, folder: str | Path | None) -> str | None:
    """What is wrong with `flag`'s model folder, if anything (None when it holds a model or none was named):
    a name transformers cannot find on disk it would look for on the hub, and fail there with a traceback."""
    if folder is not None and not (Path(folder) / "config.json").is_file():
        return f"{flag} {folder}: not a model folder (no config.json); a run's model is runs/<name>/model"
    return None


def training_lineage(model_dir: str | Path | None) -> list[dict]:
    """The training runs a model's weights came through, oldest first, each its config and last log entry:
    read from the model's training.json, then from its `--init` model's (kept there as "lineage" when it
    was trained, else followed on disk while that folder exists), so that a continued model still says
    how it was made once the folders it started from are gone or replaced by an install."""
    lineage = []
    while model_dir is not None and (record := Path(model_dir) / "training.json").exists():
        training = json.loads(record.read_text())
        if any(run["config"] == training["config"] for run in lineage):
            break  # the folder a run started from now holds a later run (installed over it, or itself)
        run = {"config": training["config"], "final": training["log"][-1] if training["log"] else None}
        if "target_rows" in training.get("data_card", {}):  # its data was written by a target (draft_data)
            run["target_rows"] = training["data_card"]["target_rows"]
        if "mix_rows" in training:  # and so were the rows it mixed in
            run["mix_rows"] = training["mix_rows"]
        if "parents" in training:  # a merge (merge.py): the lineages of the two models it averaged
            run["parents"] = training["parents"]
        lineage.insert(0, run)
        if "lineage" in training:
            return training["lineage"] + lineage
        model_dir = training["config"].get("init")
    return lineage


def shares_text(shares: dict[str, float]) -> str:
    """{"mammal": 3.0} -> "mammal=3", as `--group-weights` reads it."""
    return ",".join(f"{name}={share:g}" for name, share in shares.items())


def run_preset(config: dict) -> str:
    """The preset a run's recorded config was trained under (older records name none: a teacher meant a draft)."""
    return config.get("preset") or ("draft" if config.get("teacher") else "target")


def kept_near_start(config: dict) -> bool:
    """Whether a run was kept near the very model it continued (`--teacher` naming its `--init`): once that
    folder is installed over it holds the run's own result, so what the run was kept near is the run before."""
    return config.get("teacher") is not None and config.get("teacher") == config.get("init")


def train_command(config: dict, init: str | None) -> str:
    """The command that trains a run of this config from `init` (the preset's own values left out)."""
    preset = run_preset(config)
    defaults = asdict(replace(TrainConfig(), **PRESETS[preset]))
    words = ["python -m carbon_app.training.train", f"--preset {preset}"]
    for key in ("name", "data", "init", "teacher", "seed", "steps", "lr",
                "min_lr", "warmup", "fns_from", *SHAPE, *OBJECTIVE):
        value = init if key == "init" or (key == "teacher" and kept_near_start(config)) else config.get(key)
        if key in ("group_weights", "splice_side_weights") and value:
            value = shares_text(value)
        if value is True:  # a switch
            words.append(f"--{key.replace('_', '-')}")
        elif value is not None and value != defaults[key]:
            words.append(f"--{key.replace('_', '-')} " + (f"{value:g}" if isinstance(value, float) else str(value)))
    return " ".join(words)


def save_model_dir(cfg: TrainConfig, model, data: Path, n_params: int, log: list[dict]) -> Path:
    """Half-precision weights (the app computes in fp32 on a CPU) plus everything to load it."""
    out = model_folder(cfg.out_root, cfg.name)
    model.to("cpu", torch.float16).save_pretrained(str(out))
    for file in (data / "tokenizer").iterdir():
        shutil.copy(file, out / file.name)
    data_card = json.loads((data / "data_card.json").read_text())
    (out / "tag_scheme.json").write_text(json.dumps(trained_tag_scheme(data_card), indent=1) + "\n")
    record = {"config": asdict(cfg), "parameters": n_params, "log": log, "lineage": training_lineage(cfg.init),
              "data_card": data_card}
    if cfg.mix_data and (mix_card := Path(cfg.mix_data) / "data_card.json").exists():
        if "target_rows" in (mixed := json.loads(mix_card.read_text())):  # how draft_data wrote the rows
            record["mix_rows"] = mixed["target_rows"]
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"saved {out}")
    return out


def added_term(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A flag for the weight of a term added to the loss: a number from 0 (the default: none) to 10."""
    parser.add_argument(flag, type=argument_type(lambda text: real_number(text, flag, 0, 10)), help=help)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m carbon_app.training.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="target")
    parser.add_argument("--steps", type=argument_type(lambda text: whole_number(text, "--steps", 1)))
    parser.add_argument("--data", default="data/demo")
    parser.add_argument("--out-root", default="runs")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--init", help="start from this model directory's weights (continued training)")
    parser.add_argument("--name", help="the run's name (its folder under --out-root)")
    parser.add_argument("--seed", type=argument_type(lambda text: whole_number(text, "--seed", 0, MAX_TRAINING_SEED)),
                        help="seeds the weights' start and the batches' draw (default 0); a run continued from "
                             "another with the same seed draws the same windows again, so a new seed gives it new "
                             "ones")
    parser.add_argument("--lr", type=argument_type(lambda text: real_number(text, "--lr", 0, 1, above_low=True)),
                        help="peak learning rate")
    parser.add_argument("--min-lr", type=argument_type(lambda text: real_number(text, "--min-lr", 0, 1)),
                        help="the learning rate the cosine ends at (default 1e-4); at most --lr")
    parser.add_argument("--warmup", type=argument_type(lambda text: whole_number(text, "--warmup", 0)),
                        help="steps of linear warm-up to the peak learning rate (default 150; continued "
                             "training from a trained model needs few)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--no-compile", dest="compile", action="store_false", default=None,
                        help="run the decoder eagerly (torch.compile needs a C++ compiler on a CPU)")
    parser.add_argument("--fns-from", type=argument_type(lambda text: real_number(text, "--fns-from", 0, 1)),
                        help="share of the steps after which FNS joins the loss "
                        "(0: from the start, as suits continued training)")
    parser.add_argument("--teacher", help="the trained target a draft distils from (default: runs/carbon-demo/model); "
                                          "for a target, with --distill-weight, the model it is kept near (its "
                                          "--init, say, while it learns splice sites)")
    parser.add_argument("--distill-weight",
                        type=argument_type(lambda text: real_number(text, "--distill-weight", 0, 1)),
                        help="the share of the loss given to the KL divergence from the teacher (the draft "
                             "preset's 0.5; nearer 1, it follows the teacher more and the data less)")
    shape = parser.add_argument_group("the preset's shape and batch, overridden (a GPU takes a larger model and "
                                      "batch than these 2-core presets)")
    for key in SHAPE:
        flag = f"--{key.replace('_', '-')}"
        shape.add_argument(flag, type=argument_type(lambda text, flag=flag: whole_number(text, flag, 1)))
    parser.add_argument("--minutes", type=argument_type(lambda text: real_number(text, "--minutes", 0, above_low=True)),
                        help="end within this many minutes: the step count (and its schedule) is cut to the "
                             "measured speed, for a run in a time-limited slot")
    parser.add_argument("--frame-weight", type=argument_type(lambda text: real_number(text, "--frame-weight", 0, 1)),
                        help="share of the loss given to a reading-frame probe on the last hidden state "
                             "(default 0: none); needs data built with train_frames.npy")
    added_term(parser, "--stop-weight",
               "weight of an unlikelihood term on 6-mers with a stop codon in a labelled coding "
               "frame (default 0: none); needs data built with train_frames.npy")
    added_term(parser, "--stop-contrast-weight",
               "weight of the cross-entropy of each coding 6-mer among itself and its single-base "
               "substitutions that hold a stop codon in its labelled frame, added to the loss "
               "(default 0: none); needs data built with train_frames.npy")
    added_term(parser, "--splice-contrast-weight",
               "weight of the cross-entropy of each splice-site 6-mer among the 6-mers that differ "
               "from it at its splice dinucleotide's bases only, added to the loss (default 0: "
               "none); needs data built with train_splice.npy")
    added_term(parser, "--coding-distill-weight",
               "weight of the KL divergence from the teacher at the coding tokens alone, added to "
               "the loss (default 0: none): it holds what a stop-gain's score reads while the "
               "splice terms move the rest; needs --teacher and data built with train_frames.npy")
    added_term(parser, "--anchor-weight",
               "weight of the KL divergence from the teacher at every token, added to the loss "
               "(default 0: none): the whole distribution held near the teacher as strongly as the "
               "contrast terms pull, where --distill-weight only shares the loss with the data; "
               "needs --teacher")
    parser.add_argument("--mix-data", help="a second training-data folder whose rows join the draw, e.g. a "
                        "target's own greedy continuations (draft_data --greedy-only), which it learns to commit "
                        "to; needs --mix-share")
    parser.add_argument("--mix-share", type=argument_type(lambda text: real_number(text, "--mix-share", 0, 1,
                                                                                   above_low=True)),
                        help="the share of the draw the --mix-data rows make, e.g. 0.25")
    parser.add_argument("--protect", choices=sorted(KEPT_TERMS),
                        help="gradient surgery (PCGrad): where the rest of the loss pulls against what is kept, "
                             "its gradient loses the component along the kept loss's, so that what it teaches costs "
                             "that nothing to first order: 'held', the data's own loss and the teacher's KL terms "
                             "(the added terms and the probe the rest); a forward and backward pass more a step")
    parser.add_argument("--splice-side-weights", type=argument_type(
                            lambda text: named_shares(text, "--splice-side-weights", SPLICE_SIDES, "side")),
                        help="with --splice-contrast-weight, the share of the contrast a donor's (GT) or an "
                             "acceptor's (AG) 6-mers take, e.g. donor=0.5 (default: every site alike)")
    parser.add_argument("--group-weights", type=argument_type(
                            lambda text: named_shares(text, "--group-weights", GROUPS, "group")),
                        help="draw the rows of these groups this many times as often as the rest, e.g. "
                             "mammal=3 (default: every row alike); needs data built with train_groups.npy")
    return parser


def run_config(argv: list[str] | None) -> tuple[TrainConfig, bool]:
    """The run a command line asks for, and whether it resumes; a command that cannot run is refused, the
    problem named (SystemExit)."""
    parser = argument_parser()
    args = parser.parse_args(argv)
    if args.preset == "target" and (args.teacher is None) != (args.distill_weight is None):
        parser.error("a target's --teacher and --distill-weight go together: the model it is kept near and the "
                     "share of the loss that keeps it there")
    cfg = replace(TrainConfig(), **PRESETS[args.preset], data=args.data, out_root=args.out_root)
    for key in ("steps", "init", "name", "seed", "lr", "min_lr", "warmup",
                "device", "fns_from", "compile", *SHAPE, "minutes", *OBJECTIVE):
        if getattr(args, key) is not None:
            cfg = replace(cfg, **{key: getattr(args, key)})
    if cfg.min_lr > cfg.lr:
        parser.error(f"the learning rate would rise from --lr {cfg.lr:g} to the cosine's end at {cfg.min_lr:g}: "
                     f"give --min-lr at most {cfg.lr:g}")
    if (args.mix_data is None) != (args.mix_share is None):
        parser.error("--mix-data and --mix-share go together: the folder mixed in and the share of the draw it makes")
    if args.mix_data and not (Path(args.mix_data) / "train_rows.npy").exists():
        parser.error(f"--mix-data {args.mix_data}: no training data (write it with "
                     "`python -m carbon_app.training.draft_data`)")
    if args.warmup is not None and args.warmup >= cfg.steps:
        parser.error(f"--warmup {args.warmup} leaves no steps after the warm-up: --steps is {cfg.steps}")
    if cfg.teacher or args.teacher:
        cfg = replace(cfg, teacher=args.teacher or str(model_folder(args.out_root, "carbon-demo")))
    if cfg.splice_side_weights and not cfg.splice_contrast_weight:
        parser.error("--splice-side-weights weighs the splice contrast: give --splice-contrast-weight too")
    for flag, weight, held in (("--coding-distill-weight", cfg.coding_distill_weight, "the coding tokens"),
                               ("--anchor-weight", cfg.anchor_weight, "every token")):
        if weight and not cfg.teacher:
            parser.error(f"{flag} holds {held} near a teacher: name it with --teacher")
    return cfg, args.resume


def main(argv: list[str] | None = None) -> None:
    cfg, resume = run_config(argv)
    train(cfg, resume=resume)


if __name__ == "__main__":
    main()
