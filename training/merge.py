"""Average the weights of two trained demo models: a merge, no training.

    python -m training.merge --name mix --base assets/models/carbon-demo \\
        --other runs/ssc10/model --weight 0.75

Each weight of the result is (1 - weight) x base + weight x other, taken in
float32 and saved in the base's precision. Two models continued from one
start (here the installed model and a run trained on from it) lie close
enough in weight space for their average to be a model in its own right,
and often one that keeps what each end learnt better than either run's own
trade between its objectives did. Both must have the same shape, tokenizer
and tags. The result is a model folder like a run's (`runs/<name>/model`),
whose `training.json` records the merge and both parents' lineages, so it
can be evaluated, continued from (`train --init`) or installed like a run.
Choose the weight on the validation variant sets (`compare.py`), never on
the test sets the cards report.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from carbon_app.core.validate import argument_type, real_number
from carbon_app.errors import InputError
from carbon_app.model.hub import ROLE_FILE

from .train import model_folder, not_a_model, training_lineage

WEIGHTS = "model.safetensors"
# files that must agree between the parents for their average to be one model
SAME_IN_BOTH = ("config.json", "dna_config.json", "tokenizer.json", "tag_scheme.json")


def mismatch(base: Path, other: Path) -> str | None:
    """Why two model folders cannot be averaged, or None when they can."""
    for name in (WEIGHTS, *SAME_IN_BOTH):
        missing = [str(folder) for folder in (base, other) if not (folder / name).is_file()]
        if missing:
            return f"{', '.join(missing)}: no {name}"
    for name in SAME_IN_BOTH:
        if json.loads((base / name).read_text()) != json.loads((other / name).read_text()):
            return f"the two models differ in {name}: only models of one shape, tokenizer and tags can be averaged"
    return None


def averaged(base: dict[str, torch.Tensor], other: dict[str, torch.Tensor], weight: float) -> dict[str, torch.Tensor]:
    """(1 - weight) x base + weight x other, tensor by tensor, in float32, returned in the base's dtypes."""
    if base.keys() != other.keys():
        raise InputError(f"the two models hold different tensors ({sorted(base.keys() ^ other.keys())[:3]} ...)")
    out = {}
    for name, tensor in base.items():
        if tensor.shape != other[name].shape:
            raise InputError(f"tensor {name}: shape {tuple(tensor.shape)} in one model, "
                             f"{tuple(other[name].shape)} in the other")
        mixed = torch.lerp(tensor.float(), other[name].float(), weight)
        out[name] = mixed.to(tensor.dtype)
    return out


def merge(base: Path, other: Path, weight: float, name: str, out_root: str = "runs") -> Path:
    """Write the averaged model to `runs/<name>/model` (under `out_root`) and return that folder."""
    if problem := mismatch(base, other):
        raise InputError(problem)
    out = model_folder(out_root, name)
    if out.resolve() in (base.resolve(), other.resolve()):  # before any weights are read: a refusal costs nothing
        raise InputError(f"--name {name}: {out} is one of the models being averaged")
    weights = averaged(load_file(base / WEIGHTS), load_file(other / WEIGHTS), weight)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(base, out, ignore=shutil.ignore_patterns(WEIGHTS, "training.json", "eval.json", "README.md",
                                                                ROLE_FILE))
    save_file(weights, out / WEIGHTS, metadata={"format": "pt"})
    base_training = json.loads((base / "training.json").read_text()) if (base / "training.json").is_file() else {}
    config = {"preset": "merge", "name": name, "out_root": out_root, "base": str(base), "other": str(other),
              "weight": weight}
    record = {"config": config, "parameters": sum(t.numel() for t in weights.values()), "log": [],
              "parents": {"base": training_lineage(base), "other": training_lineage(other)},
              "data_card": base_training.get("data_card", {})}
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    return out


def merge_command(config: dict, base: str, other: str) -> str:
    """The command that makes a merge of this config from the `base` and `other` folders."""
    out_root = "" if config["out_root"] == "runs" else f" --out-root {config['out_root']}"
    return (f"python -m training.merge --name {config['name']} --base {base} --other {other} "
            f"--weight {config['weight']:g}{out_root}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.merge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="the merge's name (its folder under --out-root)")
    parser.add_argument("--base", required=True, help="the model folder taken at weight 0")
    parser.add_argument("--other", required=True, help="the model folder taken at weight 1")
    parser.add_argument("--weight", required=True, help="the other model's share, from 0 to 1",
                        type=argument_type(lambda text: real_number(text, "--weight", 0, 1)))
    parser.add_argument("--out-root", default="runs")
    args = parser.parse_args(argv)
    for flag, folder in (("--base", args.base), ("--other", args.other)):
        if problem := not_a_model(flag, folder):
            parser.error(problem)
    try:
        out = merge(Path(args.base), Path(args.other), args.weight, args.name, args.out_root)
    except InputError as error:
        parser.error(str(error))
    print(f"saved {out}: (1 - {args.weight:g}) x {args.base} + {args.weight:g} x {args.other}")


if __name__ == "__main__":
    main()
