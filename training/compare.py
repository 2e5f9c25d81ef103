"""Read models side by side on the variant tasks, to choose between them.

    python -m training.compare runs/a/model runs/b/model --part validation

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
to report, not to choose by. `--recovery` adds each model's greedy sequence
recovery on the part's windows (bp mode, no tag), beside the Markov baseline
whose order recovers best on the validation windows, as the evaluation reads
them both. `--delta-radii 6,12,whole` reads each delta summed within each of those
radii of its variant as well (bases either side; "whole": the whole window,
the default), from the same forward passes, to choose the radius a model's
card names (`evaluate --delta-radius`). The (c) share is the full evaluation's
(`evaluate.py`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from carbon_app.errors import InputError
from carbon_app.inference.spec import parse_delta_radius

from .evaluate import (
    VARIANT_METHOD,
    MarkovModel,
    load_float32,
    markov_predictor,
    markov_recovery_by_order,
    model_deltas,
    model_recovery,
    recovery,
    training_bases,
    variant_signal,
)
from .train import not_a_model

# the variant readings and their labels: (a), (b), and (b) against the matched deep-intronic SNVs where the sets
# hold them; then recovery, read where asked for
VARIANT_LABELS = {"coding": "(a)", "splice": "(b)", "splice_matched": "(b) same"}
LABELS = {**VARIANT_LABELS, "recovery": "recovery"}


def reading_key(task: str, delta_radius: int | None) -> str:
    """Where a task's reading is kept: its name over the whole window, "<task> within <radius>" else."""
    return task if delta_radius is None else f"{task} within {delta_radius}"


def label(key: str) -> str:
    task, _, delta_radius = key.partition(" within ")
    return LABELS[task] + (f" ±{delta_radius}" if delta_radius else "")


def read_model(model_dir: Path, variant_sets: dict[str, list[dict]], device: str = "cpu",
               windows: list[dict] | None = None, radii: tuple[int | None, ...] = (None,)) -> dict[str, dict]:
    """{"coding": {group: auroc, ..., "all": auroc}, "splice": {...}[, "splice_matched": {...}]} of one model
    on these sets (under `reading_key` for each of `radii`), and {"recovery": {group: share of bases, ...,
    "all": ...}} on `windows` where given."""
    with torch.inference_mode():
        bundle = load_float32(model_dir, device)
        deltas = model_deltas(bundle, tuple((VARIANT_METHOD, delta_radius) for delta_radius in radii))
        task_sets = {task: variant_sets[task] for task in VARIANT_LABELS if variant_sets.get(task)}
        reading = {}
        for delta_radius in radii:
            signal = variant_signal(deltas[VARIANT_METHOD, delta_radius], task_sets, with_random=False)
            reading.update({reading_key(task, delta_radius): signal[task]["auroc"] for task in VARIANT_LABELS
                            if task in signal})
        if windows is not None:
            reading["recovery"] = model_recovery(bundle, windows, with_species=False)
    return reading


def markov_baseline(data: Path, windows: list[dict]) -> dict:
    """{"order": k, "recovery": {group: share, ..., "all": ...}} on `windows` of the Markov model of the training
    windows whose order recovers best on the validation windows (the evaluation's baseline)."""
    markov = MarkovModel(training_bases(data))
    by_order = markov_recovery_by_order(markov, json.loads((data / "validation.json").read_text()))
    order = max(by_order, key=by_order.get)
    return {"order": order, "recovery": recovery(windows, markov_predictor(markov, order))}


def table(readings: dict[str, dict[str, dict]]) -> str:
    """One row per model and task, one column per group, pooled last."""
    groups = sorted({g for reading in readings.values() for task in reading for g in reading[task]} - {"all"})
    lines = [f"{'model':40s} {'task':8s} " + " ".join(f"{g:>12s}" for g in [*groups, "all"])]
    for model, reading in readings.items():
        for task in reading:
            cells = [f"{reading[task][g]:12.3f}" if g in reading[task] else f"{'-':>12s}" for g in [*groups, "all"]]
            lines.append(f"{model[-40:]:40s} {label(task):8s} " + " ".join(cells))
    return "\n".join(lines)


def radii_list(text: str) -> tuple[int | None, ...]:
    """"6,12,whole" -> (6, 12, None), for argparse."""
    try:
        return tuple(dict.fromkeys(parse_delta_radius(item) for item in text.split(",")))
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model folders")
    parser.add_argument("--part", choices=("validation", "test"), default="validation")
    parser.add_argument("--data", type=Path, default=Path("data/demo"))
    parser.add_argument("--recovery", action="store_true",
                        help="also read greedy sequence recovery on the part's windows, beside the Markov baseline")
    parser.add_argument("--delta-radii", type=radii_list, default=(None,),
                        help="comma-separated radii (bases either side of each variant) to sum its delta within, "
                             "\"whole\" for the whole window (the default)")
    parser.add_argument("--json", type=Path, help="also write the readings here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    for folder in args.models:
        if problem := not_a_model("model", folder):
            parser.error(problem)
    sets_file, windows_file = args.data / f"{args.part}_variants.json", args.data / f"{args.part}.json"
    needed = [sets_file]
    if args.recovery:
        needed += [windows_file, args.data / "validation.json", args.data / "train_rows.npy"]
    for file in dict.fromkeys(needed):
        if not file.is_file():
            parser.error(f"--data {args.data}: no {file.name} (the data command writes it: "
                         f"python -m training.data --out {args.data})")
    variant_sets = json.loads(sets_file.read_text())
    written = {"part": args.part}
    windows = None
    if args.recovery:
        windows = json.loads(windows_file.read_text())
        print("fitting the Markov baseline on the training windows", flush=True)
        written["markov_baseline"] = markov_baseline(args.data, windows)
    readings = written["readings"] = {}
    for folder in args.models:
        began = time.time()
        readings[folder] = read_model(Path(folder), variant_sets, args.device, windows, args.delta_radii)
        print(f"read {folder} in {(time.time() - began) / 60:.1f} min", flush=True)
        if args.json:  # after each model, so that a long comparison stopped part-way keeps what it read
            args.json.write_text(json.dumps(written, indent=1) + "\n")
    print(f"{args.part} variant sets, AUROC of -delta" + (", and recovery (share of bases)" if windows else ""))
    baseline = written.get("markov_baseline")
    print(table(readings if baseline is None else
                {**readings, f"Markov order {baseline['order']}": {"recovery": baseline["recovery"]}}))


if __name__ == "__main__":
    main()
