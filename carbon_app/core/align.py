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


def normalized(sequence: Sequence, pos0: int, ref: str, alt: str) -> tuple[int, str, str]:
    """The one form of the change `ref` at 0-based `pos0` becoming `alt` that every equivalent writing shares,
    as `bcftools norm -f` writes it (Tan et al. 2015): the bases both alleles share at either end trimmed, an
    insertion or deletion moved as far left (5') as its repeat lets it go and anchored on the base before it
    (the base after it at the sequence's start). Returns (0-based position, REF, ALT)."""
    while True:
        if ref and alt and ref[-1] == alt[-1]:
            ref, alt = ref[:-1], alt[:-1]
        elif (not ref or not alt) and pos0 > 0:
            pos0 -= 1
            ref, alt = sequence[pos0] + ref, sequence[pos0] + alt
        else:
            break
    while len(ref) > 1 and len(alt) > 1 and ref[0] == alt[0]:
        ref, alt, pos0 = ref[1:], alt[1:], pos0 + 1
    if not ref or not alt:  # at the sequence's start: anchored on the base after
        after = sequence[pos0 + len(ref)]
        ref, alt = ref + after, alt + after
    return pos0, ref, alt


def _unanchored(pos0: int, ref: str, alt: str) -> tuple[int, str, str]:
    head, tail = shared_ends(ref, alt)
    return pos0 + head, ref[head : len(ref) - tail], alt[head : len(alt) - tail]


def five_prime(sequence: Sequence, pos0: int, ref: str, alt: str) -> tuple[int, str, str]:
    """(0-based first base, removed, added) of the change at its 5'-most placement, without anchor bases: the
    bases `removed` from the first base on become `added` (an insertion: `added` goes before the first base).
    An insertion or deletion moves along the repeat it lies in; anything else stays where it is."""
    lo, removed, added = _unanchored(pos0, ref, alt)
    if removed and added:
        return lo, removed, added
    moved = removed or added
    while lo > 0 and sequence[lo - 1] == moved[-1]:
        moved, lo = moved[-1] + moved[:-1], lo - 1
    return lo, moved if removed else "", moved if added else ""


def three_prime(sequence: Sequence, pos0: int, ref: str, alt: str) -> tuple[int, str, str]:
    """As `five_prime`, at the change's 3'-most placement: where HGVS names it."""
    lo, removed, added = _unanchored(pos0, ref, alt)
    if removed and added:
        return lo, removed, added
    moved, end = removed or added, len(sequence)
    while lo + len(removed) < end and sequence[lo + len(removed)] == moved[0]:
        moved, lo = moved[1:] + moved[0], lo + 1
    return lo, moved if removed else "", moved if added else ""


def slide_span(sequence: Sequence, pos0: int, ref: str, alt: str) -> tuple[int, int]:
    """0-based, half-open: the bases a change touches wherever along its repeat it is placed, the same on
    either strand: a deletion's deleted bases at every placement; an insertion's neighbours at its outermost
    placements (and the repeat between them); a substitution or delins, its changed bases."""
    first, removed, added = five_prime(sequence, pos0, ref, alt)
    last, _, _ = three_prime(sequence, pos0, ref, alt)
    if removed:
        return first, last + len(removed)
    return max(first - 1, 0), min(last + 1, len(sequence))


def placements(sequence: Sequence, pos0: int, ref: str, alt: str) -> list[tuple[int, int, int]]:
    """Every placement of the change along its repeat, 5' to 3': (0-based first base, bases removed, bases
    added), without anchor bases; a substitution or delins has one. Each gives the same alternate sequence."""
    first, removed, added = five_prime(sequence, pos0, ref, alt)
    last, _, _ = three_prime(sequence, pos0, ref, alt)
    return [(at, len(removed), len(added)) for at in range(first, last + 1)]


def placed_columns(at: int, removed: int, added: int, length: int) -> list[tuple[int | None, int | None]]:
    """The columns (index in REF, index in ALT; None: a gap) aligning a sequence of `length` bases with the
    one where `removed` bases from `at` become `added` ones: the bases before and after pair up, the changed
    ones pair as substitutions as far as both have them, the rest face gaps."""
    both = min(removed, added)
    columns = [(i, i) for i in range(at + both)]
    columns += [(at + i, None) for i in range(both, removed)]
    columns += [(None, at + i) for i in range(both, added)]
    return columns + [(i, i + added - removed) for i in range(at + removed, length)]
