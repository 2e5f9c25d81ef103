"""The codec must give the released tokenizer's ids exactly (spec sections 2-3)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from carbon_app.core.tokens import CarbonTokenizer, DnaConfig
from carbon_app.errors import ModelError


@pytest.fixture(scope="module")
def codec(carbon_tokenizer_dir, qwen_bpe) -> CarbonTokenizer:
    return CarbonTokenizer(DnaConfig.from_file(carbon_tokenizer_dir / "dna_config.json"), qwen_bpe)


def reference_encode(text: str, config: dict, bpe) -> list[int]:
    """The spec's rules written out plainly, one k-mer at a time, as an independent check."""
    k, start = config["k"], config["dna_start_id"]
    specials = config["dna_special_tokens"]
    ids: list[int] = []
    in_dna = False
    for piece in re.split(r"(<dna>|</dna>|<oov>)", text):
        if piece in specials:
            ids.append(start + specials.index(piece))
            in_dna = {"<dna>": True, "</dna>": False}.get(piece, in_dna)
        elif in_dna:
            dna = piece.strip().upper()
            while len(dna) % k:
                dna += "A"
            for i in range(0, len(dna), k):
                kmer = dna[i : i + k]
                if all(c in "ATCG" for c in kmer):
                    value = sum("ATCG".index(c) * 4 ** (k - 1 - j) for j, c in enumerate(kmer))
                    ids.append(start + len(specials) + value)
                else:
                    ids.append(start + specials.index("<oov>"))
        elif piece:
            ids.extend(bpe.encode(piece, add_special_tokens=False))
    return ids


@pytest.mark.parametrize(
    "text, ids",
    [
        ("<dna>ATCGAT</dna>", [151669, 152105, 151670]),
        ("<dna>ATCGATCG</dna>", [151669, 152105, 154488, 151670]),
        ("<dna>ATCGAN</dna>", [151669, 151671, 151670]),
        ("hello", [14990]),
        ("<dna>AAAAAA", [151669, 151672]),
        ("<dna>GGGGGG", [151669, 155767]),
        ("<dna>CCCCCC", [151669, 154402]),
        ("<dna>ATCGA</dna>", [151669, 152104, 151670]),  # ATCGA -> ATCGAA
        ("<dna>  atcgat \n</dna>", [151669, 152105, 151670]),  # stripped, upper-cased
        ("<dna>ATC GATCGA", [151669, 151671, 153400]),  # 'ATC GA' -> <oov>; 'TCGA' -> TCGAAA
    ],
)
def test_spec_examples(codec, text, ids, carbon_tokenizer_dir, qwen_bpe):
    config = json.loads((carbon_tokenizer_dir / "dna_config.json").read_text())
    assert codec.encode(text) == ids
    assert reference_encode(text, config, qwen_bpe) == ids


def test_tag_prefix_is_plain_bpe(codec, qwen_bpe):
    prefix = "<mammalian_species><protein_coding_region>"
    ids = codec.encode(prefix + "<dna>ACGTAC")
    assert ids[:-2] == qwen_bpe.encode(prefix, add_special_tokens=False)
    assert ids[-2:] == [151669, 151672 + (0 * 1024 + 2 * 256 + 3 * 64 + 1 * 16 + 0 * 4 + 2)]  # <dna> ACGTAC


dna_text = st.text(alphabet="ACGTacgtNnRY \n", max_size=40)
tag_text = st.sampled_from(["", "<plant_species>", "<mammalian_species><pseudo_gene>", "hello ", "<fungi_species>"])


@given(tag=tag_text, dna=dna_text, close=st.booleans(), tail=st.sampled_from(["", "x", " done"]))
def test_matches_independent_implementation(codec, qwen_bpe, carbon_tokenizer_dir, tag, dna, close, tail):
    config = json.loads((carbon_tokenizer_dir / "dna_config.json").read_text())
    text = f"{tag}<dna>{dna}" + (f"</dna>{tail}" if close else "")
    assert codec.encode(text) == reference_encode(text, config, qwen_bpe)


@given(st.text(alphabet="ACGT", min_size=0, max_size=60).map(lambda s: s[: len(s) - len(s) % 6]))
def test_decode_inverts_encode(codec, dna):
    text = f"<plant_species><dna>{dna}</dna>"
    assert codec.decode(codec.encode(text)) == text


def test_ids_come_from_dna_config_not_constants(qwen_bpe):
    small = DnaConfig(k=6, dna_start_id=100, dna_vocab_size=4099, special_tokens=("<dna>", "</dna>", "<oov>"))
    codec = CarbonTokenizer(small, qwen_bpe)
    assert codec.encode("<dna>AAAAAATTTTTTN</dna>") == [100, 103, 103 + 1365, 102, 101]
    k3_config = DnaConfig(k=3, dna_start_id=10, dna_vocab_size=67, special_tokens=("<dna>", "</dna>", "<oov>"))
    k3 = CarbonTokenizer(k3_config, None)
    assert k3.encode("<dna>GGGA") == [10, 13 + 63, 13]  # GGG, then A padded to AAA


@pytest.mark.parametrize(
    "data, message",
    [
        ({"k": 6, "dna_start_id": 5}, "missing"),
        ({"k": 6, "dna_start_id": 5, "dna_vocab_size": 100}, "too small"),
        ({"k": 6, "dna_start_id": 5, "dna_vocab_size": 5000, "dna_special_tokens": ["<dna>"]}, "lacks"),
    ],
)
def test_bad_dna_config_is_a_model_error(data, message):
    with pytest.raises(ModelError, match=message):
        DnaConfig.from_dict(data)
