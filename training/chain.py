"""Rebuild a chain of runs, each begun from the one before, in order, unattended and resumable.

    python -m training.chain sp10-cont           # make every stage not made yet, in order
    python -m training.chain sp10-cont --list    # each stage's command and whether it is made

A chain is the commands docs/demo-models.md gives for a line of runs, kept as data (one recipe file a line,
`recipes/*.toml`: sp10-cont.toml builds the installed models) so that a fresh
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
import tomllib
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from . import draft_data, train

#: The recipes, one file a line of runs (`recipes/<name>.toml`): its stages in order, each a module of
#: training and its arguments; `begins_with` names a recipe whose stages come first; `installs`
#: names what of it is installed (docs/demo-models.md, "Rebuilding").
RECIPES = Path(__file__).with_name("recipes")


def read_recipe(name: str) -> list[tuple[str, str]]:
    """The stages of recipe `name`, those of the recipe it begins with first."""
    try:
        recipe = tomllib.loads((RECIPES / f"{name}.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"recipe {name}: {exc}") from None
    before = read_recipe(recipe["begins_with"]) if recipe.get("begins_with") else []
    return before + [(stage["module"], stage["args"]) for stage in recipe["stage"]]


CHAINS = {path.stem: read_recipe(path.stem) for path in sorted(RECIPES.glob("*.toml"))}
PARSERS = {"train": train.argument_parser, "draft_data": draft_data.argument_parser}
# where a run was made, not what it is: a GPU's bf16 and compiled kernels make the same run
MACHINE_KEYS = ("device", "bf16_autocast", "compile")
COMMAND_FILE = "chain_command.txt"  # in a run's folder: the command that began it, read before resuming it


@dataclass(frozen=True)
class Stage:
    module: str  # a module of training
    args: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.args)

    @property
    def command(self) -> str:
        return f"python -m training.{self.module} {self.args}"

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
    parser.prog = f"stage {number} of the chain (training.{stage.module})"
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
    argv = [sys.executable, "-m", f"training.{stage.module}", *stage.argv, *(["--resume"] if resume else [])]
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
    parser = argparse.ArgumentParser(prog="python -m training.chain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chain", choices=sorted(CHAINS))
    parser.add_argument("--list", action="store_true", help="show each stage's command and state, run nothing")
    args = parser.parse_args(argv)
    run_chain([Stage(module, text) for module, text in CHAINS[args.chain]], list_only=args.list)


if __name__ == "__main__":
    main()
