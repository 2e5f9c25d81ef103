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
