"""Carbon-shaped models with random weights, for tests and benchmarks.

No model hub is needed: these have the real architecture and id layout of
the released checkpoints (or a compact layout for fast tests), so every code
path of the engine runs on them exactly as on a real Carbon model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from carbon_app.core.tags import SCHEMES
from carbon_app.core.tokens import CarbonTokenizer, DnaConfig, build_tag_text_tokenizer
from carbon_app.model.bundle import ModelBundle, make_bundle
from carbon_app.model.checkpoint import decoder_of

#: Architectures of the released checkpoints (spec section 1) and a tiny one.
SHAPES: dict[str, dict] = {
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
                 initializer_range=0.5),  # large weights: peaked, non-trivial distributions
    # the smallest heads vLLM's CPU attention runs (head_dim 32; "tiny"'s 8 it refuses)
    "small": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True),
    "500M": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, max_position_embeddings=8192, tie_word_embeddings=True),
    "3B": dict(hidden_size=3072, intermediate_size=8448, num_hidden_layers=30, num_attention_heads=32,
               num_key_value_heads=4, head_dim=96, max_position_embeddings=32768, tie_word_embeddings=True),
    # Carbon-3B's heads (96 wide, 8 query heads to a key head) and context at a CPU test's width
    "3B-narrow": dict(hidden_size=768, intermediate_size=2112, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=1, head_dim=96, max_position_embeddings=32768, tie_word_embeddings=True),
    "8B": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, max_position_embeddings=32768, tie_word_embeddings=False),
}

#: The released DNA layout: 151,669 text ids, then <dna> </dna> <oov>, 4096 6-mers, 8 unused.
CARBON_DNA_CONFIG = DnaConfig(k=6, dna_start_id=151669, dna_vocab_size=4107,
                              special_tokens=("<dna>", "</dna>", "<oov>"))
CARBON_VOCAB_SIZE = 155_776


def random_model(shape: str, vocab_size: int, seed: int = 0, dtype: torch.dtype = torch.float32,
                 max_position_embeddings: int | None = None, device: str = "cpu"):
    """A LlamaForCausalLM with random weights in one of `SHAPES`, built on `device`
    ("meta": shapes only, for memory arithmetic)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = dict(SHAPES[shape])
    if max_position_embeddings:
        settings["max_position_embeddings"] = max_position_embeddings
    config = LlamaConfig(vocab_size=vocab_size, rope_theta=5_000_000.0, rms_norm_eps=1e-6,
                         bos_token_id=None, eos_token_id=151643 if vocab_size > 151643 else 0,
                         pad_token_id=None, **settings)
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(seed)
    if device == "cpu":  # initialised in fp32 whatever the dtype, so CPU tests see the same weights
        with torch.device("cpu"):
            return LlamaForCausalLM(config).to(dtype).eval()
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # large shapes are built directly in their dtype on their device
    try:
        with torch.device(device):
            return LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)


def write_model_dir(
    out_dir: Path,
    shape: str = "tiny",
    layout: str = "compact",
    text_tokenizer_dir: Path | None = None,
    seed: int = 0,
    max_position_embeddings: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    vocab_size: int | None = None,
) -> Path:
    """Save a random Carbon-format model directory, loadable by `load_bundle`.

    layout 'carbon': the released 155,776-id layout; needs the Qwen3 BPE files
    in `text_tokenizer_dir`. layout 'compact': a word-level tag tokenizer and
    the DNA ids right after it. The weights are saved in `dtype`, built on
    `device` (a GPU builds a 3B or 8B shape in seconds); `vocab_size` above the
    layout's pads the embedding with unused ids (a full-size checkpoint).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if layout == "carbon":
        if text_tokenizer_dir is None:
            raise ValueError("the carbon layout needs the Qwen3 tokenizer files")
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
                     "added_tokens.json"):
            if (Path(text_tokenizer_dir) / name).exists():
                shutil.copy(Path(text_tokenizer_dir) / name, out_dir / name)
        dna_config, vocab_size = CARBON_DNA_CONFIG, max(vocab_size or 0, CARBON_VOCAB_SIZE)
    else:
        text = build_tag_text_tokenizer(out_dir)
        dna_config = DnaConfig(k=6, dna_start_id=len(text), dna_vocab_size=3 + 4096,
                               special_tokens=("<dna>", "</dna>", "<oov>"))
        vocab_size = max(vocab_size or 0, dna_config.min_vocab_size)
    model = random_model(shape, vocab_size, seed, dtype, max_position_embeddings=max_position_embeddings,
                         device=device)
    model.save_pretrained(str(out_dir))
    del model
    if device != "cpu":
        torch.cuda.empty_cache()
    (out_dir / "dna_config.json").write_text(json.dumps(dna_config.to_dict(), indent=2) + "\n")
    return out_dir


def random_bundle(shape: str = "500M", text_tokenizer=None, seed: int = 0,
                  dtype: torch.dtype = torch.float32, device: str = "cpu") -> ModelBundle:
    """An in-memory Carbon-layout bundle (no files written), for benchmarks: the engine's decoder over a
    random `transformers` model's weights (`random_pair` keeps the model too, as the stock contender)."""
    return random_pair(shape, text_tokenizer, seed, dtype, device)[0]


def random_pair(shape: str = "500M", text_tokenizer=None, seed: int = 0, dtype: torch.dtype = torch.float32,
                device: str = "cpu") -> tuple[ModelBundle, torch.nn.Module]:
    """`random_bundle` and the `transformers` model whose weights its decoder shares (no memory added)."""
    model = random_model(shape, CARBON_VOCAB_SIZE, seed, dtype, device=device)
    tokenizer = CarbonTokenizer(CARBON_DNA_CONFIG, text_tokenizer)
    return make_bundle(f"random-{shape}", Path("."), decoder_of(model), tokenizer, SCHEMES["pipeline"]), model


def main(argv: list[str] | None = None) -> None:
    """python -m benchmarks.synthetic DIR --shape 500M [--tokenizer FILES]: a model directory with random
    weights in a released shape, which the app, the CLI and deploy/vllm/serve.sh load like a checkpoint."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.synthetic", description=main.__doc__)
    parser.add_argument("out", type=Path, help="the model directory to write")
    parser.add_argument("--shape", default="500M", choices=list(SHAPES))
    parser.add_argument("--tokenizer", type=Path, help="the released text tokenizer's files (vocab.json, "
                        "merges.txt, ...): the 155,776-id layout; without it, a compact layout")
    parser.add_argument("--context", type=int, default=2048, help="max_position_embeddings (bases / 6)")
    args = parser.parse_args(argv)
    if args.tokenizer is not None and not (args.tokenizer / "vocab.json").is_file():
        parser.error(f"--tokenizer {args.tokenizer}: no vocab.json there")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} exists and is not empty: name a new directory")
    path = write_model_dir(args.out, args.shape, "carbon" if args.tokenizer else "compact", args.tokenizer,
                           max_position_embeddings=args.context)
    print(f"wrote a random {args.shape} Carbon-format model to {path}")


if __name__ == "__main__":
    main()
