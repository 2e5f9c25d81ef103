"""Design constraints checked directly on a design's bases, independently of the engine that held them."""

from __future__ import annotations

import re
from types import SimpleNamespace

from Bio.Seq import Seq

from carbon_app.core.dna import reverse_complement, satisfies
from carbon_app.inference.constraints import DesignConstraints

SITES = {"BsaI": "GGTCTC", "BsmBI": "CGTCTC", "EcoRI": "GAATTC"}


def violations(seq: str, c: DesignConstraints, prompt: str = "", mask: str | None = None) -> list[str]:
    """Every constraint `seq` breaks, checked directly on the bases (independently of the engine)."""
    c = SimpleNamespace(**c.values())  # every field's value, off ones included
    found = []
    if c.protein and str(Seq(seq).translate(table=c.codon_table)) != c.protein:
        found.append("protein")
    junction = prompt[-12:] + seq  # sites may not form across the prompt/design junction either
    for name in c.avoid:
        site = SITES.get(name, name)
        for motif in {site, reverse_complement(site)}:
            pattern = "".join(f"[{''.join(sorted(set('ACGT') & set(iupac(ch))))}]" for ch in motif)
            for m in re.finditer(f"(?=({pattern}))", junction):
                if m.start() + len(motif) > len(prompt[-12:]):  # ends in the design
                    found.append(f"site {motif}")
    if c.max_homopolymer and re.search("|".join(f"{b}{{{c.max_homopolymer + 1}}}" for b in "ACGT"),
                                       (prompt[-12:] + seq)[len(prompt[-12:]) - c.max_homopolymer:] if prompt
                                       else seq):
        found.append("homopolymer")
    if c.gc:
        lo, hi = c.gc
        gc = (seq.count("G") + seq.count("C")) / len(seq)
        if not lo - 1e-9 <= gc <= hi + 1e-9:
            found.append(f"GC {gc:.3f}")
        if c.gc_window:
            for i in range(len(seq) - c.gc_window + 1):
                window = seq[i : i + c.gc_window]
                share = (window.count("G") + window.count("C")) / c.gc_window
                if not lo - 1e-9 <= share <= hi + 1e-9:
                    found.append(f"GC window at {i + 1}")
                    break
    if mask and not satisfies(seq, mask):
        found.append("mask")
    return found


def iupac(code: str) -> str:
    from carbon_app.core.dna import IUPAC

    return IUPAC[code]

