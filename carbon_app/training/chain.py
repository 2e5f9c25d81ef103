"""Rebuild a chain of runs, each begun from the one before, in order, unattended and resumable.

    python -m carbon_app.training.chain sp10-cont           # make every stage not made yet, in order
    python -m carbon_app.training.chain sp10-cont --list    # each stage's command and whether it is made

A chain is the commands docs/demo-models.md gives for a line of runs, kept here as data so that a fresh
checkout (or a machine with a GPU: each command takes `cuda` when one is present) rebuilds it with one
command instead of several hours of copying commands by hand. Every command is checked before the first
runs, so a mistyped flag in the last stage is found before hours of the first. A stage is made when its
output is there and its record says it was made by the same command: a run's model folder (the config in
its training.json) or a folder of a target's rows (the `target_rows` of its data_card.json). An output
made by another command under the same name is refused by name, not built on. A training run stopped
part-way (the session ended, the machine went back) resumes from its last checkpoint, taken every 200
steps. Each stage writes its output to a log beside its folder (runs/<name>.log); a stage that fails stops
the chain with its log's last lines, and whatever the stages before it made stays.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from . import draft_data, train

# the line of the model installed before the splice line (mammal-stop-2 and its draft), as the README's
# from-scratch commands build it: the start the splice line's chains are kept near and continue from, rebuilt
# here rather than read from assets/models, which holds whatever model is installed now
PREVIOUS = "runs/mammal-stop-2/model"
CHAINS = {
    "mammal-stop-2": [
        ("train", "--preset target"),
        ("train", "--preset target --name frame-probe --init runs/carbon-demo/model --steps 590 --lr 0.001 "
                  "--fns-from 0 --frame-weight 0.3"),
        ("train", "--preset target --name frame-probe-2 --init runs/frame-probe/model --steps 426 --lr 0.0006 "
                  "--fns-from 0 --frame-weight 0.3"),
        ("train", "--preset target --name frame-stop --init runs/frame-probe-2/model --steps 465 --lr 0.0006 "
                  "--fns-from 0 --frame-weight 0.3 --stop-weight 2"),
        ("train", "--preset target --name mammal-stop --init runs/frame-stop/model --teacher runs/frame-stop/model "
                  "--steps 334 --lr 0.0006 --fns-from 0 --frame-weight 0.3 --stop-weight 4 --group-weights mammal=4 "
                  "--distill-weight 0.3"),
        ("train", "--preset target --name mammal-stop-2 --init runs/mammal-stop/model --teacher runs/mammal-stop/model "
                  "--steps 398 --lr 0.0006 --fns-from 0 --frame-weight 0.3 --stop-weight 6 --group-weights mammal=4 "
                  "--distill-weight 0.3"),
        ("train", "--preset draft"),
        ("train", "--preset draft --name draft-frame-stop --init runs/carbon-demo-draft/model "
                  "--teacher runs/frame-stop/model --steps 240 --lr 0.001 --fns-from 0"),
        ("train", "--preset draft --name draft-mammal-stop --init runs/draft-frame-stop/model "
                  "--teacher runs/mammal-stop/model --steps 240 --lr 0.001 --fns-from 0"),
        ("train", "--preset draft --name draft-mammal-stop-2 --init runs/draft-mammal-stop/model "
                  f"--teacher {PREVIOUS} --steps 240 --lr 0.001 --fns-from 0"),
    ],
}
# the splice line's recipe (docs/demo-models.md, "Anchor 3 pushed further"): the previous target's own
# objective with the splice contrast, kept near that target at every token (the anchor)
ANCHORED = (f"--teacher {PREVIOUS} --distill-weight 0.3 --lr 4e-4 --warmup 20 --fns-from 0 "
            "--frame-weight 0.3 --stop-weight 6 --splice-contrast-weight 3 --coding-distill-weight 3 "
            "--group-weights mammal=4 --anchor-weight 3")
# its draft, from the previous one, distilled on the greedy rows of the target that wrote them
SC8_DRAFT = ("--preset draft --data data/greedy-a3cont2 --teacher runs/a3-cont2/model --distill-weight 0.2 "
             "--warmup 20 --fns-from 0 --steps 300")
# the splice contrast pushed to 10 on the sc8 stage's start and batches, its gradient kept off the coding
# terms'; each run of it weighs the splice sites' two sides its own way (--splice-side-weights)
SP10 = ("--stop-contrast-weight 10 --splice-contrast-weight 10 --protect held --mix-data data/greedy-a3cont2 "
        "--mix-share 0.5 --steps 150")

# the splice line's first runs, from the previous target, and the greedy rows of the last of them
SPLICE_START = [
    ("train", f"--name anchor-3 --init {PREVIOUS} {ANCHORED} --stop-contrast-weight 5 --steps 468 --seed 21"),
    ("train", f"--name a3-cont --init runs/anchor-3/model {ANCHORED} --stop-contrast-weight 5 --steps 234 --seed 22"),
    ("train", f"--name a3-cont2 --init runs/a3-cont/model {ANCHORED} --stop-contrast-weight 5 --steps 234 --seed 24"),
    ("draft_data", "--teacher runs/a3-cont2/model --out data/greedy-a3cont2 --rows 8192 --greedy-only"),
]
# the draft every chain of the splice line ends with: it learns from a3-cont2's greedy rows and needs no
# target of the chain's own
SPLICE_DRAFT = [
    ("train", f"--name dr-a3c2 --init runs/draft-mammal-stop-2/model {SC8_DRAFT} --lr 8e-4 --seed 7"),
    ("train", f"--name dr-a3c2b --init runs/dr-a3c2/model {SC8_DRAFT} --lr 5e-4 --seed 8"),
]
SC8 = ("train", f"--name a3c2-gmix-sc8 --init runs/a3-cont2/model {ANCHORED} --stop-contrast-weight 8 "
                "--mix-data data/greedy-a3cont2 --mix-share 0.5 --steps 150 --seed 23")
SC8_SP10 = ("train", f"--name sc8-st10-sp10-ph-a04 --init runs/a3-cont2/model {ANCHORED} {SP10} "
                     "--splice-side-weights donor=1,acceptor=0.4 --seed 23")

# a3c2-gmix-sc8 and its draft dr-a3c2b: (a) 0.860, (b) 0.742 on the test sets, 88.4% draft agreement
CHAINS["sc8"] = [*CHAINS["mammal-stop-2"], *SPLICE_START, SC8, *SPLICE_DRAFT]
# sc8-st10-sp10-ph-a04 (the acceptors at 0.4 of the splice contrast): (a) 0.850, (b) 0.739 on the test sets;
# made before the sc8 stage and the drafts, which it does not need
CHAINS["sc8-sp10"] = [*CHAINS["mammal-stop-2"], *SPLICE_START, SC8_SP10, SC8, *SPLICE_DRAFT]
# sp10-d14-a07-cont, the installed carbon-demo, and its draft dr-a3c2b (carbon-demo-draft): (a) 0.865, (b) 0.765
# on the test sets, 88.1% draft agreement. sc8-st10-sp10-ph-a04 continued on new windows with both sides of the
# splice contrast pushed harder (donors 1.4 and acceptors 0.7 of it), since reading the delta within 6 bases
# left (a) room to trade for (b)
CHAINS["sp10-cont"] = [
    *CHAINS["mammal-stop-2"], *SPLICE_START, SC8_SP10,
    ("train", f"--name sp10-d14-a07-cont --init runs/sc8-st10-sp10-ph-a04/model {ANCHORED} {SP10} "
              "--splice-side-weights donor=1.4,acceptor=0.7 --seed 25"),
    *SPLICE_DRAFT,
]
PARSERS = {"train": train.argument_parser, "draft_data": draft_data.argument_parser}
# where a run was made, not what it is: a GPU's bf16 and compiled kernels make the same run
MACHINE_KEYS = ("device", "bf16_autocast", "compile")
COMMAND_FILE = "chain_command.txt"  # in a run's folder: the command that began it, read before resuming it


@dataclass(frozen=True)
class Stage:
    module: str  # a module of carbon_app.training
    args: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.args)

    @property
    def command(self) -> str:
        return f"python -m carbon_app.training.{self.module} {self.args}"

    @cached_property
    def parsed(self) -> argparse.Namespace:
        """The command's arguments as its module reads them (flags and values only; files are not looked at)."""
        return PARSERS[self.module]().parse_args(self.argv)

    @property
    def output(self) -> Path:
        """What the stage makes: a run's model folder, or the folder of rows written."""
        args = self.parsed
        if self.module == "train":
            return train.model_folder(args.out_root, args.name or train.PRESETS[args.preset]["name"])
        return Path(args.out)

    @property
    def folder(self) -> Path:
        """Where the stage works: a run's folder (its checkpoint and model), or the folder of rows."""
        return self.output.parent if self.module == "train" else self.output

    @property
    def log(self) -> Path:
        return self.folder.with_name(self.folder.name + ".log")


def checked(stage: Stage, number: int) -> None:
    """Refuse a command its module would refuse at once, naming the stage (SystemExit)."""
    parser = PARSERS[stage.module]()
    parser.prog = f"stage {number} of the chain (carbon_app.training.{stage.module})"
    parser.parse_args(stage.argv)


def recorded(stage: Stage) -> tuple[dict, dict] | None:
    """What the stage's output records of the command that made it, beside what this stage's command would
    record; None where the stage has no finished output."""
    record_file = stage.output / ("training.json" if stage.module == "train" else "data_card.json")
    if not record_file.is_file():
        return None
    if stage.module == "train":
        cfg, _ = train.run_config(stage.argv)
        wanted = {key: value for key, value in json.loads(json.dumps(asdict(cfg))).items() if key not in MACHINE_KEYS}
        made = json.loads(record_file.read_text())["config"]
        # a key a record lacks is a setting added after that run was made: every new setting defaults to what
        # runs did before it, so such a run was made with the default
        defaults = json.loads(json.dumps(asdict(train.TrainConfig())))
        return {key: made.get(key, defaults[key]) for key in wanted}, wanted
    args = stage.parsed
    wanted = {"teacher": str(Path(args.teacher)), "source": str(Path(args.data)), "drawn": args.rows,
              "temperatures": list(draft_data.TEMPERATURES[:1] if args.greedy_only else draft_data.TEMPERATURES)}
    made = json.loads(record_file.read_text()).get("target_rows", {})
    return {key: made.get(key) for key in wanted}, wanted


def state(stage: Stage) -> str:
    """"made", "part-made" (a run to resume) or "to make"; SystemExit naming the folder where what is there was
    made by another command."""
    if (record := recorded(stage)) is not None:
        made, wanted = record
        if made != wanted:
            differ = ", ".join(f"{key} {made[key]!r} (this chain: {wanted[key]!r})" for key in wanted
                               if made[key] != wanted[key])
            raise SystemExit(f"{stage.folder} was made by another command ({differ}): move it away, or rebuild "
                             f"it by hand, before this chain builds on it")
        return "made"
    if stage.module == "train" and (stage.folder / "checkpoint.pt").is_file():
        began_by = stage.folder / COMMAND_FILE
        if not began_by.is_file() or began_by.read_text().strip() != stage.command:
            raise SystemExit(f"{stage.folder} holds a run stopped part-way that this stage did not begin: resume it "
                             "by hand (train --resume with its own command) or move it away")
        return "part-made"
    return "to make"


def run_stage(stage: Stage, resume: bool) -> None:
    stage.folder.mkdir(parents=True, exist_ok=True)
    if stage.module == "train":
        (stage.folder / COMMAND_FILE).write_text(stage.command + "\n")
    argv = [sys.executable, "-m", f"carbon_app.training.{stage.module}", *stage.argv, *(["--resume"] if resume else [])]
    with stage.log.open("a") as log:
        log.write(f"$ {stage.command}{' --resume' if resume else ''}\n")
        log.flush()
        finished = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False)
    if finished.returncode != 0 or recorded(stage) is None:
        tail = "\n".join(stage.log.read_text().splitlines()[-12:])
        raise SystemExit(f"{stage.command}\nfailed (exit code {finished.returncode}); the end of {stage.log}:\n{tail}")


def run_chain(stages: list[Stage], list_only: bool = False) -> None:
    for number, stage in enumerate(stages, 1):
        checked(stage, number)
    if list_only:  # a listing shows what a run would refuse, stage by stage, instead of stopping at the first
        for number, stage in enumerate(stages, 1):
            try:
                now = state(stage)
            except SystemExit as refused:
                now = f"refused: {refused}"
            print(f"[{number}/{len(stages)}] {stage.folder}: {now}\n    {stage.command}", flush=True)
        return
    states = [state(stage) for stage in stages]
    for number, (stage, now) in enumerate(zip(stages, states, strict=True), 1):
        print(f"[{number}/{len(stages)}] {stage.folder}: {now}", flush=True)
        if now == "made":
            continue
        began = time.time()
        run_stage(stage, resume=now == "part-made")
        print(f"    made in {(time.time() - began) / 60:.1f} min (log: {stage.log})", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m carbon_app.training.chain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chain", choices=sorted(CHAINS))
    parser.add_argument("--list", action="store_true", help="show each stage's command and state, run nothing")
    args = parser.parse_args(argv)
    run_chain([Stage(module, text) for module, text in CHAINS[args.chain]], list_only=args.list)


if __name__ == "__main__":
    main()
