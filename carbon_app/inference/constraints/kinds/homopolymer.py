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

    Tables made once per k say, for every 6-mer, how long the run ending at each of its bases is within it and
    whether that run goes back to its first base (then it continues the run the bases before it end with), so
    a step costs the same whatever the bound: a long bound is never spelled out as a motif of its length."""

    def __init__(self, layout: Layout, longest: int):
        digits, k = layout.digits, layout.k
        within = np.ones_like(digits)
        for j in range(1, k):
            within[:, j] = np.where(digits[:, j] == digits[:, j - 1], within[:, j - 1] + 1, 1)
        self.within, self.longest = within, longest
        self.from_first = within == np.arange(1, k + 1)  # [4^k, k]: the run at base j began at the first base
        self.first = digits[:, 0]

    def allowed(self, token: Token) -> np.ndarray:
        before, live = token.before, token.live
        runs = self.within[:, live]
        if before and before[-1] in BASES:
            last = before[-1]
            carried = min(len(before) - len(before.rstrip(last)), self.longest + 1)
            runs = runs + np.where(self.first == BASES.index(last), carried, 0)[:, None] * self.from_first[:, live]
        return (runs <= self.longest).all(axis=1)
