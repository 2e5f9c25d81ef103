"""The shared ends of two sequences: how two alleles, two proteins or two whole sequences line up around the
one stretch where they differ."""

from __future__ import annotations

from collections.abc import Sequence


def shared_ends(a: Sequence, b: Sequence) -> tuple[int, int]:
    """(head, tail): how many leading items `a` and `b` share, and how many trailing ones beyond those (the
    two never overlap, so `a[head : len(a) - tail]` and `b[head : len(b) - tail]` are what differs)."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    return head, tail


def anchored(sequence: Sequence, lo: int, hi: int, new: str) -> tuple[int, str, str]:
    """(POS, REF, ALT) in VCF's form for replacing `sequence[lo:hi]` (0-based, half-open) with `new`: an
    insertion or deletion takes the base before it as its anchor (the base after, at the sequence's start)."""
    ref = sequence[lo:hi]
    if ref and new:
        return lo + 1, ref, new
    if lo > 0:
        anchor = sequence[lo - 1]
        return lo, anchor + ref, anchor + new
    anchor = sequence[hi]
    return lo + 1, ref + anchor, new + anchor
