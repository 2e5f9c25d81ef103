"""Small training inputs the training and merge tests share: a two-exon gene, and six random windows
with their tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from carbon_app.core.dna import reverse_complement
from tests.conftest import random_dna
from training import data as demo_data
from training.annotation import Transcript
from training.chain import Stage
from training.data import WINDOW


def coding_gene(strand: int) -> tuple[str, Transcript]:
    """A 2-exon gene ATG CAG | intron GT...AG | TGG AAA TAA, on either strand of a random genome."""
    rng = random.Random(7)
    flank = "".join(rng.choice("ACGT") for _ in range(300))
    body = [rng.choice("ACT") for _ in range(296)]  # no G but two deep ones: no stray splice signals,
    body[118] = body[178] = "G"  # and a matched control for each G of the GT ... AG;
    body[117], body[119], body[177], body[179] = "C", "T", "A", "C"  # one deep GT (intron 120), one AG (179)
    intron = "GT" + "".join(body) + "AG"
    gene = "ATGCAG" + intron + "TGGAAATAA"
    genome = flank + gene + flank
    exons = [(300, 306), (606, 615)]
    if strand == -1:
        genome = reverse_complement(genome)
        exons = sorted((len(genome) - b, len(genome) - a) for a, b in exons)
    return genome, Transcript("t", "g", strand, exons, list(exons), "protein_coding")


def tiny_training_data(tmp_path):
    """Six random-DNA training windows (some tagged plant / tRNA) and one validation window, with their tokenizer."""
    from training.tokenizer import demo_tokenizer

    data = tmp_path / "data"
    tokenizer = demo_tokenizer(data / "tokenizer")
    rng = random.Random(0)
    windows = [{"seq": random_dna(WINDOW, i), "species": rng.choice([None, "plant"]),
                "region": rng.choice([None, "trna"])} for i in range(6)]
    rows, dna_at, *_ = demo_data.to_rows(windows, tokenizer, tokenizer.text_tokenizer.pad_token_id)
    np.save(data / "train_rows.npy", rows)
    np.save(data / "train_dna_at.npy", dna_at)
    (data / "validation.json").write_text(json.dumps([{"seq": random_dna(624, 99)}]))
    (data / "data_card.json").write_text(json.dumps({"groups": {"plant": {"train_windows": 3},
                                                               "prokaryote": {"train_windows": 3}},
                                                    "train_regions": {"trna": 2, "none": 4}}))
    return data, tokenizer


CHAIN_SHAPE = "--hidden 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --batch 2 --warmup 1 --no-compile --device cpu"


def tiny_chain(tmp_path: Path, first_seed: int = 0) -> list[Stage]:
    """A run, rows its model writes, and a run continued from it on those rows mixed in: the sc8 chain's shape."""
    data, _ = tiny_training_data(tmp_path)
    runs, rows = tmp_path / "runs", tmp_path / "rows"
    common = f"--data {data} --out-root {runs} {CHAIN_SHAPE}"
    return [
        Stage("train", f"--name first {common} --steps 3 --seed {first_seed}"),
        Stage("draft_data", f"--teacher {runs / 'first' / 'model'} --data {data} --out {rows} --rows 4 --batch 2 "
                            "--greedy-only --device cpu"),
        Stage("train", f"--name onwards --init {runs / 'first' / 'model'} {common} --mix-data {rows} "
                       "--mix-share 0.5 --steps 2 --lr 1e-2"),
    ]

