"""How far a long job is, in one line for a person: what is done, of how much, and what is left."""

from __future__ import annotations


def progress_line(done: int, total: int, unit: str, seconds: float) -> str:
    """E.g. "512 of 2,000 ALT alleles (26%) in 16 s, about 48 s left" (the estimate once some is done)."""
    line = f"{done:,} of {total:,} {unit} ({100 * done / max(total, 1):.0f}%) in {seconds:.0f} s"
    if 0 < done < total:
        left = seconds * (total - done) / done
        line += f", about {left:.0f} s left" if left >= 0.5 else ", under a second left"
    return line
