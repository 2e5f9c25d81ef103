"""The demo-model pipeline on small real objects: labels, splits, template mix, training, Markov baseline."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import random_dna
from tests.training_runs import coding_gene, tiny_training_data
from training import data as demo_data
from training.annotation import Transcript
from training.data import (
    WINDOW,
    Record,
    write_dataset,
)


@pytest.mark.integration  # trains a model
def test_evaluate_names_what_a_draft_only_measurement_lacks(tmp_path, capsys):
    from training.evaluate import main as evaluate_main

    saved = tmp_path / "eval.json"
    saved.write_text(json.dumps({"target": {}}))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for argv, named in ((["--measure-draft", "--draft", str(model)], "--measure-draft needs --results"),
                        (["--measure-draft", "--results", str(saved)], "and --draft"),
                        (["--results", str(saved)], "not the results of an evaluation (no markov"),
                        (["--draft", str(tmp_path / "nope")], f"--draft {tmp_path / 'nope'}: not a model folder")):
        with pytest.raises(SystemExit) as exit_info:
            evaluate_main(["--target", str(model), *argv])
        assert exit_info.value.code == 2 and named in capsys.readouterr().err


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.integration  # trains a model
def test_protected_gradients_keep_the_datas_descent_whole_and_change_nothing_where_nothing_conflicts(compiled):
    """--protect: where the rest of the loss pulls against the data's, the step's gradient still descends
    the data's loss as the data's own gradient would (their dot product is the data gradient's squared norm);
    where nothing conflicts, it is the plain gradient of the loss. Through a compiled decoder too."""
    from training.losses import kept_gradient, kmer_losses, protect_gradient
    from training.train import TrainConfig, build_model

    rows = torch.randint(20, 20 + 4096, (3, 24), generator=torch.Generator().manual_seed(4))
    model = build_model(TrainConfig(hidden=32, layers=1, heads=2, kv_heads=1, ffn=64), 4124, 0)
    if compiled:
        model.model.compile()
    params = list(model.parameters())

    def flat(grads):
        return torch.cat([g.reshape(-1) for g in grads])

    def protected(rest):
        """The gradient of ce + rest(terms) after surgery, and the cosine it reports."""
        g_data = kept_gradient(kmer_losses(model, rows, 20, 4096).ce, params)
        model.zero_grad(set_to_none=True)
        terms = kmer_losses(model, rows, 20, 4096)
        (terms.ce + rest(terms)).backward()
        plain = flat(p.grad.clone() for p in params)
        cosine = protect_gradient(params, g_data)
        return flat(g_data), plain, flat(p.grad for p in params), cosine

    g_data, plain, after, cosine = protected(lambda terms: -3 * terms.ce)  # the rest straight against the data
    assert cosine == pytest.approx(-1, abs=1e-4)
    assert torch.allclose(after, g_data, atol=1e-6)  # its pull against the data's gradient removed, all of it
    g_data, plain, after, cosine = protected(lambda terms: 4 * terms.fns - 2 * terms.ce)  # partly against
    assert cosine < 0 and not torch.allclose(after, plain, atol=1e-4)
    assert torch.dot(after, g_data).item() == pytest.approx(torch.dot(g_data, g_data).item(), rel=1e-4)
    rest = after - g_data  # what is left of the rest is free of the data's direction
    assert abs(torch.dot(rest, g_data).item()) < 1e-4 * torch.dot(g_data, g_data).item()
    g_data, plain, after, cosine = protected(lambda terms: 2 * terms.ce)  # nothing against: the plain gradient
    assert cosine == pytest.approx(1, abs=1e-4) and torch.equal(after, plain)


@pytest.mark.integration  # trains a model
def test_training_loop_saves_a_model_the_manager_loads(tmp_path, monkeypatch):
    from carbon_app.inference.generate import generate
    from carbon_app.model.bundle import load_bundle
    from training.train import TrainConfig, train

    data, tokenizer = tiny_training_data(tmp_path)
    cfg = TrainConfig(name="tiny", data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2,
                      kv_heads=1, ffn=64, steps=4, batch=2, warmup=1, eval_every=2, compile=False)
    out = train(cfg)
    log = json.loads((out / "training.json").read_text())["log"]
    assert [entry["step"] for entry in log] == [2, 4]
    # a budget far too short for 500 steps: cut once the speed is measured (step 30), schedule and record too
    hurried = train(replace(cfg, name="hurried", steps=500, eval_every=100, minutes=1e-4))
    record = json.loads((hurried / "training.json").read_text())
    assert record["config"]["steps"] == 31 and [entry["step"] for entry in record["log"]] == [31]
    bundle = load_bundle(str(out))
    assert bundle.tokenizer.kmer_start_id == tokenizer.kmer_start_id
    assert list(bundle.tags.species) == ["plant"] and list(bundle.tags.regions) == ["trna"]  # what it saw
    result = generate(bundle, "ACGTAC", 20, species="plant", region="trna", seed=1)
    assert result.prompt_text == "<plant_species><transfer_rna><dna>ACGTAC" and len(result.sequences[0]) == 20


@pytest.mark.integration  # trains a model
def test_rows_the_target_wrote_are_its_own_greedy_and_seeded_choices_and_train_a_draft(tmp_path, monkeypatch,
                                                                                         capsys):
    """draft_data: each row keeps its training window's tags, `<dna>` and first 96 6-mers, then holds the
    target's continuation (greedy rows: its argmax at every position, read back without a cache), labelled as
    its window where the DNA is real and unlabelled where the target wrote it; the seed fixes the sampled rows;
    the folder trains a draft, or mixes into a target's data at a share; a folder without whole-length windows
    is named."""
    from transformers import LlamaForCausalLM

    from training import draft_data
    from training.evaluate import lineage_commands
    from training.train import PRESETS, TrainConfig, train, training_lineage

    data, tokenizer = tiny_training_data(tmp_path)
    target_dir = train(TrainConfig(name="target", data=str(data), out_root=str(tmp_path / "runs"), hidden=32,
                                   layers=2, heads=2, kv_heads=1, ffn=64, steps=2, batch=2, warmup=1, eval_every=2,
                                   compile=False))
    monkeypatch.setattr(draft_data, "CONTEXT_TOKENS", 200)  # fewer steps to write: 52 per row
    written = draft_data.write_target_rows(target_dir, data, tmp_path / "draft-data", n_rows=4, batch=3)
    assert written["rows"] == 4
    rows = np.load(tmp_path / "draft-data" / "train_rows.npy")
    dna_at = np.load(tmp_path / "draft-data" / "train_dna_at.npy")
    source = np.load(data / "train_rows.npy")
    start = dna_at + 1 + 200
    for row, at in zip(rows, start, strict=True):  # each row begins as one of the training windows
        assert any(np.array_equal(row[:at], s[:at]) for s in source)
    assert ((rows >= tokenizer.kmer_start_id) & (rows < tokenizer.kmer_start_id + 4**6))[:, 3:].all()
    model = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(rows[:2].astype(np.int64))).logits  # the first half: greedy
    kmers = logits[..., tokenizer.kmer_start_id : tokenizer.kmer_start_id + 4**6]
    for i, at in enumerate(start[:2]):
        chosen = kmers[i, at - 1 : -1].argmax(-1) + tokenizer.kmer_start_id
        assert torch.equal(chosen, torch.from_numpy(rows[i, at:].astype(np.int64)))
    with torch.no_grad():  # the second half is sampled: not the greedy choice throughout
        logits = model(input_ids=torch.from_numpy(rows[2:].astype(np.int64))).logits
    kmers = logits[..., tokenizer.kmer_start_id : tokenizer.kmer_start_id + 4**6]
    greedy = [kmers[i, at - 1 : -1].argmax(-1) + tokenizer.kmer_start_id for i, at in enumerate(start[2:])]
    assert not all(torch.equal(g, torch.from_numpy(rows[2 + i, at:].astype(np.int64)))
                   for i, (g, at) in enumerate(zip(greedy, start[2:], strict=True)))
    for row, at in zip(rows, dna_at, strict=True):
        assert row[at] == tokenizer.open_id  # each row's `<dna>` where its dna_at says
    draft_data.write_target_rows(target_dir, data, tmp_path / "again", n_rows=4, batch=3)
    assert np.array_equal(np.load(tmp_path / "again" / "train_rows.npy"), rows)  # seeded sampling
    labels = np.random.default_rng(0)
    frames, splice = labels.integers(-1, 7, source.shape, dtype=np.int8), labels.integers(0, 4, source.shape,
                                                                                          dtype=np.int8)
    np.save(data / "train_frames.npy", frames)
    np.save(data / "train_splice.npy", splice)
    np.save(data / "train_groups.npy", np.arange(len(source), dtype=np.int8))  # a row's group names the row here
    card = json.loads((data / "data_card.json").read_text())
    (data / "data_card.json").write_text(json.dumps({**card, "frame_labels": demo_data.FRAME_LABEL_RULE}))
    greedy = tmp_path / "greedy"
    greedy_only = draft_data.write_target_rows(target_dir, data, greedy, n_rows=4, batch=3, greedy_only=True)
    assert (greedy_only["rows"], greedy_only["drawn"], greedy_only["temperatures"]) == (2, 4, [0.0])
    assert np.array_equal(np.load(greedy / "train_rows.npy"), rows[:2])  # the greedy half, alone
    for row, at, window, row_frames, row_splice in zip(
            rows[:2], start[:2], np.load(greedy / "train_groups.npy"), np.load(greedy / "train_frames.npy"),
            np.load(greedy / "train_splice.npy"), strict=True):
        assert np.array_equal(row[:at], source[window, :at])  # the group names the window the row began as
        assert np.array_equal(row_frames[:at], frames[window, :at]) and (row_frames[at:] == -1).all()
        assert np.array_equal(row_splice[:at], splice[window, :at]) and (row_splice[at:] == 0).all()
    mixed = TrainConfig(name="sharpened", data=str(data), mix_data=str(greedy), mix_share=0.5, frame_weight=0.1,
                        init=str(target_dir), out_root=str(tmp_path / "runs"), hidden=32, layers=2, heads=2,
                        kv_heads=1, ffn=64, steps=1, batch=2, warmup=1, eval_every=2, compile=False)
    sharpened = train(mixed)
    assert f"6 windows and 2 of {greedy} (50% of the draw)" in capsys.readouterr().out
    commands = lineage_commands(training_lineage(sharpened))  # the mixed-in rows' command, then the run's
    assert commands[-2] == (f"python -m training.draft_data --teacher {target_dir} --data {data} "
                            f"--out {greedy} --rows 4 --greedy-only")
    assert f"--frame-weight 0.1 --mix-data {greedy} --mix-share 0.5" in commands[-1]
    (greedy / "train_frames.npy").unlink()  # a folder written before its rows had labels
    with pytest.raises(SystemExit, match=f"--mix-data {greedy}: no train_frames.npy, which this loss reads"):
        train(mixed)
    with pytest.raises(SystemExit, match="not training data with the --data folder's tokenizer"):
        train(replace(mixed, mix_data=str(tmp_path)))
    cfg = replace(replace(TrainConfig(), **PRESETS["draft"]), data=str(tmp_path / "draft-data"),
                  out_root=str(tmp_path / "runs"), teacher=str(target_dir), hidden=32, layers=1, heads=2,
                  kv_heads=1, ffn=64, steps=2, batch=2, warmup=1, eval_every=2, compile=False)
    draft_dir = train(cfg)
    card = json.loads((draft_dir / "training.json").read_text())["data_card"]
    assert card["target_rows"]["teacher"] == str(target_dir)
    commands = lineage_commands(training_lineage(draft_dir))  # the data command, then the run that read it
    assert commands[0] == (f"python -m training.draft_data --teacher {target_dir} --data {data} "
                           f"--out {tmp_path / 'draft-data'} --rows 4")
    assert f"--data {tmp_path / 'draft-data'} --teacher {target_dir}" in commands[1]
    again = train(replace(cfg, name="draft-again", init=str(draft_dir), steps=1))  # the same rows read again
    assert lineage_commands(training_lineage(again))[:-1] == commands  # not written twice
    with pytest.raises(SystemExit):  # the real training data is never written over
        draft_data.main(["--teacher", str(target_dir), "--data", str(data), "--out", str(data)])
    assert np.array_equal(np.load(data / "train_rows.npy"), source)
    assert "holds training data this command did not write" in capsys.readouterr().err
    np.save(data / "train_rows.npy", source[:, :100])  # no window long enough
    with pytest.raises(SystemExit, match="no whole-length window"):
        draft_data.write_target_rows(target_dir, data, tmp_path / "none", n_rows=4)


@pytest.mark.integration  # trains a model
def test_a_reading_frame_probe_trains_the_decoder_and_stays_out_of_the_saved_model(tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    from training.train import TrainConfig, train

    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 30 * WINDOW for g in demo_data.GROUPS})
    genome, gene = coding_gene(1)
    cress = Transcript("p", "p", 1, [(1000, 1600), (2000, 2600)], [(1100, 1600), (2000, 2501)], "protein_coding")
    records = [Record("held", genome, "mammal", "Homo sapiens", "test", [gene], held_out=True),
               Record("cress", random_dna(40_000, 5), "plant", "Arabidopsis thaliana", "test", [cress])]
    data = tmp_path / "data"
    card = write_dataset(data, records)
    assert card["train_token_frames"]["codon place 1"] > 0 and card["train_token_frames"]["not coding"] > 0
    cfg = TrainConfig(data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2, kv_heads=1,
                      ffn=64, steps=3, batch=4, warmup=1, eval_every=3, compile=False)
    plain = load_file(train(cfg) / "model.safetensors")
    probed_dir = train(replace(cfg, name="probed", frame_weight=0.5))
    probed = load_file(probed_dir / "model.safetensors")
    assert probed.keys() == plain.keys()  # a plain Llama decoder: the probe is not saved
    assert any(not torch.equal(probed[k], plain[k]) for k in plain)  # its loss reached the decoder
    log = json.loads((probed_dir / "training.json").read_text())["log"]
    assert 0 < log[-1]["train_frame"] < 2 and log[-1]["train_loss"] != log[-1]["train_ce"]
    # continued with a probe: a new one is fitted first to the model as it is, which that leaves unchanged
    from training import train as train_module

    fits = []
    real_fit = train_module.fit_probe

    def watched_fit(model, probe, *args):
        before = {k: v.clone() for k, v in model.state_dict().items()}
        losses = real_fit(model, probe, *args)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
        fits.append(losses)
        return losses

    monkeypatch.setattr(train_module, "fit_probe", watched_fit)
    capsys.readouterr()
    train(replace(cfg, name="probed-more", init=str(probed_dir), frame_weight=0.5))
    assert len(fits) == 1 and 10 <= len(fits[0]) <= train_module.PROBE_FIT_STEPS  # batches with a frame label
    assert np.mean(fits[0][-10:]) < np.mean(fits[0][:10]) - 0.1  # it learnt (these batches are 4 windows)
    assert "a new reading-frame probe fitted to the --init model" in capsys.readouterr().out
    train(replace(cfg, name="plain-more", init=str(probed_dir)))  # no probe: nothing to fit
    assert len(fits) == 1
    stopped_dir = train(replace(cfg, name="stopped", stop_weight=1.0))
    stopped = load_file(stopped_dir / "model.safetensors")
    assert any(not torch.equal(stopped[k], plain[k]) for k in plain)  # the stop term reached the decoder
    log = json.loads((stopped_dir / "training.json").read_text())["log"]
    assert 0 < log[-1]["train_stop"] < 1 and log[-1]["train_loss"] > log[-1]["train_ce"]
    assert card["train_splice_site_tokens"] > 0
    with pytest.raises(SystemExit, match="no training data in .*training.data --out"):
        train(replace(cfg, data=str(tmp_path / "elsewhere")))
    for field, flag in (("init", "--init"), ("teacher", "--teacher")):  # named, not looked for on the hub
        with pytest.raises(SystemExit, match=f"{flag} .*nowhere: not a model folder"):
            train(replace(cfg, **{field: str(tmp_path / "nowhere")}, distill_weight=0.5))
    spliced_plain = load_file(train(replace(cfg, name="spliced-plain", batch=16)) / "model.safetensors")
    # the splice contrast: the splice 6-mers among the 6-mers that differ at their splice bases only
    contrast_dir = train(replace(cfg, name="spliced-contrast", splice_contrast_weight=1.0, batch=16))
    contrast = load_file(contrast_dir / "model.safetensors")
    assert any(not torch.equal(contrast[k], spliced_plain[k]) for k in plain)
    log = json.loads((contrast_dir / "training.json").read_text())["log"]
    assert 0 < log[-1]["train_splice_contrast"] < math.log(16)  # 16 rivals at most: below chance among them
    # weighed by side: the run's side weights reach the contrast (here every site is called a donor, weighed 0)
    from training import losses

    told = losses.splice_side_tokens
    monkeypatch.setattr(losses, "splice_side_tokens",
                        lambda targets, marks, *_: {"donor": marks != 0, "acceptor": torch.zeros_like(marks).bool()})
    sided_dir = train(replace(cfg, name="spliced-sided", splice_contrast_weight=1.0,
                              splice_side_weights={"donor": 0.0}, batch=16))
    monkeypatch.setattr(losses, "splice_side_tokens", told)
    log = json.loads((sided_dir / "training.json").read_text())["log"]
    assert log[-1]["train_splice_contrast"] == 0
    # protected: each step's gradient goes through the surgery, with the kept loss's gradient of that batch
    surgeries = []

    def watched_surgery(params, kept):
        assert [g.shape for g in kept] == [p.shape for p in params]
        cosine = real_surgery(params, kept)
        surgeries.append(cosine)
        return cosine

    real_surgery = train_module.protect_gradient
    monkeypatch.setattr(train_module, "protect_gradient", watched_surgery)
    capsys.readouterr()
    protected_dir = train(replace(cfg, name="spliced-protected", protect="held", splice_contrast_weight=1.0,
                                  batch=16))
    record = json.loads((protected_dir / "training.json").read_text())
    assert len(surgeries) == cfg.steps and all(-1 <= c <= 1 for c in surgeries)
    assert record["config"]["protect"] == "held" and "held/rest gradient cosine" in capsys.readouterr().out
    assert record["log"][-1]["steps_protected"] == sum(c < 0 for c in surgeries)
    # the kept pass reads the data and the teacher alone: the stop and splice terms' weights do not reach it
    kept = {}

    def kept_gradient_of(params, kept_grads):
        kept[stop_weight] = torch.cat([g.reshape(-1) for g in kept_grads])
        return 0.0

    monkeypatch.setattr(train_module, "protect_gradient", kept_gradient_of)
    for stop_weight in (1.0, 0.0):
        train(replace(cfg, name=f"kept-{stop_weight}", protect="held", stop_weight=stop_weight,
                      stop_contrast_weight=stop_weight, splice_contrast_weight=1.0, batch=16, steps=1))
    assert torch.allclose(kept[1.0], kept[0.0], rtol=0, atol=1e-7) and kept[1.0].abs().sum() > 0
    card_text = (data / "data_card.json").read_text()
    (data / "data_card.json").write_text(card_text.replace('"splice_marks"', '"older_marks"'))
    with pytest.raises(SystemExit, match="--splice-contrast-weight needs .*each splice base"):
        train(replace(cfg, name="old-marks", splice_contrast_weight=1.0))
    (data / "data_card.json").write_text(card_text.replace('"frame_labels"', '"older_labels"'))
    for field, flag in (("frame_weight", "--frame-weight"), ("stop_weight", "--stop-weight")):
        with pytest.raises(SystemExit, match=f"{flag}: .*leave the CDS .*rebuild the data"):
            train(replace(cfg, name="old-labels", **{field: 0.5}))
    (data / "data_card.json").write_text(card_text)
    (data / "train_splice.npy").unlink()
    with pytest.raises(SystemExit, match="train_splice.npy"):
        train(replace(cfg, name="no-marks", splice_contrast_weight=1.0))
    (data / "train_frames.npy").unlink()
    with pytest.raises(SystemExit, match="train_frames.npy"):
        train(replace(cfg, name="no-labels", frame_weight=0.5))


@pytest.mark.integration  # trains a model
def test_the_command_line_overrides_a_presets_shape_and_batch(monkeypatch, capsys):
    from training import train as train_module

    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    train_module.main(["--preset", "target", "--batch", "256", "--hidden", "384", "--layers", "10", "--ffn", "1024",
                       "--heads", "6", "--kv-heads", "2", "--warmup", "20", "--device", "cpu"])
    train_module.main(["--preset", "draft", "--device", "cpu"])
    big, draft = seen
    assert (big.batch, big.hidden, big.layers, big.ffn, big.name) == (256, 384, 10, 1024, "carbon-demo")
    assert (big.heads, big.kv_heads, big.warmup) == (6, 2, 20) and big.steps == 2800  # the rest stays the preset's
    assert draft.warmup == 150
    assert (draft.hidden, draft.layers, draft.batch) == (128, 2, 32)
    for flag, value, problem in (("--batch", "0", "--batch must be at least 1, not 0"),
                                 ("--hidden", "2.5", "--hidden must be a whole number, not 2.5"),
                                 ("--minutes", "-1", "--minutes must be above 0, not -1"),
                                 ("--minutes", "nan", "--minutes must be above 0, not nan"),
                                 ("--minutes", "soon", "--minutes must be a number, not 'soon'"),
                                 ("--steps", "0", "--steps must be at least 1, not 0"),
                                 ("--warmup", "-5", "--warmup must be at least 0, not -5"),
                                 ("--warmup", "2800", "--warmup 2800 leaves no steps after the warm-up"),
                                 ("--lr", "0", "--lr must be above 0 and at most 1, not 0"),
                                 ("--lr", "inf", "--lr must be above 0 and at most 1, not inf"),
                                 ("--fns-from", "1.5", "--fns-from must be between 0 and 1, not 1.5"),
                                 ("--distill-weight", "0.9", "a target's --teacher and --distill-weight go together"),
                                 ("--teacher", "runs/x", "a target's --teacher and --distill-weight go together"),
                                 ("--coding-distill-weight", "1", "--coding-distill-weight holds the coding tokens "
                                                                  "near a teacher: name it with --teacher"),
                                 ("--coding-distill-weight", "-1", "--coding-distill-weight must be between 0 and 10"),
                                 ("--anchor-weight", "2", "--anchor-weight holds every token near a teacher: "
                                                          "name it with --teacher"),
                                 ("--anchor-weight", "11", "--anchor-weight must be between 0 and 10"),
                                 ("--seed", "-1", "--seed must be between 0 and 2,147,483,647, not -1"),
                                 ("--min-lr", "-0.5", "--min-lr must be between 0 and 1, not -0.5"),
                                 ("--min-lr", "0.01", "would rise from --lr 0.002 to the cosine's end at 0.01"),
                                 ("--splice-side-weights", "donor=0.5", "--splice-side-weights weighs the splice "
                                                                        "contrast: give --splice-contrast-weight too"),
                                 ("--splice-side-weights", "exon=1", "unknown side 'exon' in --splice-side-weights: "
                                                                     "use donor, acceptor"),
                                 ("--protect", "ordered", "invalid choice: 'ordered' (choose from 'held')")):
        with pytest.raises(SystemExit):
            train_module.main([flag, value])
        assert problem in capsys.readouterr().err and len(seen) == 2  # named, and nothing started


@pytest.mark.integration  # trains a model
def test_a_run_can_cool_its_learning_rate_towards_zero_and_its_rebuild_command_says_so(monkeypatch):
    from dataclasses import asdict

    from training import train as train_module

    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    train_module.main(["--lr", "1e-4", "--min-lr", "1e-6", "--warmup", "5", "--steps", "100", "--device", "cpu"])
    cooled = seen[0]
    schedule = [train_module.learning_rate(cooled, step) for step in range(100)]
    assert schedule[4] == pytest.approx(1e-4) and schedule[5] == pytest.approx(1e-4)  # warmed up, the peak
    assert all(a >= b for a, b in itertools.pairwise(schedule[5:])) and schedule[-1] < 1.1e-6
    default = replace(cooled, min_lr=train_module.TrainConfig().min_lr)  # 1e-4: the old end, flat at this peak
    assert all(train_module.learning_rate(default, step) == pytest.approx(1e-4) for step in range(5, 100))
    assert "--lr 0.0001 --min-lr 1e-06 --warmup 5" in train_module.train_command(asdict(cooled), None)
    sided = train_module.run_config(["--splice-contrast-weight", "3", "--splice-side-weights", "donor=0.5"])[0]
    assert sided.splice_side_weights == {"donor": 0.5}
    command = train_module.train_command(asdict(sided), None)
    assert "--splice-contrast-weight 3 --splice-side-weights donor=0.5" in command


@pytest.mark.integration  # trains a model
def test_group_weights_draw_a_groups_rows_that_much_more_often_and_the_same_on_resume(tmp_path, capsys):
    from training import train as train_module
    from training.train import TrainConfig, batch_sampler

    groups = np.array([demo_data.GROUPS.index("mammal")] * 100 + [demo_data.GROUPS.index("plant")] * 300,
                      dtype=np.int8)
    np.save(tmp_path / "train_groups.npy", groups)
    cfg = TrainConfig(batch=16, group_weights={"mammal": 3.0})
    draw = batch_sampler(cfg, tmp_path, len(groups))
    drawn = torch.cat([draw(step) for step in range(400)])
    assert all(len(set(draw(step).tolist())) == 16 for step in range(20))  # no row twice in a batch
    assert (drawn < 100).float().mean().item() == pytest.approx(0.5, abs=0.02)  # 100 x 3 against 300 x 1
    assert torch.equal(batch_sampler(cfg, tmp_path, len(groups))(7), draw(7))  # a resumed run draws the same
    assert not torch.equal(batch_sampler(replace(cfg, seed=1), tmp_path, len(groups))(7), draw(7))  # a new seed, new
    plain = batch_sampler(replace(cfg, group_weights=None), tmp_path, len(groups))
    assert sorted(torch.cat([plain(step) for step in range(25)]).tolist()) == list(range(400))  # epochs
    assert not torch.equal(batch_sampler(replace(cfg, group_weights=None, seed=1), tmp_path, len(groups))(0), plain(0))
    assert torch.equal(batch_sampler(replace(cfg, group_weights={"mammal": 0.0}), tmp_path, len(groups))(3).lt(100),
                       torch.zeros(16, dtype=torch.bool))  # a weight of 0 leaves the group out
    for weights, problem in (({"mammal": 0.0, "plant": 0.0}, "fewer rows to draw than a batch"),):
        with pytest.raises(SystemExit, match=problem):
            batch_sampler(replace(cfg, group_weights=weights), tmp_path, len(groups))
    with pytest.raises(SystemExit, match="does not match train_rows.npy"):
        batch_sampler(cfg, tmp_path, 401)
    mix = tmp_path / "mix"  # 100 rows more, all mammal, drawn as a quarter of each batch whatever their number
    mix.mkdir()
    np.save(mix / "train_groups.npy", groups[:100])
    mixed = replace(cfg, group_weights=None, mix_data=str(mix), mix_share=0.25)
    drawn = torch.cat([batch_sampler(mixed, tmp_path, len(groups), 100)(step) for step in range(400)])
    assert (drawn >= 400).float().mean().item() == pytest.approx(0.25, abs=0.02)
    assert (drawn < 100).float().mean().item() == pytest.approx(0.75 * 0.25, abs=0.02)  # the rest alike
    drawn = torch.cat([batch_sampler(replace(mixed, group_weights={"mammal": 3.0}), tmp_path, len(groups),
                                     100)(step) for step in range(400)])  # the weights hold within --data
    assert (drawn < 100).float().mean().item() == pytest.approx(0.75 * 0.5, abs=0.02)
    assert (drawn >= 400).float().mean().item() == pytest.approx(0.25, abs=0.02)
    (tmp_path / "train_groups.npy").unlink()
    with pytest.raises(SystemExit, match="train_groups.npy: rebuild the data"):
        batch_sampler(cfg, tmp_path, len(groups))
    for text, problem in (("primate=2", "unknown group 'primate' in --group-weights: use mammal, vertebrate"),
                          ("mammal", "--group-weights needs group=share, got 'mammal'"),
                          ("mammal=-1", "the --group-weights share of mammal must be at least 0, not -1")):
        with pytest.raises(SystemExit):
            train_module.main(["--group-weights", text])
        assert problem in capsys.readouterr().err
    for words, problem in ((["--mix-data", str(mix)], "--mix-data and --mix-share go together"),
                           (["--mix-share", "0.3"], "--mix-data and --mix-share go together"),
                           (["--mix-data", str(mix), "--mix-share", "0"], "--mix-share must be above 0"),
                           (["--mix-data", str(mix), "--mix-share", "0.3"], f"--mix-data {mix}: no training data")):
        with pytest.raises(SystemExit):
            train_module.main(words)
        assert problem in capsys.readouterr().err


def test_a_compiled_decoder_gives_the_eager_losses_and_gradients():
    """`TrainConfig.compile` fuses kernels in place; the numbers and parameter names stay the eager ones."""
    from training.losses import kmer_losses
    from training.train import TrainConfig, build_model

    cfg = TrainConfig(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128)
    rows = torch.randint(20, 20 + 4096, (3, 40), generator=torch.Generator().manual_seed(0))
    eager, compiled = build_model(cfg, 4124, 0), build_model(cfg, 4124, 0)
    names = list(compiled.state_dict())
    compiled.model.compile()
    results = []
    for model in (eager, compiled):
        ce, fns, *_ = kmer_losses(model, rows, 20, 4096)
        (ce + fns).backward()
        results.append((ce.item(), fns.item(), model.model.layers[0].mlp.up_proj.weight.grad.clone()))
    assert list(compiled.state_dict()) == names
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-4)
    assert results[0][1] == pytest.approx(results[1][1], abs=1e-4)
    assert torch.allclose(results[0][2], results[1][2], atol=1e-5)


@pytest.mark.integration  # trains a model
def test_a_continued_model_keeps_how_it_was_made_and_each_command_gives_back_its_run(tmp_path, monkeypatch):
    """The lineage follows `--init` through the runs' training.json files, and survives its parents'
    folders once recorded; the command written for each run, read by the trainer's own command line,
    gives back that run's settings."""
    import shlex
    import shutil
    from dataclasses import asdict

    from training import train as train_module
    from training.evaluate import lineage_commands, run_teachers, runs_in_order
    from training.train import PRESETS, TrainConfig, training_lineage

    def run(name, init, preset="target", **settings):
        folder = tmp_path / name / "model"
        folder.mkdir(parents=True)
        cfg = replace(replace(TrainConfig(), **PRESETS[preset]), name=name, init=init, out_root=str(tmp_path),
                      **settings)
        log = [{"minutes": 1.0, "val_bits_per_base": 1.9}]
        (folder / "training.json").write_text(json.dumps({"config": asdict(cfg), "parameters": 1, "log": log}))
        return folder

    scratch = run("carbon-demo", None)
    probe = run("probe", str(scratch), steps=590, lr=1e-3, fns_from=0.0, frame_weight=0.3)
    stop = run("stop", str(probe), steps=465, lr=6e-4, warmup=20, fns_from=0.0, frame_weight=0.3, stop_weight=2.0,
               group_weights={"mammal": 3.0, "vertebrate": 0.5})
    kept = run("kept", str(stop), seed=1, steps=300, lr=6e-4, fns_from=0.0, splice_contrast_weight=0.5,
               teacher=str(stop),
               distill_weight=0.5)  # a target kept near the model it continues, drawing new batches
    draft = run("draft", None, preset="draft", steps=240, teacher=str(kept), heads=2, kv_heads=1, distill_weight=0.9)
    lineage = training_lineage(kept)
    assert [r["config"]["name"] for r in lineage] == ["carbon-demo", "probe", "stop", "kept"]
    assert training_lineage(draft)[0]["config"]["teacher"] == str(kept)

    seen = []
    monkeypatch.setattr(train_module, "train", lambda cfg, resume=False: seen.append(cfg))
    commands = lineage_commands(lineage) + lineage_commands(training_lineage(draft))
    assert commands[0] == "python -m training.train --preset target"  # the preset as it stands
    assert commands[2].endswith(f"--name stop --init {probe} --steps 465 --lr 0.0006 --warmup 20 --fns-from 0 "
                                "--frame-weight 0.3 --stop-weight 2 --group-weights mammal=3,vertebrate=0.5")
    assert commands[3] == (f"python -m training.train --preset target --name kept --init {stop} "
                           f"--teacher {stop} --seed 1 --steps 300 --lr 0.0006 --fns-from 0 "
                           "--splice-contrast-weight 0.5 --distill-weight 0.5")
    assert commands[-1].endswith(f"--teacher {kept} --steps 240 --heads 2 --kv-heads 1 --distill-weight 0.9")
    assert commands[-1].startswith("python -m training.train --preset draft")
    # a target kept near the installed model it continued: once installed over, that model is the run before it
    installed = asdict(replace(TrainConfig(), name="next", init="assets/models/carbon-demo",
                               teacher="assets/models/carbon-demo", distill_weight=0.3))
    assert f"--init {kept} --teacher {kept} " in train_module.train_command(installed, str(kept))
    # the card names it so
    assert run_teachers(runs_in_order([*lineage, {"config": installed}]))[-2:] == [str(stop), str(kept)]
    for command in commands:
        words = shlex.split(command)
        assert words[:3] == ["python", "-m", "training.train"]
        train_module.main(words[3:] + ["--out-root", str(tmp_path)])
    for cfg, run_record in zip(seen, lineage + training_lineage(draft), strict=True):
        wanted = run_record["config"]
        for key in ("name", "seed", "steps", "lr", "warmup", "fns_from", "frame_weight", "stop_weight",
                    "splice_contrast_weight",
                    "group_weights", "teacher", "distill_weight", "hidden", "layers", "heads", "kv_heads"):
            assert getattr(cfg, key) == wanted[key], (wanted["name"], key)
    assert [cfg.init for cfg in seen[:4]] == [None, str(scratch), str(probe), str(stop)]  # each from the one before
    assert [cfg.preset for cfg in seen] == ["target"] * 4 + ["draft"]
    from training.evaluate import kl_text

    assert kl_text(lineage[-1]["config"]) == f"Kept near {stop} by the KL divergence from it (weight 0.5)."
    assert kl_text(training_lineage(draft)[0]["config"]) == "Distilled from carbon-demo (KL weight 0.9)."
    assert kl_text(lineage[0]["config"]) == ""
    assert kl_text({**lineage[-1]["config"], "coding_distill_weight": 3.0}) == (
        f"Kept near {stop} by the KL divergence from it (weight 0.5), and at its coding tokens again (weight 3.0).")
    assert kl_text({**lineage[-1]["config"], "coding_distill_weight": 3.0, "anchor_weight": 2.0}) == (
        f"Kept near {stop} by the KL divergence from it (weight 0.5), and at every token again (weight 2.0), and at "
        "its coding tokens again (weight 3.0).")

    record = json.loads((stop / "training.json").read_text())
    record["lineage"] = training_lineage(probe)
    (stop / "training.json").write_text(json.dumps(record))
    shutil.rmtree(tmp_path / "carbon-demo")
    shutil.rmtree(tmp_path / "probe")
    assert [r["config"]["name"] for r in training_lineage(stop)] == ["carbon-demo", "probe", "stop"]
    looped = run("looped", None)
    record = json.loads((looped / "training.json").read_text())
    record["config"]["init"] = str(looped)  # continued from itself, as after an install over its own start
    (looped / "training.json").write_text(json.dumps(record))
    assert [r["config"]["name"] for r in training_lineage(looped)] == ["looped"]
    fresh = run("fresh", str(tmp_path / "installed" / "model"))
    installed = tmp_path / "installed" / "model"
    installed.mkdir(parents=True)
    shutil.copy(fresh / "training.json", installed / "training.json")  # installed over the run it started from
    assert [r["config"]["name"] for r in training_lineage(fresh)] == ["fresh"]


def _small_world(data: Path, monkeypatch) -> dict:
    """A dataset of two annotated records (a held-out human gene, a cress genome with one transcript) written
    to `data`; its data card."""
    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 30 * WINDOW for g in demo_data.GROUPS})
    genome, gene = coding_gene(1)
    cress = Transcript("p", "p", 1, [(1000, 1600), (2000, 2600)], [], "protein_coding")
    records = [Record("held", genome, "mammal", "Homo sapiens", "test", [gene], held_out=True),
               Record("cress", random_dna(40_000, 5), "plant", "Arabidopsis thaliana", "test", [cress])]
    return write_dataset(data, records)


def test_the_rebuild_runs_from_annotated_records_to_installed_models(tmp_path, monkeypatch):
    """Each documented step on a small world: the dataset of annotated records, a target and a draft
    distilled from it, the evaluation beside the Markov baseline and the previous model, and the
    installed models with their cards, loaded back by the engine."""
    import shutil

    from carbon_app.model.bundle import load_bundle
    from training.evaluate import (
        evaluate,
        install,
        measure_draft,
        own_saved_figures,
        quality_summary,
        variant_table,
    )
    from training.merge import merge
    from training.train import TrainConfig, train

    data = tmp_path / "data"
    card = _small_world(data, monkeypatch)
    assert card["groups"]["mammal"]["test_variants"] == {"coding": {"stop_gain": 2, "synonymous": 2},
                                                         "splice": {"deep_intronic": 4, "splice_site": 4},
                                                         "splice_matched": {"deep_same_dinucleotide": 4}}
    assert card["groups"]["mammal"]["validation_variants"] == {"coding": {}, "splice": {}, "splice_matched": {}}
    assert json.loads((data / "validation_variants.json").read_text()).keys() == {"coding", "splice",
                                                                                  "splice_matched"}
    assert card["train_windows"] > 0 and card["groups"]["mammal"]["train_windows"] == 0  # held out whole

    cfg = TrainConfig(data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2, kv_heads=1,
                      ffn=64, steps=4, batch=2, warmup=1, eval_every=2, compile=False)
    target = train(cfg)
    draft = train(replace(cfg, name="carbon-demo-draft", steps=2, teacher=str(target), distill_weight=0.5))
    results = evaluate(target, draft, data, previous_dir=target, device="cpu")
    results["quality"] = quality_summary(results)
    assert results["previous"] == results["target"]  # one model measured twice: the same figures
    assert results["previous_figures"] == "measured"  # a run's folder holds no figures of its own
    assert results["previous_variants"] == results["target_variants"]
    coding, splice = results["target_variants"]["coding"], results["target_variants"]["splice"]
    assert coding["variants"] == {"mammal": 4} and splice["variants"] == {"mammal": 8}
    assert 0 <= coding["auroc"]["all"] <= 1 and 0 <= splice["auroc"]["all"] <= 1
    matched = results["target_variants"]["splice_matched"]  # the same 4 sites against their own controls
    assert matched["variants"] == {"mammal": 8} and 0 <= matched["auroc"]["all"] <= 1
    assert matched["mean_delta"]["splice_site"] == splice["mean_delta"]["splice_site"]
    table = variant_table(results)
    assert "same dinucleotide broken" in table and "GT and AG only" in table  # the baseline that likes GT, AG
    assert 0 <= results["draft_greedy_agreement"]["token"] <= 1
    again = measure_draft(target, draft, data, device="cpu")  # a draft distilled again: measured alone
    assert again == {key: results[key] for key in ("draft", "draft_greedy_agreement")}

    assets = tmp_path / "assets"
    install(target, draft, results, assets)
    for name, role in (("carbon-demo", "target"), ("carbon-demo-draft", "draft")):
        installed = assets / name
        measured = json.loads((installed / "eval.json").read_text())
        wanted = {k: v for k, v in json.loads(json.dumps(results)).items() if role == "target" or k != "quality"}
        assert measured == wanted
        # the draft's scores: not measured
        assert (load_bundle(str(installed)).card.quality is None) == (role == "draft")
        assert json.loads((installed / "carbon_role.json").read_text())["role"] == role
        assert "stop-gain" in (installed / "README.md").read_text()
        assert load_bundle(str(installed)).tokenizer.kmer_start_id == load_bundle(str(target)).tokenizer.kmer_start_id

    # a run continued from the installed target, installed over it: its card says both runs and how to
    # make each, though the folder the second started from now holds the second
    continued = train(replace(cfg, name="continued", init=str(assets / "carbon-demo"), steps=2, frame_weight=0.3,
                              group_weights={"plant": 2.0}))
    # the installed target's own figures stand for it as the previous model (same data, window and method);
    # a draft's eval.json holds its target's figures, and other data gets the model measured again
    saved = own_saved_figures(assets / "carbon-demo", data)
    measured_target = json.loads(json.dumps(results))
    assert saved == (measured_target["target"], measured_target["target_variants"])
    assert own_saved_figures(assets / "carbon-demo-draft", data) is None
    other_data = tmp_path / "other-data"
    shutil.copytree(data, other_data)
    (other_data / "test.json").write_text("[]")  # other held-out windows
    assert own_saved_figures(assets / "carbon-demo", other_data) is None
    # figures saved before the matched sets were added to the variant file still stand for what they read;
    # held-out sets that differ otherwise get the model measured again
    earlier_data = tmp_path / "earlier-data"
    shutil.copytree(data, earlier_data)
    sets = json.loads((data / "test_variants.json").read_text())
    earlier_sets = {task: variants for task, variants in sets.items() if task != "splice_matched"}
    (earlier_data / "test_variants.json").write_text(json.dumps(earlier_sets))
    earlier = evaluate(target, None, earlier_data, device="cpu")
    assert "splice_matched" not in earlier["target_variants"]
    install(target, None, earlier, tmp_path / "earlier-assets")
    assert own_saved_figures(tmp_path / "earlier-assets" / "carbon-demo", earlier_data) is not None
    assert own_saved_figures(tmp_path / "earlier-assets" / "carbon-demo", data) == (
        json.loads(json.dumps(earlier["target"])), json.loads(json.dumps(earlier["target_variants"])))
    (other_data / "test.json").write_text((data / "test.json").read_text())
    (other_data / "test_variants.json").write_text(json.dumps({**sets, "coding": sets["coding"][1:]}))
    assert own_saved_figures(tmp_path / "earlier-assets" / "carbon-demo", other_data) is None
    again = evaluate(continued, None, data, previous_dir=assets / "carbon-demo", device="cpu")
    assert again["previous_figures"] == "saved" and again["previous"] == measured_target["target"]
    install(continued, None, again, assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert "Trained in 2 runs" in card and "| continued | 2 |" in card and "| plant=2 |" in card
    assert f"--name continued --data {data} --init {target} --steps 2" in card and "--group-weights plant=2" in card
    assert "previous carbon-demo figures are its own, read from its saved eval.json" in card
    lineage = json.loads((assets / "carbon-demo" / "training.json").read_text())["lineage"]
    assert [run["config"]["name"] for run in lineage] == ["carbon-demo"]

    # the installed target averaged with the first: a merge installed as the default says what it averaged
    merged = merge(assets / "carbon-demo", target, 0.25, "merged", cfg.out_root)
    install(merged, None, evaluate(merged, None, data, previous_dir=assets / "carbon-demo", device="cpu"), assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert "Made in 2 runs and 1 merge" in card and "| merged | merge | - |" in card
    assert ("No training of its own: merged averages the weights of two: (1 - 0.25) x continued + 0.25 x "
            "carbon-demo") in card
    commands = [line.strip() for line in card.split("## Regenerate")[1].splitlines() if line.startswith("    ")]
    assert commands[-2:] == [f"python -m training.merge --name merged --base {continued} --other {target} "
                             f"--weight 0.25 --out-root {cfg.out_root}",
                             f"python -m training.evaluate --target {merged} "
                             "--previous assets/models/carbon-demo --install assets/models"]
    assert (assets / "carbon-demo" / "model.safetensors").read_bytes() == (merged / "model.safetensors").read_bytes()

    # a run kept near the installed target but begun elsewhere, installed over it: its command names the
    # folder the installed model's own run wrote, not the installed folder that now holds the run itself
    kept = train(replace(cfg, name="kept", init=str(merged), teacher=str(assets / "carbon-demo"), distill_weight=0.3,
                         steps=1))
    install(kept, None, evaluate(kept, None, data, previous_dir=assets / "carbon-demo", device="cpu"), assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert f"--init {merged} --teacher {merged}" in card and f"--teacher {assets}" not in card
    saved_config = json.loads((assets / "carbon-demo" / "training.json").read_text())["config"]
    assert saved_config["teacher"] == str(merged)  # read again later, it still names the right model


def test_a_model_measured_within_a_delta_radius_is_installed_to_be_read_within_it(tmp_path, monkeypatch):
    """`evaluate --delta-radius`: the card, the quality the page shows and every default path read the deltas
    within that radius, the whole window read beside it from the same passes; figures saved at one radius
    do not stand for another."""
    from carbon_app.model.bundle import load_bundle
    from training.evaluate import (
        evaluate,
        install,
        load_float32,
        model_delta,
        own_saved_figures,
        quality_summary,
        variant_signal,
    )
    from training.train import TrainConfig, train

    data = tmp_path / "data"
    _small_world(data, monkeypatch)
    cfg = TrainConfig(data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2, kv_heads=1,
                      ffn=64, steps=2, batch=2, warmup=1, eval_every=2, compile=False)
    target = train(cfg)
    near = evaluate(target, None, data, device="cpu", delta_radius=9)
    assert near["variant_delta_radius"] == 9
    variant_sets = json.loads((data / "test_variants.json").read_text())
    bundle = load_float32(target, "cpu")
    assert near["target_variants_whole_window"] == variant_signal(model_delta(bundle, "chain", None), variant_sets)
    assert near["target_variants"] == variant_signal(model_delta(bundle, "chain", 9), variant_sets)
    whole = near["target_variants_whole_window"]
    assert near["target_variants"]["coding"]["mean_delta"] != whole["coding"]["mean_delta"]
    near["quality"] = quality_summary(near)
    assert near["quality"]["delta_radius"] == 9
    assert near["quality"]["whole_window"]["stop_gain_vs_synonymous_auroc"] == \
        near["target_variants_whole_window"]["coding"]["auroc"]["all"]
    assets = tmp_path / "assets"
    install(target, None, near, assets)
    card = (assets / "carbon-demo" / "README.md").read_text()
    assert "summed over the 9 bases either side of the variant" in card and "carbon-demo, whole window" in card
    assert "--delta-radius 9 --previous assets/models/carbon-demo" in card
    assert load_bundle(str(assets / "carbon-demo")).card.delta_radius == 9
    assert own_saved_figures(assets / "carbon-demo", data) is None  # saved at 9: not the whole window's figures
    assert own_saved_figures(assets / "carbon-demo", data, delta_radius=9) is not None


