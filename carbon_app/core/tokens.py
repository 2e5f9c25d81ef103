"""The Carbon hybrid tokenizer: Qwen3 BPE for text, non-overlapping k-mers for DNA.

Every number comes from the model's `dna_config.json` (k, first DNA id,
special tokens), so the same code serves the released 155,776-id layout and
small models with a compact vocabulary. Token ids of the DNA half:

    dna_start_id + 0, 1, 2      <dna>, </dna>, <oov>   (in dna_special_tokens order)
    dna_start_id + 3 + v        the k-mer whose base digits (A=0 T=1 C=2 G=3) spell v in base 4
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import ModelError
from .dna import BASES

DNA_OPEN, DNA_CLOSE, OOV = "<dna>", "</dna>", "<oov>"


def dna_prompt(tag_prefix: str, bases: str = "", pad_to: int | None = None) -> str:
    """The text a Carbon model reads: its tags, `<dna>`, then the bases (right-padded with A to a
    multiple of `pad_to` when given: scoring reads whole k-mers and never scores the padding)."""
    padding = "A" * (-len(bases) % pad_to) if pad_to else ""
    return tag_prefix + DNA_OPEN + bases + padding

# byte -> base digit, 255 for anything that is not A/T/C/G (upper case only: the
# tokenizer upper-cases DNA before it gets here).
_DIGIT_OF_BYTE = np.full(256, 255, dtype=np.uint8)
for _digit, _base in enumerate(BASES):
    _DIGIT_OF_BYTE[ord(_base)] = _digit


@dataclass(frozen=True)
class DnaConfig:
    """The contents of a model's `dna_config.json`."""

    k: int
    dna_start_id: int
    dna_vocab_size: int
    special_tokens: tuple[str, ...]
    auto_dna_tags: bool = False

    @classmethod
    def from_dict(cls, data: dict, source: str = "dna_config.json") -> DnaConfig:
        try:
            config = cls(
                k=int(data["k"]),
                dna_start_id=int(data["dna_start_id"]),
                dna_vocab_size=int(data["dna_vocab_size"]),
                special_tokens=tuple(data.get("dna_special_tokens", (DNA_OPEN, DNA_CLOSE, OOV))),
                auto_dna_tags=bool(data.get("auto_dna_tags", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{source} is not a valid DNA config: missing or bad field {exc}") from None
        missing = {DNA_OPEN, DNA_CLOSE, OOV} - set(config.special_tokens)
        if missing:
            raise ModelError(f"{source} lacks the special tokens {sorted(missing)}")
        if not 1 <= config.k <= 8:
            raise ModelError(f"{source} has k={config.k}; Carbon models use k between 1 and 8")
        if config.dna_vocab_size < len(config.special_tokens) + 4**config.k:
            raise ModelError(
                f"{source} gives dna_vocab_size={config.dna_vocab_size}, too small for "
                f"{len(config.special_tokens)} specials and {4**config.k} k-mers"
            )
        return config

    @classmethod
    def from_file(cls, path: str | Path) -> DnaConfig:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelError(f"{path} is missing: not a Carbon model directory") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"{path} cannot be read as JSON: {exc}") from None
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict:
        return {
            "k": self.k,
            "dna_start_id": self.dna_start_id,
            "dna_vocab_size": self.dna_vocab_size,
            "dna_special_tokens": list(self.special_tokens),
            "auto_dna_tags": self.auto_dna_tags,
        }

    def special_id(self, token: str) -> int:
        return self.dna_start_id + self.special_tokens.index(token)

    @property
    def kmer_start_id(self) -> int:
        return self.dna_start_id + len(self.special_tokens)

    @property
    def n_kmers(self) -> int:
        return 4**self.k

    @property
    def min_vocab_size(self) -> int:
        """Smallest embedding table that holds every id of the DNA layout."""
        return self.dna_start_id + self.dna_vocab_size


class CarbonTokenizer:
    """Encode and decode Carbon prompts exactly as the released tokenizer does.

    `text_tokenizer` is any Hugging Face tokenizer for the text half (Qwen3 BPE
    for the real models); it is only used for text outside `<dna>` segments.
    """

    def __init__(self, dna_config: DnaConfig, text_tokenizer):
        self.config = dna_config
        self.text_tokenizer = text_tokenizer
        self.k = dna_config.k
        self.open_id = dna_config.special_id(DNA_OPEN)
        self.close_id = dna_config.special_id(DNA_CLOSE)
        self.oov_id = dna_config.special_id(OOV)
        self.kmer_start_id = dna_config.kmer_start_id
        self.n_kmers = dna_config.n_kmers
        self._special_ids = {tok: dna_config.special_id(tok) for tok in dna_config.special_tokens}
        self._special_split = re.compile(
            "(" + "|".join(re.escape(t) for t in sorted(dna_config.special_tokens, key=len, reverse=True)) + ")"
        )
        self._powers = 4 ** np.arange(self.k - 1, -1, -1, dtype=np.int64)
        self._encode_text = lru_cache(maxsize=256)(self._encode_text_uncached)

    # -- DNA half -------------------------------------------------------------

    def kmer_ids(self, dna: str) -> list[int]:
        """Ids of the whole k-mers of upper-case `dna` (length a multiple of k).

        A k-mer holding anything but A/C/G/T becomes `<oov>`, as in the release.
        """
        if len(dna) % self.k:
            raise ValueError(f"kmer_ids needs a multiple of {self.k} bases, got {len(dna)}")
        if not dna:
            return []
        digits = _DIGIT_OF_BYTE[np.frombuffer(dna.encode("utf-8", "replace"), dtype=np.uint8)]
        if len(digits) != len(dna):  # non-ASCII characters: fall back to one char at a time
            digits = np.array([_DIGIT_OF_BYTE[ord(c)] if ord(c) < 256 else 255 for c in dna], dtype=np.uint8)
        digits = digits.reshape(-1, self.k)
        ids = self.kmer_start_id + digits.astype(np.int64) @ self._powers
        ids[(digits == 255).any(axis=1)] = self.oov_id
        return ids.tolist()

    def encode_dna(self, content: str) -> list[int]:
        """Ids for the text between `<dna>` and `</dna>`, by the release's rules.

        Stripped at both ends, upper-cased, cut into k-mers from the left, the
        last partial k-mer right-padded with A.
        """
        dna = content.strip().upper()
        if len(dna) % self.k:
            dna += "A" * (self.k - len(dna) % self.k)
        return self.kmer_ids(dna)

    def kmer_bases(self, kmer_index: np.ndarray | int) -> str:
        """Bases of k-mer indices (0..4^k-1, not token ids), concatenated."""
        index = np.atleast_1d(np.asarray(kmer_index, dtype=np.int64))
        digits = (index[:, None] // self._powers[None, :]) % 4
        return "".join(np.array(list(BASES))[digits.ravel()])

    def is_kmer_id(self, token_id: int) -> bool:
        return self.kmer_start_id <= token_id < self.kmer_start_id + self.n_kmers

    # -- whole prompts --------------------------------------------------------

    def _encode_text_uncached(self, text: str) -> tuple[int, ...]:
        if not text:
            return ()
        if self.text_tokenizer is None:
            raise ModelError("this model has no text tokenizer, so it cannot encode tags or text")
        return tuple(self.text_tokenizer.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        """Token ids of a whole prompt string, e.g. '<plant_species><dna>ACGTAC'.

        Text is split on the DNA special tokens; what follows `<dna>` is DNA up
        to `</dna>` or the end of the string; everything else is BPE text.
        """
        ids: list[int] = []
        in_dna = False
        for piece in self._special_split.split(text):
            if piece in self._special_ids:
                ids.append(self._special_ids[piece])
                if piece == DNA_OPEN:
                    in_dna = True
                elif piece == DNA_CLOSE:
                    in_dna = False
            elif in_dna:
                ids.extend(self.encode_dna(piece))
            elif piece:
                ids.extend(self._encode_text(piece))
        return ids

    def decode(self, ids) -> str:
        """Inverse of `encode` for ids this tokenizer can produce."""
        parts: list[str] = []
        text_run: list[int] = []

        def flush() -> None:
            if text_run:
                parts.append(self.text_tokenizer.decode(text_run))
                text_run.clear()

        for token_id in (int(i) for i in ids):
            if self.is_kmer_id(token_id):
                flush()
                parts.append(self.kmer_bases(token_id - self.kmer_start_id))
            elif self.config.dna_start_id <= token_id < self.kmer_start_id:
                flush()
                parts.append(self.config.special_tokens[token_id - self.config.dna_start_id])
            else:
                text_run.append(token_id)
        flush()
        return "".join(parts)


def all_tags() -> list[str]:
    """Every tag string of the built-in schemes."""
    from .tags import SCHEMES

    tags = {t for scheme in SCHEMES.values() for t in [*scheme.species.values(), *scheme.regions.values()]}
    return sorted(tags)


def build_tag_text_tokenizer(out_dir: Path, extra_words: tuple[str, ...] = ()):
    """A small word-level text tokenizer whose words are the tag strings, saved to `out_dir`.

    The text half of models with a compact vocabulary (the bundled demo models,
    small test models): each known tag is one id, anything else is `<unk>`, and
    `<|endoftext|>` is eos and pad as in Qwen3.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<|endoftext|>", "<unk>", *all_tags(), *extra_words]
    vocab = {word: i for i, word in enumerate(dict.fromkeys(words))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"<[^<>]*>|[^<]+"), behavior="isolated")
    core.decoder = decoders.Fuse()  # tags decode back to the exact text, no spaces between
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token="<unk>"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer
