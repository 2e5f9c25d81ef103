"""A protein the design encodes, from its first base: a 6-mer is two codons, so the model back-translates.

Each codon a token completes must encode its residue (one-letter code, `*` a stop; an NCBI codon
table by id), and a codon it leaves unfinished must be the start of one that does. The protein sets
the design's length (3 bases a residue), and bounds the GC each codon can hold (a GC range reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from Bio.Seq import Seq

from ....core.dna import BASES
from ....core.validate import whole_number
from ....errors import InputError
from ..part import Constraint, ConstraintCheck, Field, Layout, Rule, Token

RESIDUES = "ACDEFGHIKLMNPQRSTVWY*"


def short(protein: str) -> str:
    return protein if len(protein) <= 12 else f"{protein[:10]}… ({len(protein)} residues)"


@dataclass(frozen=True)
class EncodeProtein(Constraint):
    protein: str
    codon_table: int = 1

    fields = (Field("protein", "Protein to encode (one-letter code; sets the length)",
                    "a protein the designed bases must encode, from the first one (one-letter code, * = stop); "
                    "sets --bases to 3 per residue", placeholder="MSKGEELFTGVVPILVELDGDVNGHKF…"),
              Field("codon_table", "Codon table (NCBI id)", "NCBI codon table id (default 1, standard)",
                    number=True, default=1))
    order = 10

    @classmethod
    def parse(cls, protein=None, codon_table=None) -> EncodeProtein | None:
        from Bio.Data.CodonTable import unambiguous_dna_by_id

        protein = "".join(str(protein or "").split()).upper()
        bad = next((c for c in protein if c not in RESIDUES), None)
        if bad is not None:
            raise InputError(f"the protein has '{bad}' at residue {protein.index(bad) + 1}; use the one-letter "
                             "code of the 20 amino acids and * for a stop")
        table = whole_number(codon_table if codon_table not in (None, "") else 1, "the codon table", 1)
        if table not in unambiguous_dna_by_id:
            raise InputError(f"the codon table must be an NCBI table id ({', '.join(map(str, unambiguous_dna_by_id))}),"
                             f" not {table}")
        return cls(protein, table) if protein else None

    def options(self) -> dict[str, str]:
        return {"protein": self.protein, "codon_table": str(self.codon_table)}

    @classmethod
    def values_off(cls) -> dict[str, object]:
        return {"protein": "", "codon_table": 1}

    def label(self) -> str:
        return "the protein " + short(self.protein)

    def reach(self) -> int:
        return 0  # codons lie in the design

    def fixed_length(self) -> tuple[int, str]:
        bases = 3 * len(self.protein)
        return bases, f"the protein has {len(self.protein):,} residues, {bases:,} bases"

    @cached_property  # the rule and the GC look-ahead both read them
    def codons(self) -> list[np.ndarray]:
        """Per residue, [4, 4, 4] bool: the codons that encode it."""
        from Bio.Data.CodonTable import unambiguous_dna_by_id

        table = unambiguous_dna_by_id[self.codon_table]
        by_residue: dict[str, list[str]] = {"*": list(table.stop_codons)}
        for codon, residue in table.forward_table.items():
            by_residue.setdefault(residue, []).append(codon)
        out = []
        for residue in self.protein:
            allowed = np.zeros((4, 4, 4), dtype=bool)
            for codon in by_residue.get(residue, []):
                allowed[tuple(BASES.index(b) for b in codon)] = True
            out.append(allowed)
        return out

    def gc_spans(self, layout: Layout) -> list[tuple[int, int, int, int]]:
        """Each whole codon's least and most GC among its codons that the mask allows."""
        spans, static = [], layout.design_static
        for i, allowed in enumerate(self.codons):
            if 3 * i + 3 > layout.n_bases:
                break
            rows = static[3 * i : 3 * i + 3]
            ok = allowed & rows[0][:, None, None] & rows[1][None, :, None] & rows[2][None, None, :]
            counts = [sum(BASES[x] in "GC" for x in codon) for codon in zip(*np.nonzero(ok), strict=True)]
            if counts:
                spans.append((3 * i, 3 * i + 3, min(counts), max(counts)))
        return spans

    def rule(self, layout: Layout) -> Rule:
        return CodonRule(layout, self.codons)

    def checks(self, design: str, head: str) -> list[ConstraintCheck]:
        """The translation through Biopython (DNA Chisel enforces it during optimisation, it does not evaluate it)."""
        usable = len(design) // 3 * 3
        made = str(Seq(design[:usable]).translate(table=self.codon_table))
        wrong = next((i for i, (a, b) in enumerate(zip(made, self.protein, strict=False)) if a != b), None)
        ok = made == self.protein
        first_wrong = wrong if wrong is not None else min(len(made), len(self.protein))
        return [ConstraintCheck(f"EnforceTranslation(table {self.codon_table})", ok,
                                "encodes the protein" if ok else f"residue {first_wrong + 1} differs")]


class CodonRule(Rule):
    def __init__(self, layout: Layout, codons: list[np.ndarray]):
        self.layout, self.codons = layout, codons
        self._tables: dict = {}

    def allowed(self, token: Token) -> np.ndarray:
        ok = np.ones(4**self.layout.k, dtype=bool)
        for j in token.live:
            residue, phase = divmod(token.first + j - self.layout.start, 3)
            if residue >= len(self.codons):
                continue
            outside = max(0, phase - j)  # the codon's bases before the token
            known = [BASES.index(b) for b in token.before[len(token.before) - outside :]] if outside else []
            ok &= self._table(residue, phase, j, tuple(known))
        return ok

    def _table(self, residue: int, phase: int, j: int, known: tuple[int, ...]) -> np.ndarray:
        """[4^k] bool: the token's bases up to j keep codon `residue` (phase = j's place in it) possible."""
        key = (residue, phase, j, known)
        if key not in self._tables:
            allowed, digits = self.codons[residue], self.layout.digits
            inside = [digits[:, j - phase + q] for q in range(len(known), phase + 1)]
            bases = [np.full(4**self.layout.k, b) for b in known] + inside
            if phase == 0:
                table = allowed.any(axis=(1, 2))[bases[0]]
            elif phase == 1:
                table = allowed.any(axis=2)[bases[0], bases[1]]
            else:
                table = allowed[bases[0], bases[1], bases[2]]
            self._tables[key] = table
        return self._tables[key]
