"""Every way one insertion or deletion can be written, found by brute force."""

from __future__ import annotations


def writings(sequence: str, alternate: str) -> list[str]:
    """Every POS:REF>ALT (VCF-anchored on the base before) and HGVS g. name of a single insertion or deletion
    that turns `sequence` into `alternate`."""
    n = len(alternate) - len(sequence)
    found = []
    for at in range(1, len(sequence) + 1):
        if n < 0 and at - n <= len(sequence) and sequence[:at] + sequence[at - n :] == alternate:
            gone = sequence[at : at - n]  # bases at..at-n-1 (0-based) deleted
            found.append(f"{at}:{sequence[at - 1]}{gone}>{sequence[at - 1]}")
            found.append(f"g.{at + 1}del" if n == -1 else f"g.{at + 1}_{at - n}del")
        if n > 0 and at < len(sequence) and sequence[:at] + alternate[at : at + n] + sequence[at:] == alternate:
            added = alternate[at : at + n]  # inserted between bases at-1 and at (0-based)
            found.append(f"{at}:{sequence[at - 1]}>{sequence[at - 1]}{added}")
            found.append(f"g.{at}_{at + 1}ins{added}")
    return found

