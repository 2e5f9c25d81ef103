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
every coding token whose true 6-mer holds none. With `--splice-weight`, the
6-mers that hold a base of a canonical splice dinucleotide (the GT and AG at
an intron's ends) get their cross-entropy added again with that weight: they
are a few in ten thousand tokens, and the splice signal variant scores are
read for is lost in the mean otherwise. With `--splice-base-weight`, the
splice dinucleotide's bases themselves get their FNS per-base cross-entropy
(the negative log-marginal of the true base at that place of the 6-mer)
added with that weight: it asks for the G, T, A or G there and nothing of
the 6-mer's other four bases, whose cross-entropy the 6-mer form also
raises, moving the model's guesses around every GT and AG. With
`--splice-contrast-weight`, each splice 6-mer's cross-entropy is taken among
its rivals only, the 6-mers that differ from it at its splice bases (16 for a
whole GT or AG): the dinucleotide given the 6-mer's other bases, which is
what a splice-site variant's score compares; at that token its gradient
reaches the rivals' logits only. With `--stop-contrast-weight`, the same
for stop codons, at coding tokens: each true 6-mer's cross-entropy among
itself and those of its single-base substitutions that would put a stop codon
in the labelled frame, the comparison a stop-gain variant's score makes
(-log(1 - p) over all 4,096 fades as p does; this one stays as sharp as the
ratio of the two). With `--splice-control-weight`, the splice contrast again
at an ordinary token for each site token (the token half the batch away),
its rivals varying the same bases: the true bases where no site is, against
the liking for GT and AG that the splice terms teach wherever the model
cannot tell a site from its surroundings. With `--coding-distill-weight`
(beside a `--teacher`), the KL divergence from the teacher is taken again at
the coding tokens alone: what a stop-gain's score reads held near the model
the run began from, while the splice terms move the rest; with
`--anchor-weight`, at every token: the whole distribution held near it as
strongly as the added terms pull, where `--distill-weight`, a share of the
loss, can only trade the data for it. With `--splice-probe-weight`, a second
linear probe reads from the same hidden state whether the coming 6-mer holds
a base of a splice dinucleotide and whether the 6-mer just read did, in the
windows of annotated transcripts (each class weighed alike, sites being a few
in a thousand tokens there): it asks the decoder to carry where an exon or
intron ends, which the 6-mer head may then read, without pulling any 6-mer's
probability itself. With `--far-shift-weight`, each step also reads half its rows again with one base of
one 6-mer changed at random, and adds the KL divergence of the model's predictions there from those for the
unchanged row, summed over the tokens that begin 30 or more bases past the change: a variant's score sums
the log-probability change over its whole window, and a substitution that shifts every far prediction a
little adds up to noise that buries what changed at the site (on the validation variants, the part of the
delta more than 30 bases away is near chance and costs the score's AUROC 0.02-0.05). With `--protect data`,
`held`, `coding` or `ordered`, each step's gradient goes
through gradient surgery (PCGrad): where the rest of the loss pulls against what is kept (the data's own
loss; or that and the teacher's KL terms; or those and the stop terms, as one tier or, `ordered`, as two
ranked in that order, the stop terms then bent only against the first), the rest loses its component
along the kept loss's gradient, so the added terms teach only what costs the kept loss nothing to first
order. The nine terms read the annotation of the training genes only; the probes are training scaffolding,
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
from copy import deepcopy
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
OBJECTIVE = ("frame_weight", "stop_weight", "stop_contrast_weight", "splice_weight", "splice_base_weight",
             "splice_contrast_weight", "splice_control_weight", "group_weights", "distill_weight",
             "coding_distill_weight", "anchor_weight", "splice_probe_weight", "mix_data", "mix_share", "protect",
             "splice_side_weights", "far_shift_weight", "context_noise")
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
    init_layers: int | None = None  # with `init`: its first N decoder layers (a draft), or grown to N (more capacity)
    new_layers_only: bool = False  # with `init_layers` growing it: train the new layers alone, the rest frozen
    compile: bool = True  # torch.compile the decoder: fused element-wise kernels, ~1.6x faster steps on a CPU
    minutes: float | None = None  # a wall-clock budget: once the speed is measured, fewer steps if need be
    frame_weight: float = 0.0  # share of the loss given to the reading-frame probe (0: no probe)
    stop_weight: float = 0.0  # weight of the in-frame stop unlikelihood term added to the loss (0: none)
    stop_contrast_weight: float = 0.0  # weight of coding 6-mers' cross-entropy against their stop-making SNVs
    splice_weight: float = 0.0  # weight of the splice-site 6-mers' cross-entropy added to the loss (0: none)
    splice_base_weight: float = 0.0  # weight of the splice dinucleotide bases' FNS cross-entropy (0: none)
    splice_contrast_weight: float = 0.0  # weight of the splice 6-mers' cross-entropy among their rivals (0: none)
    splice_control_weight: float = 0.0  # the same contrast at as many ordinary tokens, with the sites' patterns
    # "donor"/"acceptor" -> the share of the splice contrast each side's 6-mers take (a side left out: 1)
    splice_side_weights: dict[str, float] | None = None
    splice_probe_weight: float = 0.0  # weight of the splice-site probe's loss added to the loss (0: no such probe)
    far_shift_weight: float = 0.0  # weight of how far a random substitution moves the predictions (0: none)
    # the share of the 6-mers the model reads with one base changed at random, the targets left true: SNVs in the
    # context, which a variant's score reads over its whole window, learnt as noise to read through (0: none)
    context_noise: float = 0.0
    group_weights: dict[str, float] | None = None  # group -> how much more often its rows are drawn (others 1)
    # a second training-data folder (rows a target wrote, draft_data) whose rows make `mix_share` of the draw
    mix_data: str | None = None
    mix_share: float = 0.0
    # gradient surgery: the rest of the loss's gradient is bent wherever it pulls against the gradient of what is
    # kept, a level of KEPT_TIERS ("data", "held", "coding" or "ordered"), so that what the added terms teach is
    # not paid for there (to first order); None: no surgery
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


def first_layers(model, n: int):
    """`model` cut to its first `n` decoder layers, its embeddings, final norm and head kept: a draft begun
    from its target's early layers (an early exit). Before any training, 2 of the 8 layers of the demo target
    agree with its greedy 6-mer 52% of the time (random weights agree by chance only); distillation starts there."""
    model.model.layers = torch.nn.ModuleList(model.model.layers[:n])
    model.config.num_hidden_layers = n
    return model


def expanded_layers(model, n: int):
    """`model` grown to `n` decoder layers by block expansion: `n - L` of its L layers, evenly spread, each
    followed by a copy of itself whose attention and MLP output projections are zero, so that the copy adds
    nothing to the residual stream and the grown model computes exactly what `model` did. Training moves the
    copies from there: more capacity that starts from what the model knows, not from random weights."""
    layers = list(model.model.layers)
    copied = copied_layers(len(layers), n)
    grown = []
    for i, layer in enumerate(layers):
        grown.append(layer)
        if i in copied:
            copy = deepcopy(layer)
            for projection in (copy.self_attn.o_proj, copy.mlp.down_proj):
                torch.nn.init.zeros_(projection.weight)
            grown.append(copy)
    for i, layer in enumerate(grown):
        layer.self_attn.layer_idx = i  # each layer's place in a KV cache
    model.model.layers = torch.nn.ModuleList(grown)
    model.config.num_hidden_layers = n
    return model


def copied_layers(have: int, n: int) -> list[int]:
    """Which of `have` layers block expansion to `n` copies: `n - have` of them, evenly spread (of 8 grown to
    12: the 2nd, 4th, 6th and 8th)."""
    extra = n - have
    return sorted({round((i + 1) * have / extra) - 1 for i in range(extra)})


def new_layers(have: int, n: int) -> list[int]:
    """Where the copies stand in the grown stack of `n` layers (each right after the layer it copies)."""
    return [at + 1 + before for before, at in enumerate(copied_layers(have, n))]


def with_layers(model, n: int):
    """The --init model with `n` decoder layers: its first n where n is fewer (a draft begun from its target),
    grown by block expansion where n is more (at most twice as many: each layer copied once)."""
    have = len(model.model.layers)
    if not 0 < n <= 2 * have or n == have:
        raise SystemExit(f"--init-layers {n}: the --init model has {have} decoder layers; keep 1 to {have - 1} "
                         f"of them, or grow them to {have + 1}-{2 * have}")
    return first_layers(model, n) if n < have else expanded_layers(model, n)


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
ADDED_TERMS = {"stop": "stop_weight", "stop_contrast": "stop_contrast_weight", "splice": "splice_weight",
               "splice_bases": "splice_base_weight", "splice_contrast": "splice_contrast_weight",
               "splice_control": "splice_control_weight", "coding_kl": "coding_distill_weight", "kl": "anchor_weight",
               "splice_probe": "splice_probe_weight", "far_shift": "far_shift_weight"}
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


def annotated_stretch(frames: torch.Tensor) -> torch.Tensor:
    """[rows, L] frame labels -> [rows, L] bool: each row from its first to its last token with a known label,
    where the splice marks are whole (an annotated transcript's bases; a genomic window has no label, and a
    row a target continued has them over its source window's bases only)."""
    known = frames >= 0
    at = torch.arange(frames.shape[1], device=frames.device)
    first = torch.where(known, at, frames.shape[1]).min(1, keepdim=True).values
    last = torch.where(known, at, -1).max(1, keepdim=True).values
    return (at >= first) & (at <= last)


def balanced_bce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy with the positives and the negatives weighed alike (0 where either is missing)."""
    if labels.all() or not labels.any():
        return torch.zeros((), device=logits.device)
    losses = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="none")
    return 0.5 * (losses[labels].mean() + losses[~labels].mean())


def splice_probe_loss(probe, hidden: torch.Tensor, frames: torch.Tensor, splice_sites: torch.Tensor) -> torch.Tensor:
    """The splice-site probe's loss over the annotated stretches: from the hidden state at input token t,
    whether token t + 1 (the coming 6-mer) holds a base of a splice dinucleotide and whether token t did,
    each a balanced binary cross-entropy (a site is a few tokens in a thousand)."""
    stretch = annotated_stretch(frames)
    scope = stretch[:, :-1] & stretch[:, 1:]
    if not scope.any():
        return torch.zeros((), device=hidden.device)
    logits = probe(hidden[scope]).float()
    coming, read = splice_sites[:, 1:][scope] != 0, splice_sites[:, :-1][scope] != 0
    return 0.5 * (balanced_bce(logits[:, 0], coming) + balanced_bce(logits[:, 1], read))


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


def control_tokens(at_site: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A control for each splice-site token of a batch's flattened tokens: the token half the batch away
    (another row, drawn apart from the site's), kept where it is no site itself. Returns (the controls'
    indices, which sites have one). No random draw: the batch's rows are drawn at random already."""
    sites = at_site.nonzero().squeeze(-1)
    controls = (sites + len(at_site) // 2) % len(at_site)
    ordinary = ~at_site[controls]
    return controls[ordinary], ordinary


# a substitution may rightly move the predictions of its own 6-mer and its neighbours' (a stop codon, a splice
# site and the consensus around it); what begins this many bases past it, `--far-shift-weight` holds still
FAR_BASES = 30


def one_base_changed(ids: torch.Tensor, kmer_start: int, n_kmers: int) -> torch.Tensor:
    """6-mer token ids [n], each with one of its bases changed to another base, both drawn at random."""
    made = single_substitutions(k_of(n_kmers)).to(ids.device)[ids - kmer_start]  # [n, 3k]
    return kmer_start + made.gather(1, torch.randint(0, made.shape[1], (len(ids), 1), device=ids.device)).squeeze(1)


def substituted_rows(rows: torch.Tensor, kmer_start: int, n_kmers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [B, T] each with one base of one 6-mer token in its first half changed to another base, all drawn
    at random, and each row's changed token index ([B]; -1 where the row has no 6-mer there, left as it is)."""
    candidates = is_kmer(rows[:, 1 : rows.shape[1] // 2], kmer_start, n_kmers)
    at = torch.where(candidates, torch.rand(candidates.shape, device=rows.device), -1.0).argmax(1) + 1
    at = torch.where(candidates.any(1), at, -1)
    where = at >= 0
    changed_rows = rows.clone()
    changed_rows[where, at[where]] = one_base_changed(rows[where, at[where]], kmer_start, n_kmers)
    return changed_rows, at


def noisy_context(inputs: torch.Tensor, share: float, kmer_start: int, n_kmers: int) -> torch.Tensor:
    """The inputs [B, T] the model reads with `--context-noise`: each 6-mer token, with probability `share`, one
    base changed at random (an SNV in the context), while the targets it is asked for stay the true ones."""
    hit = is_kmer(inputs, kmer_start, n_kmers) & (torch.rand(inputs.shape, device=inputs.device) < share)
    noisy = inputs.clone()
    noisy[hit] = one_base_changed(inputs[hit], kmer_start, n_kmers)
    return noisy


def far_shift_loss(model, rows: torch.Tensor, hidden: torch.Tensor, head: torch.Tensor, kmer_start: int,
                   n_kmers: int) -> torch.Tensor:
    """How far a substitution reaches: `rows` read again, each with one base changed (`substituted_rows`), and
    the KL divergence of the model's 6-mer distributions from those `hidden` (the unchanged rows' last hidden
    states, held fixed) gives, summed over the 6-mer targets that begin FAR_BASES or more bases past the
    changed base; mean over the rows. The sum, as a variant's score sums its window."""
    changed_rows, at = substituted_rows(rows, kmer_start, n_kmers)
    changed = model.model(input_ids=changed_rows[:, :-1]).last_hidden_state
    k = k_of(n_kmers)
    # input t predicts the 6-mer at t + 1, which begins k * (t + 1) bases in; the change is at most k * at + k - 1
    first_far = at + math.ceil((FAR_BASES + k - 1) / k) - 1
    positions = torch.arange(changed.shape[1], device=rows.device)
    far = (positions >= first_far[:, None]) & (at >= 0)[:, None] & is_kmer(rows[:, 1:], kmer_start, n_kmers)
    if not far.any():
        return torch.zeros((), device=rows.device)
    with torch.no_grad():
        unchanged = torch.log_softmax((hidden[far] @ head.T).float(), dim=-1)
    moved = torch.log_softmax((changed[far] @ head.T).float(), dim=-1)
    return F.kl_div(moved, unchanged, log_target=True, reduction="sum") / len(rows)


class Losses(NamedTuple):
    """One batch's loss terms (each 0 where the batch or the run has nothing for it; fns NaN before its stage)."""
    ce: torch.Tensor
    fns: torch.Tensor
    kl: torch.Tensor
    frame: torch.Tensor
    stop: torch.Tensor
    stop_contrast: torch.Tensor
    splice: torch.Tensor
    splice_bases: torch.Tensor
    splice_contrast: torch.Tensor
    splice_control: torch.Tensor
    coding_kl: torch.Tensor
    splice_probe: torch.Tensor
    far_shift: torch.Tensor


def is_kmer(ids, kmer_start: int, n_kmers: int):
    """Where ids (a tensor or an array) are 6-mer tokens: not tags, pads or <oov>."""
    return (ids >= kmer_start) & (ids < kmer_start + n_kmers)


def kmer_losses(model, rows: torch.Tensor, kmer_start: int, n_kmers: int, teacher=None, with_fns: bool = True,
                probe=None, frames: torch.Tensor | None = None, stops: torch.Tensor | None = None,
                splice_sites: torch.Tensor | None = None, site_probe=None,
                side_weights: dict[str, float] | None = None, far_shift: bool = False,
                context: torch.Tensor | None = None) -> Losses:
    """The batch's Losses: cross-entropy over the k-mers, FNS per-base loss, (with a teacher) KL at k-mer
    targets, (with a probe and the rows' frame labels) the reading-frame loss, (with the in-frame stop
    table) the stop unlikelihood and the coding 6-mers' cross-entropy against their stop-making SNVs, and
    (with the rows' splice-site marks) the cross-entropy of the splice-site 6-mers, the FNS cross-entropy
    of their splice dinucleotide bases and their cross-entropy among their rivals, and (with a splice-site
    probe, the frame labels and the marks) the probe's loss; `side_weights` weighs the splice contrast by the
    side (donor, acceptor) of each site's dinucleotide; with `far_shift`, how far a random substitution in
    half the rows moves the predictions (`far_shift_loss`). `context`, where given, is what the model reads in
    place of the rows' own inputs (`noisy_context`); the teacher and every label read the true rows."""
    inputs, targets = rows[:, :-1], rows[:, 1:]
    read_rows = rows if context is None else torch.cat([context, rows[:, -1:]], 1)  # what the model reads
    hidden = model.model(input_ids=read_rows[:, :-1]).last_hidden_state
    frame = frame_loss(probe, hidden, frames) if probe is not None else torch.zeros((), device=rows.device)
    splice_probe = (splice_probe_loss(site_probe, hidden, frames, splice_sites) if site_probe is not None
                    else torch.zeros((), device=rows.device))
    head = model.get_output_embeddings().weight[kmer_start : kmer_start + n_kmers]
    keep = is_kmer(targets, kmer_start, n_kmers)
    logits = hidden[keep] @ head.T
    kmer = targets[keep] - kmer_start
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    ce = F.nll_loss(logprobs, kmer)
    true_bases = None  # [tokens, k] log-marginal of each token's true base at each place, where FNS needs it
    if with_fns:
        true_bases = true_base_logprobs(logprobs, kmer, k_of(n_kmers))
        fns = -true_bases.mean()
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
    splice = splice_bases = splice_contrast = splice_control = torch.zeros((), device=rows.device)
    if splice_sites is not None:
        marks = splice_sites[:, 1:][keep]
        at_site = marks != 0
        if at_site.any():
            splice = F.nll_loss(logprobs[at_site], kmer[at_site])
            k = k_of(n_kmers)
            is_site_base = marked_bases(marks[at_site], k)
            site_bases = (true_bases[at_site] if true_bases is not None
                          else true_base_logprobs(logprobs[at_site], kmer[at_site], k))
            splice_bases = -site_bases[is_site_base].mean()
            weights = None
            if side_weights:
                sides = splice_side_tokens(targets, splice_sites[:, 1:], kmer_start, n_kmers)
                weights = torch.ones(int(at_site.sum()), device=rows.device)
                for side, weight in side_weights.items():
                    weights[sides[side][keep][at_site]] = weight
            splice_contrast = splice_contrast_loss(logprobs[at_site], kmer[at_site], is_site_base, weights)
            controls, controlled = control_tokens(at_site)
            if controlled.any():
                splice_control = splice_contrast_loss(logprobs[controls], kmer[controls], is_site_base[controlled])
    shifted = len(rows) // 2
    # the substitution is made in what the model read, so that it is the one change between the two reads
    far = (far_shift_loss(model, read_rows[:shifted], hidden[:shifted], head, kmer_start, n_kmers)
           if far_shift and shifted else torch.zeros((), device=rows.device))
    return Losses(ce, fns, kl, frame, stop, stop_contrast, splice, splice_bases, splice_contrast, splice_control,
                  coding_kl, splice_probe, far)


def step_loss(cfg: TrainConfig, terms: Losses, with_fns: bool, with_teacher: bool, with_probe: bool) -> torch.Tensor:
    """The loss a step descends: the data's (cross-entropy, and the FNS per-base loss from its stage), the
    teacher's KL at its share, the probe's frame loss at its share, then each added term at its weight."""
    loss = 0.5 * (terms.ce + terms.fns) if with_fns else terms.ce
    if with_teacher:
        loss = (1 - cfg.distill_weight) * loss + cfg.distill_weight * terms.kl
    if with_probe:
        loss = (1 - cfg.frame_weight) * loss + cfg.frame_weight * terms.frame
    return loss + sum(getattr(cfg, weight) * getattr(terms, term) for term, weight in ADDED_TERMS.items())


# what --protect keeps whole, as Losses fields, tier by tier in the order surgery ranks them: the data's loss; or
# that and the teacher's KL terms; or those and the stop terms, what the stop-gain reading rests on, as one; or
# those two apart ("ordered"), the stop terms bent only where they pull against the first tier
HELD_TERMS = ("ce", "fns", "kl", "coding_kl")
STOP_TERMS = ("stop", "stop_contrast")
KEPT_TIERS = {"data": (("ce", "fns"),), "held": (HELD_TERMS,), "coding": (HELD_TERMS + STOP_TERMS,),
              "ordered": (HELD_TERMS, STOP_TERMS)}
PROTECTED = tuple(KEPT_TIERS)


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


def without_conflict(v: torch.Tensor, above: list[torch.Tensor]) -> torch.Tensor:
    """`v` changed least (in Euclidean length) so that it pulls against none of `above` (its dot product with each
    at least 0): `v` itself where it pulls against none; else the small quadratic programme's solution, v plus a
    non-negative mix of the vectors it is held to, found among the sets of them that bind (one or two here)."""
    if all(v @ g >= 0 for g in above):
        return v
    best = None
    for size in range(1, len(above) + 1):
        for binding in itertools.combinations(above, size):
            held_to = torch.stack(binding)
            mix = torch.linalg.pinv(held_to @ held_to.T) @ -(held_to @ v)
            if (mix < 0).any():
                continue
            u = v + mix @ held_to
            if all(u @ g >= -1e-9 * (g.norm() * v.norm()) for g in above) and (
                    best is None or (u - v).norm() < (best - v).norm()):
                best = u
    return best


def protect_gradient(params: list[torch.Tensor], tiers: list[list[torch.Tensor]]) -> float:
    """Gradient surgery as in PCGrad (Yu et al. 2020), with the kept tiers (`KEPT_TIERS`) the tasks ranked first:
    each parameter's gradient (that of the whole loss) is split into each tier's gradient, in rank order, and the
    rest's (the added terms' and the probe's that no tier keeps, and the teacher's where only the data is kept).
    The first tier is kept whole; each later part, the rest last, is changed least so that it pulls against no
    tier ranked above it (for one tier: where their dot product is below 0, its component along that tier's
    gradient removed). A step then lowers what is ranked lower only in directions that do not raise what is
    ranked higher, to first order, and descends the first tier as its own gradient would. Returns the cosine
    of the first tier's gradient and the rest of the whole's before surgery. (Each tier's gradient comes from a
    forward pass of its own: a compiled decoder's backward does not run twice through one graph.)"""
    for p in params:
        if p.grad is None:  # a parameter the whole loss does not reach
            p.grad = torch.zeros_like(p)
    whole = _flat(p.grad for p in params)
    kept = [_flat(tier) for tier in tiers]
    rest = whole - sum(kept)
    cosine = float(kept[0] @ (whole - kept[0]) / (kept[0].norm() * (whole - kept[0]).norm()).clamp(min=1e-30))
    parts = [*kept[1:], rest]
    bent = [without_conflict(part, kept[: i + 1]) for i, part in enumerate(parts)]
    if any(b is not part for b, part in zip(bent, parts, strict=True)):
        surgered = kept[0] + sum(bent)
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
                    "--coding-distill-weight": cfg.coding_distill_weight,
                    "--splice-probe-weight": cfg.splice_probe_weight}
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
    per_base = {"--splice-base-weight": cfg.splice_base_weight, "--splice-contrast-weight": cfg.splice_contrast_weight,
                "--splice-control-weight": cfg.splice_control_weight}
    marked_terms = {"--splice-weight": cfg.splice_weight, "--splice-probe-weight": cfg.splice_probe_weight}
    if any(marked_terms.values()) or any(per_base.values()):
        flag = next(flag for flag, w in {**marked_terms, **per_base}.items() if w)
        if not (data / "train_splice.npy").exists():
            raise SystemExit(f"{flag} needs {data}/train_splice.npy: rebuild the data with this version")
        splice_sites = torch.from_numpy(np.load(data / "train_splice.npy"))
        if any(per_base.values()) and card.get("splice_marks") != SPLICE_MARKS:  # an older build marks 6-mers only
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
    if cfg.new_layers_only and not cfg.init:
        raise SystemExit("--new-layers-only trains the layers --init-layers adds to an --init model: name one")
    if cfg.init:
        model = LlamaForCausalLM.from_pretrained(cfg.init, dtype=torch.float32)
        have = model.config.num_hidden_layers
        if cfg.new_layers_only and not (cfg.init_layers or 0) > have:
            raise SystemExit(f"--new-layers-only trains the layers --init-layers adds: give more than the {have} "
                             "layers the --init model has")
        if cfg.init_layers:
            model = with_layers(model, cfg.init_layers)
        if cfg.new_layers_only:
            model.requires_grad_(False)
            for at in new_layers(have, cfg.init_layers):
                model.model.layers[at].requires_grad_(True)
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
    trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
    torch.manual_seed(cfg.seed)  # the probes start alike in every run of a seed, --init's included
    if cfg.frame_weight:
        probe = torch.nn.Linear(model.config.hidden_size, FRAME_CLASSES).to(cfg.device)
        trained += list(probe.parameters())
    site_probe = None
    if cfg.splice_probe_weight:  # two outputs: the coming 6-mer holds a splice base; the one just read did
        site_probe = torch.nn.Linear(model.config.hidden_size, 2).to(cfg.device)
        trained += list(site_probe.parameters())
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
        if site_probe is not None:
            site_probe.load_state_dict(state["site_probe"])
        optimizer.load_state_dict(state["optimizer"])
        step, log = state["step"], state["log"]
        torch.set_rng_state(state["rng"])
        print(f"resumed at step {step}")
    elif cfg.init:
        new_probes = [("reading-frame", probe, lambda probe, hidden, index: frame_loss(
                           probe, hidden, frames[index].to(cfg.device))),
                      ("splice-site", site_probe, lambda probe, hidden, index: splice_probe_loss(
                           probe, hidden, frames[index].to(cfg.device), splice_sites[index].to(cfg.device)))]
        for what, new_probe, probe_loss in new_probes:
            if new_probe is not None and (fitted := fit_probe(model, new_probe, rows, n_rows, cfg, probe_loss)):
                print(f"a new {what} probe fitted to the --init model, which stays as it is: loss "
                      f"{fitted[0]:.3f} -> {statistics.mean(fitted[-10:]):.3f} over {len(fitted)} batches",
                      flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    print(f"{cfg.name}: {n_params / 1e6:.2f}M parameters" + (f" ({frozen / 1e6:.2f}M frozen)" if frozen else "")
          + f", {n_rows:,} windows"
          + (f" and {len(rows) - n_rows:,} of {cfg.mix_data} ({cfg.mix_share:.0%} of the draw)" if cfg.mix_data else "")
          + f", {cfg.steps} steps of {cfg.batch} x {rows.shape[1] - 1} tokens", flush=True)
    draw = batch_sampler(cfg, data, n_rows, len(rows) - n_rows)
    began = time.perf_counter()
    first_step, timed_from = step, began  # a budget times this run's own steps (a resumed run's too)
    kmer_start, n_kmers = tokenizer.kmer_start_id, tokenizer.n_kmers
    cosines: list[float] = []  # with --protect: each step's cosine of the first kept tier's gradient and the rest's
    while step < cfg.steps:
        model.train()
        batch_index = draw(step)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg, step)
        with_fns = step >= cfg.fns_from * cfg.steps
        batch_rows = rows[batch_index].to(cfg.device)
        tiers = []  # with --protect: each kept tier's own gradient, from a forward pass of its terms alone
        batch_frames = None if frames is None else frames[batch_index].to(cfg.device)
        context = (noisy_context(batch_rows[:, :-1], cfg.context_noise, kmer_start, n_kmers) if cfg.context_noise
                   else None)
        for names in KEPT_TIERS[cfg.protect] if cfg.protect else ():
            with mixed_precision(cfg):
                kept_terms = kmer_losses(model, batch_rows, kmer_start, n_kmers, teacher if "kl" in names else None,
                                         with_fns, frames=batch_frames, stops=stops if "stop" in names else None,
                                         context=context)
            tiers.append(kept_gradient(part_loss(cfg, kept_terms, names, with_fns, teacher is not None,
                                                 probe is not None), trained))
        with mixed_precision(cfg):
            terms = kmer_losses(
                model, batch_rows, kmer_start, n_kmers, teacher, with_fns, probe, batch_frames, stops,
                None if splice_sites is None else splice_sites[batch_index].to(cfg.device), site_probe,
                cfg.splice_side_weights, cfg.far_shift_weight > 0, context)
        ce, fns, kl, frame = terms.ce, terms.fns, terms.kl, terms.frame
        loss = step_loss(cfg, terms, with_fns, teacher is not None, probe is not None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if tiers:
            cosines.append(protect_gradient(trained, tiers))
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
                  f"/{terms.stop_contrast.item():.4f} among SNVs  splice {terms.splice.item():.4f}"
                  f"/{terms.splice_bases.item():.4f} per base/{terms.splice_contrast.item():.4f} among rivals"
                  f"/{terms.splice_control.item():.4f} at controls/{terms.splice_probe.item():.4f} probe  "
                  + (f"far shift {terms.far_shift.item():.4f}  " if cfg.far_shift_weight else "")
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
                     "train_splice": terms.splice.item() if splice_sites is not None else None,
                     "train_splice_bases": terms.splice_bases.item() if splice_sites is not None else None,
                     "train_splice_contrast": terms.splice_contrast.item() if splice_sites is not None else None,
                     "train_splice_control": terms.splice_control.item() if splice_sites is not None else None,
                     "train_coding_kl": terms.coding_kl.item() if cfg.coding_distill_weight else None,
                     "train_splice_probe": terms.splice_probe.item() if site_probe is not None else None,
                     "train_far_shift": terms.far_shift.item() if cfg.far_shift_weight else None,
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
                        "probe": None if probe is None else probe.state_dict(),
                        "site_probe": None if site_probe is None else site_probe.state_dict()}, checkpoint)
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
    for key in ("name", "data", "init", "init_layers", "new_layers_only", "teacher", "seed", "steps", "lr",
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
    parser.add_argument("--init-layers", type=argument_type(lambda text: whole_number(text, "--init-layers", 1)),
                        help="the --init model with N decoder layers (its embeddings and head kept): fewer keep "
                             "its first N (a draft begun from its target); more grow it by block expansion, layers "
                             "copied with their output projections zeroed, so that it starts computing what it did")
    parser.add_argument("--new-layers-only", action="store_true", default=None,
                        help="with --init-layers growing the --init model: train the new layers alone, every "
                             "weight it had frozen, so that what it knew stays as it was (block expansion)")
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
    added_term(parser, "--splice-weight",
               "weight of the cross-entropy of the 6-mers holding a canonical splice "
               "dinucleotide's base, added to the loss (default 0: none); needs data built with "
               "train_splice.npy")
    added_term(parser, "--splice-base-weight",
               "weight of the FNS cross-entropy of the canonical splice dinucleotides' bases "
               "themselves, added to the loss (default 0: none); needs data built with "
               "train_splice.npy")
    added_term(parser, "--splice-contrast-weight",
               "weight of the cross-entropy of each splice-site 6-mer among the 6-mers that differ "
               "from it at its splice dinucleotide's bases only, added to the loss (default 0: "
               "none); needs data built with train_splice.npy")
    added_term(parser, "--splice-control-weight",
               "weight of the same among-rivals cross-entropy at an ordinary token for each "
               "splice-site 6-mer, the rivals varying the same bases, added to the loss (default 0: "
               "none): it asks for the true bases where no site is, against a liking for GT and AG "
               "the splice terms teach wherever the model cannot tell a site; needs data built with "
               "train_splice.npy")
    added_term(parser, "--splice-probe-weight",
               "weight of a splice-site probe's loss, added to the loss (default 0: none): a linear "
               "probe on the last hidden state reads whether the coming 6-mer, and the one just "
               "read, hold a splice base, so the decoder carries where exons end; needs data built "
               "with train_frames.npy and train_splice.npy")
    added_term(parser, "--far-shift-weight",
               "weight of how far a substitution reaches, added to the loss (default 0: none): half of "
               "each batch's rows read again with one base changed at random, and the KL divergence of "
               "the predictions from the unchanged row's, summed over the tokens 30 or more bases past "
               "the change, so that a variant's score, summed over its window, reads the site and not "
               "small shifts far away")
    parser.add_argument("--context-noise", type=argument_type(lambda text: real_number(text, "--context-noise", 0,
                                                                                        0.5)),
                        help="the share of the 6-mer tokens the model reads with one base changed at random, "
                             "the targets, the teacher and the labels left true (default 0: none), e.g. 0.02: "
                             "SNVs in the context learnt as noise, so that a variant's score, summed over its "
                             "window, is not moved far from the variant")
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
    parser.add_argument("--protect", choices=PROTECTED,
                        help="gradient surgery (PCGrad): where the rest of the loss pulls against what is kept, "
                             "its gradient loses the component along the kept loss's, so that what it teaches costs "
                             "that nothing to first order: 'data', the data's own loss (the teacher's KL among the "
                             "rest), 'held', that and the teacher's KL terms (the added terms and the probe the "
                             "rest), 'coding', those and the stop terms (the splice terms and the probes the "
                             "rest), or 'ordered', 'held' first and the stop terms second, bent only where they pull "
                             "against the first, the rest bent where it pulls against either; a forward and "
                             "backward pass more a step for each kept tier")
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
    if args.init_layers is not None and args.init is None:
        parser.error("--init-layers cuts or grows the --init model: name one with --init")
    for key in ("steps", "init", "init_layers", "new_layers_only", "name", "seed", "lr", "min_lr", "warmup",
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
