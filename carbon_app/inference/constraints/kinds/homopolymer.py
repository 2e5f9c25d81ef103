"""No run of one base longer than `max_homopolymer` bases (across the prompt junction too)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....core.dna import BASES
from ....core.validate import whole_number
from ..part import JUNCTION, Constraint, ConstraintCheck, Field, Layout, Rule, Token, chisel_check


@dataclass(frozen=True)
class MaxHomopolymer(Constraint):
    max_homopolymer: int

    fields = (Field("max_homopolymer", "Longest homopolymer (0 = any)", "the longest run of one base allowed",
                    number=True, default=0),)
    order = 30

    @classmethod
    def parse(cls, max_homopolymer=None) -> MaxHomopolymer | None:
        longest = 0 if max_homopolymer in (None, "") else whole_number(max_homopolymer, "the longest homopolymer", 0)
        return cls(longest) if longest else None

    def options(self) -> dict[str, str]:
        return {"max_homopolymer": str(self.max_homopolymer)}

    @classmethod
    def values_off(cls) -> dict[str, object]:
        return {"max_homopolymer": 0}

    def label(self) -> str:
        return f"no homopolymer over {self.max_homopolymer}"

    def reach(self) -> int:
        return self.max_homopolymer + 1

    def too_long_for(self, n_bases: int) -> str | None:
        most = n_bases + JUNCTION
        if self.max_homopolymer <= most:
            return None
        return (f"the longest homopolymer ({self.max_homopolymer:,}) is longer than the design's {n_bases:,} bases "
                f"and the {JUNCTION} prompt bases before them: give at most {most:,}, or 0 for any length")

    def rule(self, layout: Layout) -> Rule:
        return RunRule(layout, self.max_homopolymer)

    def checks(self, design: str, head: str) -> list[ConstraintCheck]:
        from dnachisel import AvoidPattern

        run = self.max_homopolymer + 1
        return [chisel_check(f"AvoidPattern(homopolymer > {self.max_homopolymer})",
                             [AvoidPattern(f"{run}x{base}") for base in "ACGT"], design, head)]


class RunRule(Rule):
    """No run of one base longer than `longest` may end at a design base, counting the bases before the token.

    Tables made once per span of design bases in a token say, for every 6-mer, whether a run within it is
    already too long, and how many more bases before it a run from its first base could take: a step costs
    the same whatever the bound (a long bound is never spelled out as a motif of its length)."""

    def __init__(self, layout: Layout, longest: int):
        digits, k = layout.digits, layout.k
        within = np.ones_like(digits)  # [4^k, k]: the run ending at base j, within the 6-mer
        for j in range(1, k):
            within[:, j] = np.where(digits[:, j] == digits[:, j - 1], within[:, j - 1] + 1, 1)
        self.within, self.longest = within, longest
        self.from_first = within == np.arange(1, k + 1)  # the run at base j began at the first base
        self.first_is = [digits[:, 0] == b for b in range(4)]
        self._spans: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def _span(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """For design bases a..b of a token: (no run within the 6-mer is too long, the most bases before it a run
        from its first base may still take (-1: none ends at a design base))."""
        if (a, b) not in self._spans:
            within, head = self.within[:, a : b + 1], self.from_first[:, a : b + 1]
            longest_head = np.where(head, within, 0).max(axis=1)
            room = np.where(longest_head > 0, self.longest - longest_head, np.iinfo(np.int64).max)
            self._spans[a, b] = (within.max(axis=1) <= self.longest, room)
        return self._spans[a, b]

    def allowed(self, token: Token) -> np.ndarray:
        before, live = token.before, token.live
        ok, room = self._span(live[0], live[-1])  # a token's design bases are consecutive
        if not before or before[-1] not in BASES:
            return ok
        last = before[-1]
        carried = min(len(before) - len(before.rstrip(last)), self.longest + 1)
        return ok & ~(self.first_is[BASES.index(last)] & (room < carried))
