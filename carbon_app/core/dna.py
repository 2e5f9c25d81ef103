"""DNA text handling: cleaning, validation, IUPAC masks, FASTA/GenBank, reverse complement.

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

from ..errors import InputError
from .coding import CodingSequence

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
#: A numbered sequence line as GenBank's ORIGIN block and NCBI's pages show it: "   61 gtgaacgtgg atgaagttgg"
_NUMBERED_LINE = re.compile(r"^\s*\d+\s+[A-Za-z][A-Za-z ]*\s*$")
_LINE_NUMBER = re.compile(r"^\s*\d+", re.MULTILINE)
#: the largest FASTA or GenBank file read whole for one record (a genome is read indexed, with pysam)
MAX_RECORD_FILE_BYTES = 64 * 2**20
_PIECE_BYTES = 2**20


def clean_sequence(text: str, what: str = "sequence", ambiguous: bool = True) -> str:
    """Return `text` as upper-case DNA with whitespace removed, or raise InputError.

    Line breaks and spaces (wrapped FASTA bodies, Windows line endings) are
    dropped, and so are the line numbers when every line is numbered the
    GenBank way; everything else that is not a base or, if `ambiguous`, an
    IUPAC code is refused with the offending character and its 1-based position.
    """
    if text is None or not text.strip():
        raise InputError(f"the {what} is empty")
    stripped = text.strip()
    if stripped.startswith(">") or stripped.startswith(";"):
        raise InputError(
            f"the {what} looks like FASTA (it starts with '{stripped[0]}'): "
            "give the bases only, or pass the file as FASTA"
        )
    lines = [line for line in stripped.splitlines() if line.strip()]
    if all(_NUMBERED_LINE.match(line) for line in lines):
        stripped = _LINE_NUMBER.sub("", stripped)
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
        shown = f"'{char}'" if char.isprintable() else f"the invisible character U+{ord(char):04X}"
        allowed = _ALLOWED_TEXT if ambiguous else "A, C, G and T"
        hint = ("; numbered GenBank-style lines are read when every line starts with its number"
                if char.isdigit() else "")
        raise InputError(
            f"the {what} has {shown} at position {position}, which is not a DNA base "
            f"(allowed: {allowed}){hint}"
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
    coding: CodingSequence | None = None  # a GenBank record's first CDS feature


def is_record_text(text: str) -> bool:
    """Whether pasted text is a FASTA or GenBank record rather than bare bases."""
    return text.lstrip().startswith((">", "LOCUS"))


def _record_file_text(path: Path, what: str) -> str:
    """A record file's text, read in pieces: refused once it passes MAX_RECORD_FILE_BYTES, and read no further
    than its first piece with text when that text does not start a FASTA or GenBank record (a binary file,
    /dev/zero: the caller names it)."""
    pieces: list[bytes] = []
    size, started = 0, False
    try:
        with path.open("rb") as file:
            while piece := file.read(_PIECE_BYTES):
                size += len(piece)
                if size > MAX_RECORD_FILE_BYTES:
                    raise InputError(f"the {what} file '{path}' is larger than {MAX_RECORD_FILE_BYTES // 2**20} MB; "
                                     "a genome is read indexed instead (--reference)")
                pieces.append(piece)
                if not started and piece.strip():
                    started = True
                    if not b"".join(pieces).lstrip().startswith((b">", b"LOCUS")):
                        break
    except OSError as exc:
        raise InputError(f"cannot read the {what} file '{path}': {exc.strerror}") from None
    return b"".join(pieces).decode(errors="replace")


def read_fasta(source: str | Path, record: str | None = None, what: str = "FASTA",
               choose: str = "choose one by its id") -> FastaRecord:
    """Read one record from a FASTA or GenBank file path, or from FASTA or GenBank text.

    With several records, `record` picks one by id; without it the error lists
    the ids and says how to `choose`, because silently taking the first would
    score the wrong sequence.
    """
    text = _record_file_text(Path(source), what) if isinstance(source, Path) or not is_record_text(source) else source
    if not is_record_text(text):
        raise InputError(f"the {what} input is not FASTA: it must start with a '>' header line "
                         "(or LOCUS, for GenBank)")
    fmt, name = ("genbank", "GenBank") if text.lstrip().startswith("LOCUS") else ("fasta", "FASTA")
    try:
        records = list(SeqIO.parse(io.StringIO(text.lstrip().replace("\r", "")), fmt))
    except ValueError as exc:  # Biopython's own reasons, e.g. comment lines before the first header
        raise InputError(f"the {what} input cannot be read as {name}: {str(exc).splitlines()[0]}") from None
    if not records:
        raise InputError(f"the {what} input holds no records")
    if record is not None:
        chosen = [r for r in records if r.id == record]
        if not chosen:
            ids = ", ".join(r.id for r in records[:10])
            raise InputError(f"no record has the id '{record}' (ids: {ids})")
        picked = chosen[0]
    elif len(records) > 1:
        ids = ", ".join(r.id for r in records[:10])
        more = f" and {len(records) - 10} more" if len(records) > 10 else ""
        raise InputError(f"the {what} input holds {len(records)} records ({ids}{more}); {choose}")
    else:
        picked = records[0]
    # the bases as given: Biopython keeps them as bytes and reads them back as ASCII, which a pasted non-ASCII
    # character would break before `clean_sequence` could name it
    sequence = clean_sequence(bytes(picked.seq).decode("utf-8", errors="replace"),
                              what=f"sequence of record '{picked.id}'")
    cds = [f for f in picked.features if f.type == "CDS"]
    coding = CodingSequence.from_feature(cds[0]) if cds else None
    return FastaRecord(id=picked.id, description=picked.description, sequence=sequence, coding=coding)
