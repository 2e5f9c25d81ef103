"""No run of one base longer than `max_homopolymer` bases (across the prompt junction too)."""

from __future__ import annotations

from dataclasses import dataclass

from ....core.validate import whole_number
from ..part import Constraint, ConstraintCheck, Field, Layout, MotifRule, Rule, chisel_check, motif_matrix


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

    def rule(self, layout: Layout) -> Rule:
        return MotifRule(layout, [motif_matrix(base * (self.max_homopolymer + 1)) for base in "ACGT"])

    def checks(self, design: str, head: str) -> list[ConstraintCheck]:
        from dnachisel import AvoidPattern

        run = self.max_homopolymer + 1
        return [chisel_check(f"AvoidPattern(homopolymer > {self.max_homopolymer})",
                             [AvoidPattern(f"{run}x{base}") for base in "ACGT"], design, head)]
