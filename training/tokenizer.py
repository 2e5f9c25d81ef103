"""The demo models' tokenizer: tags as single text ids, then the Carbon DNA layout."""

from __future__ import annotations

import json
from pathlib import Path

from carbon_app.core.tokens import DNA_CLOSE, DNA_OPEN, OOV, CarbonTokenizer, DnaConfig, build_tag_text_tokenizer

K = 6  # the Carbon release's k (its dna_config.json): the demo models share the layout


def demo_tokenizer(out_dir: Path) -> CarbonTokenizer:
    """Write the text-tokenizer files and `dna_config.json` to `out_dir` and return the codec.

    The DNA ids follow the text ids directly (a compact vocabulary); the
    layout inside is the release's: <dna> </dna> <oov>, then 4096 6-mers in
    A, T, C, G order, then 8 unused ids.
    """
    text = build_tag_text_tokenizer(Path(out_dir))
    config = DnaConfig(k=K, dna_start_id=len(text), dna_vocab_size=3 + 4**K + 8,
                       special_tokens=(DNA_OPEN, DNA_CLOSE, OOV))
    (Path(out_dir) / "dna_config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    return CarbonTokenizer(config, text)
