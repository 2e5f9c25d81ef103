"""Read models side by side on the variant tasks, to choose between them.

    python -m carbon_app.training.compare runs/a/model runs/b/model --part validation

For each model: (a) the AUROC of -delta, stop-gain versus synonymous SNVs,
(b) splice-site versus deep-intronic SNVs, and where the sets hold it (b)
again against deep-intronic SNVs that break the same splice dinucleotide
the same way (where liking GT and AG scores 0.5 and only knowing the site
scores), per group and pooled, read
exactly as the evaluation reads them (`evaluate.model_delta`: the app's
score, a 1,200-base window, both strands, every frame). The validation sets
(the default) come from the genes of each record's validation part, so a
choice made on them (a merge's weight, which run to continue) leaves the
test sets the cards report unread; `--part test` reads those, for a figure
to report, not to choose by. The (c) share and recovery are the full
evaluation's (`evaluate.py`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from .evaluate import load_float32, model_delta, variant_signal
from .train import not_a_model

# the readings and their labels: (a), (b), and (b) against the matched deep-intronic SNVs where the sets hold them
LABELS = {"coding": "(a)", "splice": "(b)", "splice_matched": "(b) same"}


def read_model(model_dir: Path, variant_sets: dict[str, list[dict]], device: str = "cpu") -> dict[str, dict]:
    """{"coding": {group: auroc, ..., "all": auroc}, "splice": {...}[, "splice_matched": {...}]} of one model
    on these sets."""
    with torch.inference_mode():
        signal = variant_signal(model_delta(load_float32(model_dir, device)),
                                {task: variant_sets[task] for task in LABELS if variant_sets.get(task)},
                                with_random=False)
    return {reading: signal[reading]["auroc"] for reading in LABELS if reading in signal}


def table(readings: dict[str, dict[str, dict]]) -> str:
    """One row per model and task, one column per group, pooled last."""
    groups = sorted({g for reading in readings.values() for task in reading for g in reading[task]} - {"all"})
    lines = [f"{'model':40s} {'task':8s} " + " ".join(f"{g:>12s}" for g in [*groups, "all"])]
    for model, reading in readings.items():
        for task in reading:
            cells = [f"{reading[task][g]:12.3f}" if g in reading[task] else f"{'-':>12s}" for g in [*groups, "all"]]
            lines.append(f"{model[-40:]:40s} {LABELS[task]:8s} " + " ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m carbon_app.training.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model folders")
    parser.add_argument("--part", choices=("validation", "test"), default="validation")
    parser.add_argument("--data", type=Path, default=Path("data/demo"))
    parser.add_argument("--json", type=Path, help="also write the readings here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    for folder in args.models:
        if problem := not_a_model("model", folder):
            parser.error(problem)
    sets_file = args.data / f"{args.part}_variants.json"
    if not sets_file.is_file():
        parser.error(f"--data {args.data}: no {sets_file.name} (the data command writes it: "
                     f"python -m carbon_app.training.data --out {args.data})")
    variant_sets = json.loads(sets_file.read_text())
    readings = {}
    for folder in args.models:
        began = time.time()
        readings[folder] = read_model(Path(folder), variant_sets, args.device)
        print(f"read {folder} in {(time.time() - began) / 60:.1f} min", flush=True)
        if args.json:  # after each model, so that a long comparison stopped part-way keeps what it read
            args.json.write_text(json.dumps({"part": args.part, "readings": readings}, indent=1) + "\n")
    print(f"{args.part} variant sets, AUROC of -delta")
    print(table(readings))


if __name__ == "__main__":
    main()
