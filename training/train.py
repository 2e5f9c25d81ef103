"""Train a demo Carbon model: the Carbon recipe in miniature, one readable loop.

    python -m training.train --preset target
    python -m training.train --preset draft      # distilled from the trained target

A Llama decoder over the demo tokenizer, trained on the windows of
`training.data` with cross-entropy over the 4,096 6-mers, then, for
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
the model manager loads exactly like a Carbon checkpoint. The terms themselves,
and the registry the flags are made from, are in `losses.py`; the recipes of the
installed models, in `recipes/` (run by `chain.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from carbon_app.core.tokens import DnaConfig
from carbon_app.core.validate import argument_type, real_number, whole_number

from .data import FRAME_LABEL_RULE, GROUPS, SPLICE_MARKS, named_shares, trained_tag_scheme
from .losses import (
    ADDED_TERMS,
    FRAME_CLASSES,
    KEPT_TERMS,
    NEEDS_WORDS,
    SPLICE_SIDES,
    STOP_TERMS,
    frame_loss,
    is_kmer,
    kept_gradient,
    kmer_losses,
    part_loss,
    protect_gradient,
    step_loss,
    stop_table,
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
                         "this version (python -m training.draft_data)")
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

    from carbon_app.core.tokens import CarbonTokenizer

    if cfg.bf16_autocast is None:
        cfg = replace(cfg, bf16_autocast=native_bf16(cfg.device))
    data = Path(cfg.data)
    if not (data / "train_rows.npy").exists() or not (data / "tokenizer").is_dir():
        raise SystemExit(f"no training data in {data}: build it first with "
                         f"`python -m training.data --out {data}`")
    for flag, folder in (("--init", cfg.init), ("--teacher", cfg.teacher)):
        if problem := not_a_model(flag, folder):
            raise SystemExit(problem)
    text = PreTrainedTokenizerFast.from_pretrained(str(data / "tokenizer"))
    dna_config = DnaConfig.from_file(data / "tokenizer" / "dna_config.json")
    tokenizer = CarbonTokenizer(dna_config, text)
    rows = torch.from_numpy(np.load(data / "train_rows.npy").astype(np.int64))
    card = json.loads((data / "data_card.json").read_text())
    frames = probe = stops = None
    asked = [term for term in ADDED_TERMS if getattr(cfg, term.weight)]  # the added terms this run trains with
    framed = (["--frame-weight"] if cfg.frame_weight else []) + [t.flag for t in asked if "frames" in t.needs]
    if framed:
        flag = framed[0]
        if not (data / "train_frames.npy").exists():
            raise SystemExit(f"{flag} needs {data}/train_frames.npy: rebuild the data with this version")
        if card.get("frame_labels") != FRAME_LABEL_RULE:  # older builds framed 6-mers leaving the CDS
            raise SystemExit(f"{flag}: {data}/train_frames.npy gives a frame to 6-mers that leave the CDS "
                             "(into an intron, past the stop codon): rebuild the data with this version")
        frames = torch.from_numpy(np.load(data / "train_frames.npy"))
        if int(frames.max()) >= FRAME_CLASSES:
            raise SystemExit(f"{data}/train_frames.npy has labels this version does not know: rebuild the data")
    if any(term.field in STOP_TERMS for term in asked):
        stops = stop_table(tokenizer.k).to(cfg.device)
    splice_sites = None
    if spliced := [t.flag for t in asked if "splice" in t.needs]:
        flag = spliced[0]
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
    words = ["python -m training.train", f"--preset {preset}"]
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


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__,
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
    for term in ADDED_TERMS:  # a number from 0 (the default: none) to 10
        needs = " and ".join(NEEDS_WORDS[need] for need in term.needs)
        parser.add_argument(term.flag, type=argument_type(lambda text, flag=term.flag: real_number(text, flag, 0, 10)),
                            help=f"{term.help}, added to the loss (default 0: none); needs {needs}")
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
                     "`python -m training.draft_data`)")
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
