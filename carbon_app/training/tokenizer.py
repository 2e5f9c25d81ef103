"""The demo models' tokenizer: tags as single text ids, then the Carbon DNA layout."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.tokens import CarbonTokenizer, DnaConfig, build_tag_text_tokenizer


def demo_tokenizer(out_dir: Path) -> CarbonTokenizer:
    """Write the text-tokenizer files and `dna_config.json` to `out_dir` and return the codec.

    The DNA ids follow the text ids directly (a compact vocabulary); the
    layout inside is the release's: <dna> </dna> <oov>, then 4096 6-mers in
    A, T, C, G order, then 8 unused ids.
    """
    text = build_tag_text_tokenizer(Path(out_dir))
    config = DnaConfig(k=6, dna_start_id=len(text), dna_vocab_size=3 + 4096 + 8,
                       special_tokens=("<dna>", "</dna>", "<oov>"))
    (Path(out_dir) / "dna_config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    return CarbonTokenizer(config, text)
