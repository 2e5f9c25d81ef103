"""Reference genomes: indexed FASTA files (plain or bgzipped) read through pysam.

Contig names are the file's own; `chr17` and `17` (and `chrM` / `MT`) name the
same contig whichever spelling the file uses. The `.fai` index is made beside
the FASTA when it is missing, and a clear message says what to do when it
cannot be written there. Servers name their genomes in `CARBON_REFERENCES`
(`GRCh38=/data/hg38.fa,GRCh37=/data/hg19.fa`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .. import settings
from ..errors import InputError

_MITOCHONDRION = {"M", "MT", "CHRM", "CHRMT"}


class Reference:
    """One indexed FASTA, opened once; `fetch` is safe to call from several threads."""

    def __init__(self, path: str | Path, name: str | None = None):
        import pysam

        self.path = Path(path)
        self.name = name or self.path.name
        if not self.path.is_file():
            raise InputError(f"the reference genome '{self.path}' does not exist or is not a file")
        index = Path(f"{self.path}.fai")
        if not index.exists() and not os.access(self.path.parent, os.W_OK):
            raise InputError(
                f"the reference genome '{self.path}' has no index ({index.name}) and its folder cannot be "
                f"written: run 'samtools faidx {self.path}' where it can be, or copy the FASTA to a writable folder")
        try:
            self._fasta = pysam.FastaFile(str(self.path))
        except (OSError, ValueError) as exc:
            hint = (" A compressed FASTA must be compressed with bgzip (not gzip)."
                    if self.path.suffix in (".gz", ".bgz") else "")
            raise InputError(f"the reference genome '{self.path}' cannot be read as indexed FASTA: {exc}.{hint}") \
                from None
        self.lengths = dict(zip(self._fasta.references, self._fasta.lengths, strict=True))
        self._lock = threading.Lock()  # one pysam handle: reads one at a time

    def __repr__(self) -> str:
        return f"Reference({self.name!r}, {len(self.lengths)} contigs)"

    def contig(self, name: str) -> str:
        """The file's name for contig `name`, accepting chr/no-chr and chrM/MT spellings."""
        name = str(name).strip()
        if name in self.lengths:
            return name
        bare = name[3:] if name.lower().startswith("chr") else name
        candidates = [bare, f"chr{bare}"]
        if bare.upper() in _MITOCHONDRION:
            candidates += ["MT", "chrM", "M", "chrMT"]
        for candidate in candidates:
            if candidate in self.lengths:
                return candidate
        shown = ", ".join(list(self.lengths)[:6]) + (", ..." if len(self.lengths) > 6 else "")
        raise InputError(f"contig '{name}' is not in the reference genome {self.name} ({len(self.lengths)} "
                         f"contigs: {shown})")

    def fetch(self, contig: str, start: int, end: int) -> str:
        """Upper-case bases [start, end) (0-based) of a contig named as the file names it, clipped to it."""
        length = self.lengths[contig]
        start, end = max(0, start), min(end, length)
        with self._lock:
            return self._fasta.fetch(contig, start, end).upper() if end > start else ""


class ContigBases:
    """One contig read base by base as a string is (`len`, `[i]`), for what needs a few bases anywhere on it,
    such as the codons of a coding sequence that spans a gene's exons."""

    def __init__(self, reference: Reference, contig: str):
        self.reference, self.contig = reference, contig

    def __len__(self) -> int:
        return self.reference.lengths[self.contig]

    def __getitem__(self, pos0: int | slice) -> str:
        if isinstance(pos0, slice):  # a stretch, as a string's slice (no step)
            start, stop, _ = pos0.indices(len(self))
            return self.reference.fetch(self.contig, start, max(start, stop))
        return self.reference.fetch(self.contig, pos0, pos0 + 1)


def configured_references(text: str | None = None) -> dict[str, Path]:
    """`CARBON_REFERENCES` (`NAME=PATH,NAME=PATH`) as {name: path}; each entry checked for its form."""
    text = (settings.get("CARBON_REFERENCES") or "") if text is None else text
    found: dict[str, Path] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InputError(f"CARBON_REFERENCES entry '{item}' is not NAME=PATH (e.g. GRCh38=/data/hg38.fa)")
        found[name.strip()] = Path(path.strip())
    return found


def read_renaming(text: str) -> dict[str, str]:
    """A contig renaming table, as bcftools' --rename-chrs reads one: 'OLD NEW' a line (spaces or a tab
    between; blank lines and # comments skipped) -> {old: new}; a malformed line is named."""
    table: dict[str, str] = {}
    for number, line in enumerate(str(text or "").splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            raise InputError(f"line {number} of the contig renaming table is '{line.strip()[:60]}': write the VCF's "
                             "name and the genome's, e.g. '17 ref_brca1', one pair a line")
        table[fields[0]] = fields[1]
    return table


def uploaded_reference(upload: str | Path, folder: Path, max_bytes: int) -> Reference:
    """A FASTA a person brought (plain, gzip or bgzip), copied into `folder` as plain FASTA in bounded pieces
    (refused past `max_bytes` expanded: a small gzip can hold a huge file) and indexed with pysam; named by
    its file's name."""
    import gzip

    upload = Path(upload)
    target = folder / "uploaded_genome.fa"
    with open(upload, "rb") as probe:
        compressed = probe.read(2) == b"\x1f\x8b"
    written = 0
    try:
        with (gzip.open(upload, "rb") if compressed else open(upload, "rb")) as source, open(target, "wb") as out:
            while piece := source.read(1 << 20):
                if not written and not piece.lstrip().startswith(b">"):
                    raise InputError(f"the genome '{upload.name}' is not a FASTA file: it does not begin with a "
                                     "'>' header line")
                written += len(piece)
                if written > max_bytes:
                    raise InputError(f"the genome '{upload.name}' expands to more than {max_bytes // 2**20:,} MB; "
                                     "a server's genomes are set in CARBON_REFERENCES, the command line takes any "
                                     "size (score-vcf --reference)")
                out.write(piece)
    except (OSError, EOFError) as exc:
        raise InputError(f"the genome '{upload.name}' cannot be read: {exc}") from None
    if not written:
        raise InputError(f"the genome '{upload.name}' is empty")
    return Reference(target, name=upload.name)
