"""GC content of the designed bases within [lo, hi], and of every window of `gc_window` bases when given.

A 6-mer is allowed only while the bases still to come (what the mask and the other parts leave them,
`Layout.remaining_gc`) can bring the design, and every window it opens or continues, into range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ....core.validate import whole_number
from ....errors import InputError
from ..part import Constraint, ConstraintCheck, Field, Layout, Rule, Token, chisel_check


def gc_range(gc) -> tuple[float, float] | None:
    """'40:60', '0.4:0.6', (40, 60) or (0.4, 0.6) -> (0.4, 0.6); empty -> None."""
    if gc is None or (isinstance(gc, str) and not gc.strip()):
        return None
    parts = gc.replace("%", "").replace("-", ":").split(":") if isinstance(gc, str) else list(gc)
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise InputError(f"the GC range must be MIN:MAX (e.g. 40:60, in percent), not '{gc}'") from None
    if max(lo, hi) > 1:
        lo, hi = lo / 100, hi / 100
    if not 0 <= lo <= hi <= 1:
        raise InputError(f"the GC range must satisfy 0 <= MIN <= MAX <= 100%, not '{gc}'")
    return lo, hi


def count_bounds(lo: float, hi: float, bases: int) -> tuple[int, int]:
    """The GC counts of `bases` bases that lie within [lo, hi]."""
    return math.ceil(lo * bases - 1e-9), math.floor(hi * bases + 1e-9)


@dataclass(frozen=True)
class GCContent(Constraint):
    gc: tuple[float, float]  # fractions
    gc_window: int = 0  # 0: the range applies to the whole design only

    fields = (Field("gc", "GC range, % (MIN:MAX)", "GC range of the designed bases, MIN:MAX in percent (e.g. 40:60)",
                    placeholder="40:60"),
              Field("gc_window", "…in every window of (bases; 0 = whole design)",
                    "apply the GC range to every window of this many bases too", number=True, default=0))
    order = 40

    @classmethod
    def parse(cls, gc=None, gc_window=None) -> GCContent | None:
        window = 0 if gc_window in (None, "") else whole_number(gc_window, "the GC window (bases)", 0)
        bounds = gc_range(gc)
        return cls(bounds, window) if bounds else None

    def options(self) -> dict[str, str]:
        shown = {"gc": f"{100 * self.gc[0]:g}:{100 * self.gc[1]:g}"}
        return {**shown, "gc_window": str(self.gc_window)} if self.gc_window else shown

    @classmethod
    def values_off(cls) -> dict[str, object]:
        return {"gc": None, "gc_window": 0}

    def label(self) -> str:
        return (f"GC {100 * self.gc[0]:.0f}-{100 * self.gc[1]:.0f}%"
                + (f" in every {self.gc_window}-base window" if self.gc_window else ""))

    def rule(self, layout: Layout) -> Rule:
        return GCRule(layout, self)

    def why_impossible(self, layout: Layout) -> str | None:
        least, most = layout.remaining_gc()
        lo, hi = count_bounds(*self.gc, layout.n_bases)
        if most[0] >= lo and least[0] <= hi:
            return None
        by = " and ".join([*layout.gc_bounded_by, "the mask"]) + (" allow" if layout.gc_bounded_by else " allows")
        return (f"the GC range {100 * self.gc[0]:.0f}-{100 * self.gc[1]:.0f}% cannot be met: {by} "
                f"{100 * least[0] / layout.n_bases:.0f}-{100 * most[0] / layout.n_bases:.0f}% "
                f"over {layout.n_bases:,} bases")

    def checks(self, design: str, head: str) -> list[ConstraintCheck]:
        from dnachisel import EnforceGCContent, Location

        lo, hi = self.gc
        window = self.gc_window or None
        label = f"EnforceGCContent({100 * lo:.0f}-{100 * hi:.0f}%" + (f", {window} bp windows)" if window else ")")
        inside = Location(len(head), len(head) + len(design))
        return [chisel_check(label, [EnforceGCContent(mini=lo, maxi=hi, window=window, location=inside)], design,
                             head, verb="out of range at")]


class GCRule(Rule):
    def __init__(self, layout: Layout, constraint: GCContent):
        self.layout, self.window = layout, constraint.gc_window
        self.bounds = count_bounds(*constraint.gc, layout.n_bases)
        self.window_bounds = count_bounds(*constraint.gc, self.window) if self.window else None
        self.rest = layout.remaining_gc()
        must, can = layout.base_gc()
        self.window_rest = np.concatenate([[0], np.cumsum(must)]), np.concatenate([[0], np.cumsum(can)])

    def allowed(self, token: Token) -> np.ndarray:
        """The design's GC can still land in range after this token (and each GC window it closes is in range)."""
        layout, live, first, before = self.layout, token.live, token.first, token.before
        prefix = layout.gc_prefix
        lo, hi = self.bounds
        design = token.chosen[layout.start : layout.start + layout.n_bases]
        so_far = design.count("G") + design.count("C")
        inside = prefix[:, live[-1] + 1] - prefix[:, live[0]]  # the token's design bases
        done = first + live[-1] + 1 - layout.start
        least, most = self.rest
        ok = (so_far + inside + least[done] <= hi) & (so_far + inside + most[done] >= lo)
        if self.window_bounds is None:
            return ok
        w = self.window
        wlo, whi = self.window_bounds
        for j in live:
            d = first + j - layout.start
            if d + 1 < w:
                continue
            outside = w - (j + 1)  # the window's bases before the token (all design bases)
            tail = before[len(before) - outside :] if outside > 0 else ""
            count = tail.count("G") + tail.count("C") + prefix[:, j + 1] - prefix[:, max(0, j + 1 - w)]
            ok &= (count >= wlo) & (count <= whi)
        # look-ahead: each window this token opens or continues must still be able to land in range
        token_from = first + live[0] - layout.start  # design index of the token's first design base
        last = done - 1
        must, can = self.window_rest
        for end in range(last + 1, min(layout.n_bases, last + w)):
            begin = end - w + 1
            if begin < 0:
                continue
            if begin >= token_from:
                known = prefix[:, live[-1] + 1] - prefix[:, begin + layout.start - first]
            else:
                tail = before[len(before) - (token_from - begin) :]
                known = tail.count("G") + tail.count("C") + prefix[:, live[-1] + 1] - prefix[:, live[0]]
            rest_least, rest_most = must[end + 1] - must[last + 1], can[end + 1] - can[last + 1]
            ok &= (known + rest_least <= whi) & (known + rest_most >= wlo)
        return ok
