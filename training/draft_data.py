"""Training rows the target wrote itself, for distilling its draft.

    python -m training.draft_data --teacher runs/carbon-demo/model --out data/draft --rows 8192

A draft pays in speculative decoding where it predicts the target's next 6-mer on the target's own
output, and a target's greedy or low-temperature continuations (repeats, splice motifs, copies of
elements seen in the context) are not what the training windows hold. So, as in sequence-level
distillation, each row here is a training window's first tokens (tags, `<dna>` and real DNA) continued
by the target: half greedily, half sampled at temperature 0.9, in token mode (the k-mer head only).
With `--greedy-only` the sampled half is left out (the same windows, half the rows): a target trained a
few steps on its own greedy rows commits to them, which is what a draft can follow (docs/demo-models.md).
The folder is a training-data folder (`train --data`, or `train --mix-data` beside the source) with the
source's tokenizer, validation windows and data card, and the source's frame, splice and group labels for
each row's real DNA (the written tokens unlabelled); the held-out test windows are neither read nor written.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from .data import FRAME_UNKNOWN, WINDOW_TOKENS
from .losses import is_kmer
from .train import not_a_model

CONTEXT_TOKENS = 96  # the real DNA each row starts from (576 bases), like the 594 bases the evaluation gives
TEMPERATURES = (0.0, 0.9)  # greedy, and the sampling temperature the app's designs start from
# per-token labels the source may hold, and the value of a token they do not describe (one the target wrote)
TOKEN_LABELS = {"train_frames.npy": FRAME_UNKNOWN, "train_splice.npy": 0}


def first_written(dna_at):
    """Where the target's writing starts in a row whose `<dna>` is at `dna_at` (an int or an array)."""
    return dna_at + 1 + CONTEXT_TOKENS


@torch.inference_mode()
def continue_rows(model, rows: torch.Tensor, start: int, kmer_start: int, n_kmers: int, temperature: float,
                  generator: torch.Generator) -> torch.Tensor:
    """`rows` with every position from `start` on written by `model`, one 6-mer at a time (KV cache)."""
    rows = rows.clone()
    out = model(input_ids=rows[:, :start], use_cache=True)
    for position in range(start, rows.shape[1]):
        logits = out.logits[:, -1, kmer_start : kmer_start + n_kmers].float()
        if temperature == 0:
            picks = logits.argmax(-1)
        else:
            picks = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
        rows[:, position] = picks + kmer_start
        if position + 1 < rows.shape[1]:
            out = model(input_ids=rows[:, position : position + 1], past_key_values=out.past_key_values,
                        use_cache=True)
    return rows


def write_target_rows(teacher: Path, source: Path, out: Path, n_rows: int, batch: int = 128, seed: int = 0,
                      device: str = "cpu", greedy_only: bool = False) -> dict:
    """`n_rows` windows drawn from the whole-length training rows of `source` and continued by `teacher`
    (every other one greedily, the rest sampled; with `greedy_only` the greedy ones alone), written with
    the source's tokenizer, validation windows and data card into `out`; returns what it wrote."""
    from transformers import LlamaForCausalLM

    from carbon_app.core.tokens import DnaConfig

    rows = np.load(source / "train_rows.npy")
    dna_at = np.load(source / "train_dna_at.npy")
    dna_config = DnaConfig.from_file(source / "tokenizer" / "dna_config.json")
    kmer_start, n_kmers = dna_config.kmer_start_id, dna_config.n_kmers
    whole = np.flatnonzero(is_kmer(rows, kmer_start, n_kmers).sum(1) == WINDOW_TOKENS)  # no short (padded) windows
    if len(whole) == 0:
        raise SystemExit(f"{source}/train_rows.npy holds no whole-length window to continue")
    model = LlamaForCausalLM.from_pretrained(str(teacher), dtype=torch.float32).to(device).eval()
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.from_numpy(whole)[torch.randperm(len(whole), generator=generator)[:n_rows]].numpy()
    written, written_from = [], []
    began = time.perf_counter()
    temperatures = TEMPERATURES[:1] if greedy_only else TEMPERATURES
    # each temperature takes every len(TEMPERATURES)-th window, so the greedy rows are the same with or without
    # the sampled ones
    shares = [chosen[i :: len(TEMPERATURES)] for i in range(len(temperatures))]
    for temperature, share in zip(temperatures, shares, strict=True):
        for prefix in np.unique(dna_at[share]):  # rows of one tag count start their DNA at one position
            same = share[dna_at[share] == prefix]
            for first in range(0, len(same), batch):
                part = torch.from_numpy(rows[same[first : first + batch]].astype(np.int64)).to(device)
                start = first_written(int(prefix))
                written.append(continue_rows(model, part, start, kmer_start, n_kmers, temperature, generator).cpu())
                written_from.append(same[first : first + batch])
                done = sum(len(w) for w in written)
                print(f"{done:,}/{sum(map(len, shares)):,} rows  {(time.perf_counter() - began) / 60:.1f} min",
                      flush=True)
    out.mkdir(parents=True, exist_ok=True)
    out_rows = torch.cat(written).numpy().astype(rows.dtype)
    written_from = np.concatenate(written_from)
    np.save(out / "train_rows.npy", out_rows)
    np.save(out / "train_dna_at.npy", dna_at[written_from])
    written_part = np.arange(rows.shape[1]) >= first_written(dna_at[written_from])[:, None]
    for name, unlabelled in TOKEN_LABELS.items():
        if (source / name).exists():
            labels = np.load(source / name)[written_from]
            labels[written_part] = unlabelled
            np.save(out / name, labels)
    if (source / "train_groups.npy").exists():
        np.save(out / "train_groups.npy", np.load(source / "train_groups.npy")[written_from])
    shutil.copytree(source / "tokenizer", out / "tokenizer", dirs_exist_ok=True)
    shutil.copy(source / "validation.json", out / "validation.json")
    card = json.loads((source / "data_card.json").read_text())
    card["target_rows"] = {"teacher": str(teacher), "source": str(source), "rows": len(out_rows),
                           "drawn": n_rows, "context_tokens": CONTEXT_TOKENS, "temperatures": list(temperatures),
                           "seed": seed, "minutes": round((time.perf_counter() - began) / 60, 1)}
    (out / "data_card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card["target_rows"]


def argument_parser() -> argparse.ArgumentParser:
    from carbon_app.core.validate import argument_type, whole_number

    parser = argparse.ArgumentParser(prog="python -m training.draft_data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, help="the trained target's model folder")
    parser.add_argument("--data", default="data/demo", help="the training data whose windows start the rows")
    parser.add_argument("--out", required=True, help="the folder to write (a training-data folder)")
    parser.add_argument("--rows", type=argument_type(lambda text: whole_number(text, "--rows", 2)), default=8192)
    parser.add_argument("--batch", type=argument_type(lambda text: whole_number(text, "--batch", 1)), default=128)
    parser.add_argument("--greedy-only", action="store_true",
                        help="write the greedy rows alone (half of --rows), for sharpening the target itself")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    teacher, source = Path(args.teacher), Path(args.data)
    if problem := not_a_model("--teacher", teacher):
        parser.error(problem)
    if not (source / "train_rows.npy").exists():
        parser.error(f"--data {source}: no training data (build it with `python -m training.data`)")
    out = Path(args.out)
    if (out / "data_card.json").exists() and "target_rows" not in json.loads((out / "data_card.json").read_text()):
        parser.error(f"--out {out}: holds training data this command did not write; name another folder")
    print(json.dumps(write_target_rows(teacher, source, out, args.rows, args.batch,
                                       device=args.device, greedy_only=args.greedy_only), indent=1))


if __name__ == "__main__":
    main()
