"""A chain of runs rebuilt in order by one command: each stage made once, a stopped run resumed, an output made
by another command refused, a failing stage stopping the chain with its log; and the shipped chains' commands
well-formed and linked, each stage reading only the data or what an earlier stage makes."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.training_runs import tiny_chain
from training import chain as chain_module
from training.chain import CHAINS, Stage, state


def test_a_run_stopped_part_way_that_the_chain_did_not_begin_is_not_resumed_by_it(tmp_path):
    stage = tiny_chain(tmp_path)[0]
    stage.folder.mkdir(parents=True)
    (stage.folder / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(SystemExit, match="holds a run stopped part-way that this stage did not begin"):
        state(stage)
    (stage.folder / chain_module.COMMAND_FILE).write_text(stage.command + "\n")
    assert state(stage) == "part-made"


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_each_shipped_chain_is_well_formed_and_reads_only_the_data_or_what_it_made_before(name):
    stages = [Stage(module, text) for module, text in CHAINS[name]]
    made: set[str] = set()
    for number, stage in enumerate(stages, 1):
        chain_module.checked(stage, number)  # flags and values as its module reads them
        words = shlex.split(stage.args)
        for flag in ("--init", "--teacher", "--data", "--mix-data"):
            if flag in words:
                read = words[words.index(flag) + 1]
                # never the installed models: an install replaces them, so a chain begun from them is not rebuilt
                assert read in made or read == "data/demo", (stage, read)
        folder = str(stage.folder)
        assert folder not in {str(Path(m).parent) for m in made} | made, f"{folder} made twice"
        made.add(f"{folder}/model" if stage.module == "train" else folder)
