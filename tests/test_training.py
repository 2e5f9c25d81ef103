"""The demo-model pipeline on small real objects: labels, splits, template mix, training, Markov baseline."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter

import numpy as np
import pytest

from carbon_app.training import data as demo_data
from carbon_app.training.data import (
    WINDOW,
    Record,
    _choose_tags,
    _group_of_taxonomy,
    _is_human_chr17,
    _read_gff_genes,
    sample_eval_windows,
    sample_training_windows,
    split_bounds,
)
from carbon_app.training.evaluate import MarkovModel, accuracy


def test_gff_genes_get_region_types(tmp_path):
    gff = tmp_path / "x.gff.gz"
    lines = [
        "##gff-version 3",
        "chr1\tRefSeq\tgene\t101\t400\t.\t+\t.\tID=g1;gene_biotype=protein_coding",
        "chr1\tRefSeq\tgene\t501\t573\t.\t-\t.\tID=g2;gene_biotype=tRNA",
        "chr1\tRefSeq\tpseudogene\t601\t700\t.\t+\t.\tID=g3;gene_biotype=transcribed_pseudogene",
        "chr1\tRefSeq\tgene\t801\t900\t.\t+\t.\tID=g4;gene_biotype=other",
        "chr1\tRefSeq\texon\t101\t200\t.\t+\t.\tParent=g1",
    ]
    gff.write_bytes(gzip.compress("\n".join(lines).encode()))
    assert _read_gff_genes(gff) == {"chr1": [(100, 400, 1, "protein_coding"), (500, 573, -1, "trna"),
                                             (600, 700, 1, "pseudogene")]}


def test_taxonomy_groups_and_chromosome_17_guard():
    assert _group_of_taxonomy(["Eukaryota", "Metazoa", "Chordata", "Craniata", "Vertebrata", "Mammalia"]) == "mammal"
    assert _group_of_taxonomy(["Eukaryota", "Metazoa", "Chordata", "Craniata", "Vertebrata", "Aves"]) == "vertebrate"
    assert _group_of_taxonomy(["Eukaryota", "Metazoa", "Arthropoda"]) == "invertebrate"
    assert _group_of_taxonomy(["Eukaryota", "Viridiplantae"]) == "plant"
    assert _group_of_taxonomy(["Eukaryota", "Fungi"]) == "fungus"
    assert _group_of_taxonomy(["Bacteria", "Proteobacteria"]) == "prokaryote"
    assert _group_of_taxonomy(["Viruses"]) is None
    assert _is_human_chr17("Homo sapiens", "Homo sapiens chromosome 17, clone X")
    assert _is_human_chr17("Homo sapiens", ">chr17 1000 2000")
    assert not _is_human_chr17("Homo sapiens", "chromosome 1, complete") and not _is_human_chr17(
        "Mus musculus", "chr17")


def test_template_mix_follows_carbon_pretraining():
    rng = random.Random(0)
    counts = Counter(_choose_tags(rng, "plant", "trna") for _ in range(60_000))
    share = {key: n / 60_000 for key, n in counts.items()}
    assert share[(None, None)] == pytest.approx(0.5, abs=0.01)
    for key in (("plant", "trna"), ("plant", None), (None, "trna")):
        assert share[key] == pytest.approx(1 / 6, abs=0.01)
    assert {s for s, _ in (_choose_tags(rng, "prokaryote", None) for _ in range(100))} == {None}


def _genome(seed: int, length: int) -> str:
    return "".join(random.Random(seed).choice("ACGT") for _ in range(length))


def test_windows_never_cross_the_held_out_split(monkeypatch):
    monkeypatch.setattr(demo_data, "TRAIN_BASES", {g: 40 * WINDOW for g in demo_data.GROUPS})
    seq = _genome(1, 30_000)
    genes = [(1000, 2500, 1, "protein_coding"), (5000, 5100, -1, "trna"), (27_500, 29_000, 1, "protein_coding")]
    records = [Record("r1", seq, "fungus", "yeast", "test", genes),
               Record("hbb", _genome(2, 5000), "mammal", "human", "test", held_out=True)]
    train = sample_training_windows(records, random.Random(3))
    train_end = split_bounds(len(seq))[0]
    allowed = {seq[i : i + WINDOW] for i in range(train_end - WINDOW + 1)}
    from carbon_app.dna import reverse_complement

    for window in train:
        assert window["record"] == "r1"  # the held-out record never trains
        assert window["seq"] in allowed or reverse_complement(window["seq"]) in allowed
        assert window["gene_region"] in (None, "protein_coding", "trna")
    test = sample_eval_windows(records, "test", 5, random.Random(4))
    assert {w["record"] for w in test} == {"r1", "hbb"}
    assert all(w["start"] - 1 >= split_bounds(len(seq))[1] for w in test if w["record"] == "r1")


def test_markov_baseline_learns_what_it_saw():
    period = np.array([0, 1, 2, 3, 3, 2, 1, 0, 2, 2] * 60)
    markov = MarkovModel(period[None, :], max_order=4)
    context = "".join("ATCG"[d] for d in period[:40])
    truth = "".join("ATCG"[d] for d in period[40:70])
    assert markov.recover(context, 30, order=4) == truth
    assert accuracy(markov.recover(context, 30, order=0), truth) < 1


def test_training_loop_saves_a_model_the_manager_loads(tmp_path, monkeypatch):
    from carbon_app.generate import generate
    from carbon_app.models import load_bundle
    from carbon_app.training.tokenizer import demo_tokenizer
    from carbon_app.training.train import TrainConfig, train

    data = tmp_path / "data"
    tokenizer = demo_tokenizer(data / "tokenizer")
    rng = random.Random(0)
    windows = [{"seq": _genome(i, WINDOW), "species": rng.choice([None, "plant"]),
                "region": rng.choice([None, "trna"])} for i in range(6)]
    rows, dna_at = demo_data.to_rows(windows, tokenizer, tokenizer.text_tokenizer.pad_token_id)
    np.save(data / "train_rows.npy", rows)
    np.save(data / "train_dna_at.npy", dna_at)
    (data / "validation.json").write_text(json.dumps([{"seq": _genome(99, 624)}]))
    (data / "data_card.json").write_text(json.dumps({"groups": {}}))
    cfg = TrainConfig(name="tiny", data=str(data), out_root=str(tmp_path / "runs"), hidden=32, layers=1, heads=2,
                      kv_heads=1, ffn=64, steps=4, batch=2, warmup=1, eval_every=2)
    out = train(cfg)
    log = json.loads((out / "training.json").read_text())["log"]
    assert [entry["step"] for entry in log] == [2, 4]
    bundle = load_bundle(str(out))
    assert bundle.tokenizer.kmer_start_id == tokenizer.kmer_start_id
    result = generate(bundle, "ACGTAC", 20, species="plant", region="trna", seed=1)
    assert result.prompt_text == "<plant_species><transfer_rna><dna>ACGTAC" and len(result.sequences[0]) == 20
