"""DNA text handling: cleaning, validation, IUPAC masks, FASTA, reverse complement.

Base order everywhere in this package is A, T, C, G: the digit order of the
Carbon 6-mer vocabulary (A=0, T=1, C=2, G=3), so per-base arrays line up with
token ids without any re-ordering.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from Bio import SeqIO
from Bio.Seq import reverse_complement as _bio_reverse_complement

from .errors import InputError

BASES = "ATCG"
BASE_INDEX = {base: i for i, base in enumerate(BASES)}

#: IUPAC nucleotide codes and the bases each allows.
IUPAC = {
    "A": "A", "C": "C", "G": "G", "T": "T",
    "R": "AG", "Y": "CT", "S": "CG", "W": "AT", "K": "GT", "M": "AC",
    "B": "CGT", "D": "AGT", "H": "ACT", "V": "ACG", "N": "ACGT",
}
_ALLOWED_TEXT = "A C G T and the IUPAC codes N R Y S W K M B D H V"
_WHITESPACE = re.compile(r"\s+")


def clean_sequence(text: str, what: str = "sequence", ambiguous: bool = True) -> str:
    """Return `text` as upper-case DNA with whitespace removed, or raise InputError.

    Line breaks and spaces (wrapped FASTA bodies, Windows line endings) are
    dropped; everything else that is not a base or, if `ambiguous`, an IUPAC
    code is refused with the offending character and its 1-based position.
    """
    if text is None or not text.strip():
        raise InputError(f"the {what} is empty")
    stripped = text.strip()
    if stripped.startswith(">") or stripped.startswith(";"):
        raise InputError(
            f"the {what} looks like FASTA (it starts with '{stripped[0]}'): "
            "give the bases only, or pass the file as FASTA"
        )
    seq = _WHITESPACE.sub("", stripped).upper()
    alphabet = IUPAC if ambiguous else "ACGT"
    for position, char in enumerate(seq, start=1):
        if char in alphabet:
            continue
        if char == "U":
            raise InputError(
                f"the {what} contains U at position {position}: it looks like RNA; "
                "write T for U to give it as DNA"
            )
        if char in IUPAC:
            raise InputError(
                f"the {what} has the ambiguity code '{char}' at position {position}, "
                "where only A, C, G or T is allowed"
            )
        shown = char if char.isprintable() else repr(char)
        allowed = _ALLOWED_TEXT if ambiguous else "A, C, G and T"
        raise InputError(
            f"the {what} has '{shown}' at position {position}, which is not a DNA base "
            f"(allowed: {allowed})"
        )
    return seq


def reverse_complement(seq: str) -> str:
    """Reverse complement, IUPAC-aware (N stays N, R becomes Y, ...)."""
    return _bio_reverse_complement(seq)


def mask_from_template(template: str) -> np.ndarray:
    """IUPAC template -> bool array [len, 4]: which of A, T, C, G each position allows."""
    seq = clean_sequence(template, what="mask")
    allowed = np.zeros((len(seq), 4), dtype=bool)
    for position, code in enumerate(seq):
        for base in IUPAC[code]:
            allowed[position, BASE_INDEX[base]] = True
    return allowed


def satisfies(seq: str, template: str) -> bool:
    """True when every base of `seq` is allowed by the IUPAC `template` at its position."""
    template = template.upper()
    return len(seq) == len(template) and all(
        base in IUPAC[code] for base, code in zip(seq, template, strict=True)
    )


@dataclass(frozen=True)
class FastaRecord:
    id: str
    description: str
    sequence: str


def read_fasta(source: str | Path, record: str | None = None, what: str = "FASTA") -> FastaRecord:
    """Read one record from a FASTA file path or FASTA text.

    With several records, `record` picks one by id; without it the error lists
    the ids, because silently taking the first would score the wrong sequence.
    """
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith(">")):
        path = Path(source)
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read the {what} file '{path}': {exc.strerror}") from None
    else:
        text = source
    if not text.lstrip().startswith(">"):
        raise InputError(f"the {what} input is not FASTA: it must start with a '>' header line")
    try:
        records = list(SeqIO.parse(io.StringIO(text.lstrip().replace("\r", "")), "fasta"))
    except ValueError as exc:  # Biopython's own reasons, e.g. comment lines before the first header
        raise InputError(f"the {what} input cannot be read as FASTA: {str(exc).splitlines()[0]}") from None
    if not records:
        raise InputError(f"the {what} input holds no records")
    if record is not None:
        chosen = [r for r in records if r.id == record]
        if not chosen:
            ids = ", ".join(r.id for r in records[:10])
            raise InputError(f"no FASTA record has the id '{record}' (ids: {ids})")
        picked = chosen[0]
    elif len(records) > 1:
        ids = ", ".join(r.id for r in records[:10])
        more = f" and {len(records) - 10} more" if len(records) > 10 else ""
        raise InputError(
            f"the {what} input holds {len(records)} records ({ids}{more}); choose one by its id"
        )
    else:
        picked = records[0]
    sequence = clean_sequence(str(picked.seq), what=f"sequence of FASTA record '{picked.id}'")
    return FastaRecord(id=picked.id, description=picked.description, sequence=sequence)
