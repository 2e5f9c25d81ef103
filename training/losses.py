"""The loss terms a demo model trains with, one registry of the terms added to the loss, and the gradient
surgery that keeps the data's loss whole.

A batch's terms (`Losses`) come from one forward pass (`kmer_losses`): the data's cross-entropy over the
4,096 6-mers and its FNS per-base loss, the KL divergence from a teacher, the reading-frame probe's loss,
and the added terms of `ADDED_TERMS`, each with its weight, its command-line flag and what data it needs.
A new term is one `AddedTerm` here, its field in `Losses` and its value in `kmer_losses`; the trainer's
command line, its data checks and the step's loss read the registry.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

import torch
import torch.nn.functional as F
from Bio.Data.CodonTable import standard_dna_table

from carbon_app.core.dna import BASES, reverse_complement
from carbon_app.inference.marginals import k_of, kmer_digits, kmer_index, log_marginals

from .data import ANTISENSE, FRAME_LABELS, NOT_CODING


@dataclass(frozen=True)
class AddedTerm:
    """A term added to the loss at its own weight (0, the default, leaves it out)."""

    field: str  # its `Losses` field
    weight: str  # its TrainConfig field; the command-line flag is the same with dashes
    needs: tuple[str, ...]  # what a run with it must have: "frames" (train_frames.npy), "splice", "teacher"
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.weight.replace("_", "-")


ADDED_TERMS = (
    AddedTerm("stop", "stop_weight", ("frames",),
              "weight of an unlikelihood term on 6-mers with a stop codon in a labelled coding frame"),
    AddedTerm("stop_contrast", "stop_contrast_weight", ("frames",),
              "weight of the cross-entropy of each coding 6-mer among itself and its single-base substitutions "
              "that hold a stop codon in its labelled frame"),
    AddedTerm("splice_contrast", "splice_contrast_weight", ("splice",),
              "weight of the cross-entropy of each splice-site 6-mer among the 6-mers that differ from it at its "
              "splice dinucleotide's bases only"),
    AddedTerm("coding_kl", "coding_distill_weight", ("teacher", "frames"),
              "weight of the KL divergence from the teacher at the coding tokens alone: it holds what a "
              "stop-gain's score reads while the splice terms move the rest"),
    AddedTerm("kl", "anchor_weight", ("teacher",),
              "weight of the KL divergence from the teacher at every token: the whole distribution held near the "
              "teacher as strongly as the contrast terms pull, where --distill-weight only shares the loss with "
              "the data"),
)
STOP_TERMS = ("stop", "stop_contrast")  # the terms that read the in-frame stop table (`stop_table`)
NEEDS_WORDS = {"frames": "data built with train_frames.npy", "splice": "data built with train_splice.npy",
               "teacher": "--teacher"}


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


def step_loss(cfg, terms: Losses, with_fns: bool, with_teacher: bool, with_probe: bool) -> torch.Tensor:
    """The loss a step descends: the data's (cross-entropy, and the FNS per-base loss from its stage), the
    teacher's KL at its share, the probe's frame loss at its share, then each added term at its weight."""
    loss = 0.5 * (terms.ce + terms.fns) if with_fns else terms.ce
    if with_teacher:
        loss = (1 - cfg.distill_weight) * loss + cfg.distill_weight * terms.kl
    if with_probe:
        loss = (1 - cfg.frame_weight) * loss + cfg.frame_weight * terms.frame
    return loss + sum(getattr(cfg, term.weight) * getattr(terms, term.field) for term in ADDED_TERMS)


# what --protect keeps whole, as Losses fields: "held", the data's loss and the teacher's KL terms
KEPT_TERMS = {"held": ("ce", "fns", "kl", "coding_kl")}


def part_loss(cfg, terms: Losses, names: tuple[str, ...], with_fns: bool, with_teacher: bool,
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
