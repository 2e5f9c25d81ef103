"""How far a long job is, in one line for a person: what is done, of how much, and what is left."""

from __future__ import annotations

import time
from collections.abc import Callable


def progress_line(done: int, total: int, unit: str, seconds: float) -> str:
    """E.g. "512 of 2,000 ALT alleles (26%) in 16 s, about 48 s left" (the estimate once some is done)."""
    line = f"{done:,} of {total:,} {unit} ({100 * done / max(total, 1):.0f}%) in {seconds:.0f} s"
    if 0 < done < total:
        left = seconds * (total - done) / done
        line += f", about {left:.0f} s left" if left >= 0.5 else ", under a second left"
    return line


def told_in_parts(tell: Callable[[float, str], None], total: int, unit: str, what: str) -> Callable[[float], None]:
    """A job's progress callback (the share done, 0 to 1) that tells `tell(share, line)` how many of `total`
    `unit` are done and about how long is left, as the VCF tab does: `what` leads the line."""
    began = time.monotonic()

    def told(share: float) -> None:
        done = min(total, round(share * total))
        tell(share, f"{what}: {progress_line(done, total, unit, time.monotonic() - began)}")

    return told
