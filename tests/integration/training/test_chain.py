"""A chain of runs rebuilt in order by one command: each stage made once, a stopped run resumed, an output made
by another command refused, a failing stage stopping the chain with its log; and the shipped chains' commands
well-formed and linked, each stage reading only the data or what an earlier stage makes."""

from __future__ import annotations

import json

import pytest

from tests.training_runs import tiny_chain
from training.chain import Stage, run_chain, state


def test_a_chain_makes_each_stage_once_resumes_a_stopped_run_and_refuses_what_another_command_made(tmp_path, capsys):
    stages = tiny_chain(tmp_path)
    run_chain(stages)
    printed = capsys.readouterr().out
    assert printed.count("to make") == 3 and printed.count("made in") == 3
    onwards = tmp_path / "runs" / "onwards" / "model"
    record = json.loads((onwards / "training.json").read_text())
    assert [run["config"]["name"] for run in record["lineage"]] == ["first"]  # begun from the stage before
    assert record["mix_rows"]["teacher"] == str(tmp_path / "runs" / "first" / "model")
    assert all(stage.log.read_text().startswith("$ python -m training.") for stage in stages)

    weights = (onwards / "model.safetensors").read_bytes()
    run_chain(stages)  # everything made: nothing runs again
    assert capsys.readouterr().out.count(": made") == 3 and (onwards / "model.safetensors").read_bytes() == weights

    first = tmp_path / "runs" / "first" / "model" / "training.json"
    older = json.loads(first.read_text())
    del older["config"]["anchor_weight"]  # a run made before that setting existed, which it ran without
    first.write_text(json.dumps(older))
    assert state(stages[0]) == "made"
    older["config"]["anchor_weight"] = 1.0
    first.write_text(json.dumps(older))
    with pytest.raises(SystemExit, match=r"anchor_weight 1.0 \(this chain: 0.0\)"):
        state(stages[0])
    del older["config"]["anchor_weight"]
    first.write_text(json.dumps(older))

    (onwards / "training.json").unlink()  # as if stopped after its last checkpoint, before it was saved
    assert state(stages[2]) == "part-made"
    run_chain(stages)
    assert "resumed at step 2" in stages[2].log.read_text() and (onwards / "training.json").is_file()
    assert (onwards / "model.safetensors").read_bytes() == weights  # the resumed run saves what it had reached

    reseeded = tiny_chain(tmp_path, first_seed=5)  # the same names, another command for the first stage
    with pytest.raises(SystemExit, match=r"runs/first was made by another command \(seed 0 \(this chain: 5\)\)"):
        run_chain(reseeded)
    assert (onwards / "model.safetensors").read_bytes() == weights  # refused before anything ran
    run_chain(reseeded, list_only=True)  # a listing names the refusal and goes on to the later stages
    listed = capsys.readouterr().out
    assert "[1/3]" in listed and "refused:" in listed and "seed 0 (this chain: 5)" in listed
    assert "[3/3]" in listed and "onwards: made" in listed


def test_a_chain_checks_every_command_first_and_stops_at_a_failing_stage_with_its_log(tmp_path, capsys):
    stages = tiny_chain(tmp_path)
    typo = Stage("train", stages[2].args.replace("--steps 2", "--steps 0"))
    with pytest.raises(SystemExit):
        run_chain([*stages[:2], typo])
    assert "stage 3 of the chain (training.train): error: argument --steps" in capsys.readouterr().err
    assert not stages[0].log.exists()  # the last stage's mistake found before the first ran

    missing = Stage("train", stages[0].args.replace("--name first", f"--name second --init {tmp_path / 'nowhere'}"))
    with pytest.raises(SystemExit) as stopped:
        run_chain([stages[0], missing])
    message = str(stopped.value)
    assert "failed (exit code 1)" in message and f"--init {tmp_path / 'nowhere'}: not a model folder" in message
    assert (tmp_path / "runs" / "first" / "model" / "training.json").is_file()  # the stage before it stays made
    assert state(missing) == "to make"


