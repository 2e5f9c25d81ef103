"""A delta in context: how it ranks among every possible substitution near the variant.

A delta of -0.8 means little on its own: a model's deltas differ from region to
region. Set beside the deltas of all 3 x (2N + 1) substitutions within N bases
(each read in its own windows, by the scan), it reads as "more damaging than
93% of the 1,203 possible substitutions within 200 bases".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.dna import BASES, clean_sequence
from ..model.backend import Backend
from .scan import mean_substitution_deltas
from .spec import ScoringSpec


@dataclass
class ScoreContext:
    delta: float
    radius: int
    start: int  # the region ranked against, 1-based inclusive
    end: int
    others: np.ndarray  # the deltas of every other substitution in it

    @property
    def count(self) -> int:
        return len(self.others)

    @property
    def more_damaging_than(self) -> float:
        """The share of the other substitutions with a higher delta (ties count half)."""
        if not self.count:
            return float("nan")
        return float(((self.others > self.delta).sum() + 0.5 * (self.others == self.delta).sum()) / self.count)

    def sentence(self) -> str:
        if not self.count:
            return f"no other substitution within {self.radius:,} bases to compare with"
        return (f"more damaging than {100 * self.more_damaging_than:.0f}% of the {self.count:,} possible "
                f"substitutions within {self.radius:,} base{'s' if self.radius != 1 else ''}")

    def to_dict(self) -> dict:
        return {"radius": self.radius, "start": self.start, "end": self.end, "substitutions": self.count,
                "more_damaging_than": self.more_damaging_than, "sentence": self.sentence()}


def rank_in(deltas: np.ndarray, region_start0: int, pos0: int, ref_len: int, alt: str | None, delta: float,
            radius: int) -> ScoreContext:
    """Rank `delta` among the substitution deltas [positions, 4] of a scan starting at `region_start0`
    (0-based), using the positions within `radius` of the variant; a substitution's own entry is left out."""
    lo = max(region_start0, pos0 - radius)
    hi = min(region_start0 + len(deltas), pos0 + ref_len + radius)
    block = np.array(deltas[lo - region_start0 : hi - region_start0], dtype=float)
    if ref_len == 1 and alt in BASES:
        block[pos0 - lo, BASES.index(alt)] = np.nan
    others = block[np.isfinite(block)]
    return ScoreContext(delta=float(delta), radius=radius, start=lo + 1, end=hi, others=others)


def score_context(bundle: Backend, sequence: str, pos: int, ref_len: int, alt: str | None, delta: float,
                  spec: ScoringSpec, progress: Callable[[float], None] | None = None) -> ScoreContext:
    """Score every substitution within the spec's context radius of a variant at `pos` (1-based, `ref_len`
    reference bases), each in the windows `score_variant` reads it in, with the spec `delta` was scored with,
    and rank `delta` among them."""
    radius = spec.context
    seq = clean_sequence(sequence, what="sequence")
    lo, hi = max(0, pos - 1 - radius), min(len(seq), pos - 1 + ref_len + radius)
    deltas = mean_substitution_deltas(bundle, seq, list(range(lo, hi)), spec, progress=progress)
    return rank_in(deltas, lo, pos - 1, ref_len, alt, delta, radius)
