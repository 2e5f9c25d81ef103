"""Merging two trained models by weight averaging, and reading models side by side on variant sets."""

from __future__ import annotations

import json
import random
import shlex
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import random_dna
from tests.training_runs import coding_gene, tiny_training_data
from training import merge as merge_module
from training.data import Record
from training.train import TrainConfig, train, training_lineage
from training.variant_sets import variant_sets


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A tiny model trained from scratch and one continued from it: the shape of a merge's two parents."""
    tmp_path = tmp_path_factory.mktemp("merge")
    data, _ = tiny_training_data(tmp_path)
    cfg = TrainConfig(name="start", data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2,
                      kv_heads=1, ffn=64, steps=3, batch=2, warmup=1, eval_every=3, compile=False)
    start = train(cfg)
    onwards = train(replace(cfg, name="onwards", init=str(start), lr=1e-2))
    return tmp_path, cfg, start, onwards


def test_a_merge_is_the_weighted_average_of_its_parents_and_says_so(two_runs):
    from carbon_app.model.bundle import load_bundle

    tmp_path, _, start, onwards = two_runs
    out_root = str(tmp_path / "merges")
    merged = merge_module.merge(start, onwards, 0.25, "quarter", out_root)
    a, b, mixed = (load_file(folder / "model.safetensors") for folder in (start, onwards, merged))
    assert mixed.keys() == a.keys()
    moved = 0
    for name, tensor in mixed.items():
        assert tensor.dtype == a[name].dtype == torch.float16  # saved in the base's precision
        # a quarter of the way from the base to the other, to half precision
        assert torch.allclose(tensor.float(), 0.75 * a[name].float() + 0.25 * b[name].float(), rtol=1e-3, atol=1e-4)
        far = (a[name].float() - b[name].float()).abs() > 1e-2
        if far.any():
            moved += 1
            assert not torch.allclose(tensor.float()[far], 0.25 * a[name].float()[far] + 0.75 * b[name].float()[far],
                                      rtol=1e-3, atol=1e-4)
    assert moved > 0  # the continued run did move the weights, and the merge lies between, nearer the base
    assert torch.equal(load_file(merge_module.merge(start, onwards, 0.0, "none", out_root)
                                 / "model.safetensors")["model.norm.weight"], a["model.norm.weight"])
    bundle = load_bundle(str(merged))  # a model folder like a run's, tokenizer and tags included
    assert list(bundle.tags.species) == list(load_bundle(str(start)).tags.species)
    record = json.loads((merged / "training.json").read_text())
    assert record["config"] == {"preset": "merge", "name": "quarter", "out_root": out_root, "base": str(start),
                                "other": str(onwards), "weight": 0.25}
    assert [r["config"]["name"] for r in record["parents"]["base"]] == ["start"]
    assert [r["config"]["name"] for r in record["parents"]["other"]] == ["start", "onwards"]


def test_a_run_continued_from_a_merge_rebuilds_from_commands_that_give_the_same_merge(two_runs, monkeypatch):
    from training import train as train_module
    from training.evaluate import lineage_commands

    tmp_path, cfg, start, onwards = two_runs
    merged = merge_module.merge(start, onwards, 0.5, "half", str(tmp_path / "runs"))
    after = train(replace(cfg, name="after", init=str(merged), steps=2, eval_every=2))
    lineage = training_lineage(after)
    assert [r["config"]["name"] for r in lineage] == ["half", "after"]
    commands = lineage_commands(lineage)
    # each parent's runs once (the start they share too), then the merge of their outputs, then the run after
    assert [shlex.split(c)[2] for c in commands] == ["training.train"] * 2 + [
        "training.merge", "training.train"]
    assert commands[2] == (f"python -m training.merge --name half --base {start} --other {onwards} "
                           f"--weight 0.5 --out-root {tmp_path / 'runs'}")
    assert f" --init {merged} " in commands[3]
    before = (merged / "model.safetensors").read_bytes()
    (merged / "model.safetensors").unlink()
    merge_module.main(shlex.split(commands[2])[3:])  # the written command makes the same merge again
    assert (merged / "model.safetensors").read_bytes() == before
    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    train_module.main(shlex.split(commands[3])[3:] + ["--out-root", str(tmp_path / "runs")])
    assert seen[0].init == str(merged) and seen[0].steps == 2


@pytest.mark.parametrize(("change", "problem"), [
    ({"weight": "1.5"}, "--weight must be"),
    ({"weight": "half"}, "--weight must be a number"),
    ({"other": "nowhere"}, "--other nowhere: not a model folder"),
    ({"name": "start"}, "is one of the models being averaged"),
    ({"other": "wider"}, "the two models differ in config.json"),
])
def test_a_merge_that_cannot_be_made_is_refused_by_name(two_runs, capsys, change, problem):
    tmp_path, cfg, start, onwards = two_runs
    runs = tmp_path / "runs"
    if change.get("other") == "wider" and not (runs / "wider").exists():
        train(replace(cfg, name="wider", hidden=64, ffn=128))
    args = {"name": "m", "base": str(start), "other": str(onwards), "weight": "0.5", **change}
    if args["other"] == "wider":
        args["other"] = str(runs / "wider" / "model")
    argv = [f"--{key}={value}" for key, value in args.items()] + ["--out-root", str(runs)]
    with pytest.raises(SystemExit):
        merge_module.main(argv)
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err
    assert (start / "model.safetensors").is_file()  # a refused merge touches neither parent


def test_compare_reads_each_model_on_the_validation_sets_and_names_missing_ones(two_runs, tmp_path, capsys):
    from training import compare

    _, _, start, onwards = two_runs
    genome, gene = coding_gene(1)
    record = Record("r", genome, "plant", "cress", "test", [gene], held_out=True)
    data = tmp_path / "data"
    data.mkdir()
    (data / "validation_variants.json").write_text(json.dumps(variant_sets([record], random.Random(1))))
    out = tmp_path / "read.json"
    compare.main([str(start), str(onwards), "--data", str(data), "--json", str(out)])
    printed = capsys.readouterr().out
    readings = json.loads(out.read_text())
    assert readings["part"] == "validation" and list(readings["readings"]) == [str(start), str(onwards)]
    for reading in readings["readings"].values():
        assert set(reading) == {"coding", "splice", "splice_matched"} and 0 <= reading["coding"]["all"] <= 1
        assert set(reading["splice"]) == {"plant", "all"} == set(reading["splice_matched"])
    assert printed.count("(a)") == 2 and printed.count("(b) ") == 4 and printed.count("(b) same") == 2
    older = {task: sets for task, sets in json.loads((data / "validation_variants.json").read_text()).items()
             if task != "splice_matched"}  # sets written before the matched reading: (a) and (b) alone
    (data / "validation_variants.json").write_text(json.dumps(older))
    compare.main([str(start), "--data", str(data), "--json", str(out)])
    assert set(json.loads(out.read_text())["readings"][str(start)]) == {"coding", "splice"}
    assert "(b) same" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        compare.main([str(start), "--part", "test", "--data", str(data)])
    assert "no test_variants.json" in capsys.readouterr().err
    # each radius read from the same scores: the whole window's reading is the plain one, as read above
    compare.main([str(start), "--data", str(data), "--delta-radii", "6,whole", "--json", str(out)])
    reading = json.loads(out.read_text())["readings"][str(start)]
    assert set(reading) == {"coding", "splice", "coding within 6", "splice within 6"}
    assert reading["coding"] == readings["readings"][str(start)]["coding"]
    assert reading["coding within 6"] != reading["coding"] or reading["splice within 6"] != reading["splice"]
    assert "(a) ±6" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        compare.main([str(start), "--data", str(data), "--delta-radii", "6,far"])
    assert "'far' is not a radius" in capsys.readouterr().err


def test_compare_reads_recovery_beside_the_markov_baseline_and_names_what_it_lacks(two_runs, tmp_path, capsys):
    """`--recovery`: each model's greedy recovery on the part's windows, beside the Markov model of the training
    windows at the order that recovers best on the validation windows. Windows cut from the training windows
    themselves are what a high-order Markov model has by heart, so that baseline must recover nearly all of them."""
    import shutil

    from training import compare
    from training.data import WINDOW

    fixture_root, _, start, onwards = two_runs
    trained = fixture_root / "data"
    data = tmp_path / "data"
    shutil.copytree(trained / "tokenizer", data / "tokenizer")
    for name in ("train_rows.npy", "train_dna_at.npy"):
        shutil.copy(trained / name, data / name)
    genome, gene = coding_gene(1)
    record = Record("r", genome, "plant", "cress", "test", [gene], held_out=True)
    (data / "validation_variants.json").write_text(json.dumps(variant_sets([record], random.Random(1))))
    # the fixture's training windows are random_dna(WINDOW, i) for i in 0..5 (tests/unit/training/test_training.py)
    windows = [{"seq": random_dna(WINDOW, i)[:624], "group": group} for i, group in enumerate(["plant", "prokaryote"])]
    (data / "validation.json").write_text(json.dumps(windows))
    out = tmp_path / "read.json"
    compare.main([str(start), str(onwards), "--data", str(data), "--recovery", "--json", str(out)])
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    baseline = written["markov_baseline"]
    assert baseline["order"] >= 6 and baseline["recovery"]["all"] >= 0.9
    for reading in written["readings"].values():
        assert set(reading) == {"coding", "splice", "splice_matched", "recovery"}
        assert set(reading["recovery"]) == {"plant", "prokaryote", "all"}
        # one window a group: a share of its 30 bases
        assert all(float(30 * reading["recovery"][g]).is_integer() for g in ("plant", "prokaryote"))
    assert printed.count("recovery") == 4 and f"Markov order {baseline['order']}" in printed
    (data / "train_rows.npy").unlink()
    with pytest.raises(SystemExit):
        compare.main([str(start), "--data", str(data), "--recovery"])
    assert "no train_rows.npy" in capsys.readouterr().err
    compare.main([str(start), "--data", str(data)])  # without --recovery the training rows are not needed
    assert "recovery" not in capsys.readouterr().out
