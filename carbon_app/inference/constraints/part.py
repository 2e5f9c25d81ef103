"""What every design constraint is: one object with one interface, and the tables its parts share.

A constraint (`Constraint`) is a frozen value parsed from the fields a face sends (`fields`: each
one's form label and CLI flag). Given where a request's design lies among its generated tokens (a
`Layout`), it makes a `Rule`: the 6-mers it allows at a token (`Rule.allowed`), given the bases
already chosen, with whatever look-ahead keeps it from walking into a dead end. It also names itself
for a conflict (`label`, `pieces`), may say why it alone cannot be met (`why_impossible`), may fix
the design's length (`fixed_length`), may bound the GC that the bases it governs can hold (`gc_spans`,
the look-ahead a GC range reads), and checks a finished design (`checks`).

Every check splits into the bases before a token (one row's history: plain Python) and the token's
own bases (the same for every row and step: tables made once per k), so a step costs a few table
look-ups, not a pass over every 6-mer per base.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cache
from typing import ClassVar

import numpy as np

from ...core.dna import BASES, IUPAC

GC_BASES = np.array([b in "GC" for b in BASES])
#: prompt bases read with a design when it is checked, so that a site or run across the junction is found
JUNCTION = 20


@dataclass(frozen=True)
class Field:
    """One field a constraint reads: a keyword of the request, a form input and a CLI flag."""

    name: str  # the keyword (and the HTTP API's parameter); the CLI flag is --name-with-dashes
    label: str  # the form's label
    help: str  # the CLI's help
    number: bool = False  # a whole number (a form Number, an int flag) rather than text
    default: object = None  # the form's value before the user types (None: blank)
    placeholder: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@cache
def kmer_tables(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(digits [4^k, k], GC prefix counts [4^k, k+1], one-hot [4^k, k*4]) of every k-mer, BASES order."""
    n = 4**k
    digits = (np.arange(n)[:, None] // 4 ** np.arange(k - 1, -1, -1)) % 4
    gc_prefix = np.concatenate([np.zeros((n, 1), dtype=int), np.cumsum(GC_BASES[digits], axis=1)], axis=1)
    one_hot = np.eye(4, dtype=np.float32)[digits].reshape(n, k * 4)
    return digits, gc_prefix, one_hot


@dataclass
class Layout:
    """Where one request's design lies among its generated tokens.

    The generated tokens cover `len(static)` bases; the first `start` are the prompt's leftover bases,
    the next `n_bases` the design; later ones (to fill the last token) are discarded and free.
    `prompt_tail` holds the prompt's last whole-token bases before them (a site across the junction)."""

    k: int
    start: int
    n_bases: int
    static: np.ndarray  # [n_tokens * k, 4] bool: what the mask and fixed bases allow per position
    prompt_tail: str = ""
    gc_spans: tuple[tuple[int, int, int, int], ...] = ()  # from the parts: see `Constraint.gc_spans`
    gc_bounded_by: tuple[str, ...] = ()  # the labels of the parts that gave them
    digits: np.ndarray = field(init=False, repr=False)
    gc_prefix: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.digits, self.gc_prefix, _ = kmer_tables(self.k)

    def bound_gc(self, parts) -> None:
        """Take the GC bounds that `parts` put on spans of the design (the look-ahead a GC range reads)."""
        found = [(part.label(), part.gc_spans(self)) for part in parts]
        self.gc_spans = tuple(span for _, spans in found for span in spans)
        self.gc_bounded_by = tuple(label for label, spans in found if spans)

    @property
    def design_static(self) -> np.ndarray:
        """[n_bases, 4] what the mask allows at each design base."""
        return self.static[self.start : self.start + self.n_bases]

    def base_gc(self) -> tuple[np.ndarray, np.ndarray]:
        """Per design base, as the mask allows it: (must be G or C, may be G or C), [n_bases] bool each."""
        design = self.design_static
        return ~design[:, ~GC_BASES].any(1), design[:, GC_BASES].any(1)

    def remaining_gc(self) -> tuple[np.ndarray, np.ndarray]:
        """(least, most) GC the design bases from d onwards can hold, for d = 0..n_bases: each base by
        what the mask allows, except where a part's `gc_spans` bounds a span of them together (a codon)."""
        per_lo, per_hi = (gc.astype(int) for gc in self.base_gc())
        for begin, end, least, most in self.gc_spans:
            per_lo[begin:end], per_hi[begin:end] = 0, 0
            per_lo[begin], per_hi[begin] = least, most
        suffix = [np.concatenate([np.cumsum(per[::-1])[::-1], [0]]) for per in (per_lo, per_hi)]
        return suffix[0], suffix[1]


@dataclass(frozen=True)
class Token:
    """The token being chosen: its step, the generated position of its first base, which of its bases are
    design bases (`live`), the bases generated before it (`chosen`) and those with the prompt's tail."""

    step: int
    first: int
    live: list[int]
    chosen: str
    before: str


class Rule:
    """One constraint bound to one request's layout: the 6-mers it allows at each token."""

    def allowed(self, token: Token) -> np.ndarray:
        """[4^k] bool: the 6-mers this rule allows at `token`."""
        raise NotImplementedError


class Constraint:
    """One design constraint (a frozen dataclass in its own module under `kinds/`). See the module doc."""

    #: the fields it reads, in the order forms and the CLI show them
    fields: ClassVar[tuple[Field, ...]] = ()
    #: its place among the constraints in forms, reports and the search for conflicts
    order: ClassVar[int] = 0

    @classmethod
    def parse(cls, **values) -> Constraint | None:
        """The constraint from its fields as any face sends them (blank: the form's untouched field), each
        checked and refused with a sentence naming it; None when they leave it off."""
        raise NotImplementedError

    def options(self) -> dict[str, str]:
        """Its fields as the command line takes them (`--name value`): a FASTA header, the provenance."""
        raise NotImplementedError

    def values(self) -> dict[str, object]:
        """Its fields' typed values (JSON: `describe`)."""
        return asdict(self)

    @classmethod
    def values_off(cls) -> dict[str, object]:
        """The typed values of its fields when it is off."""
        raise NotImplementedError

    def label(self) -> str:
        """How a conflict names it: 'the protein MSK…', 'avoiding BsaI'."""
        raise NotImplementedError

    def pieces(self) -> list[Constraint]:
        """The smallest parts it splits into when a conflict is looked for (one per site, say)."""
        return [self]

    def reach(self) -> int:
        """How many bases before the design it must see (a site across the prompt junction)."""
        return 1

    def too_long_for(self, n_bases: int) -> str | None:
        """A sentence when it asks about a longer stretch of bases than a design of `n_bases` and the JUNCTION
        prompt bases read with it hold: a run or site that could never be found there, refused before any
        table is made for it."""
        return None

    def fixed_length(self) -> tuple[int, str] | None:
        """(bases, why) where it sets the design's length: (9, 'the protein has 3 residues, 9 bases')."""
        return None

    def gc_spans(self, layout: Layout) -> list[tuple[int, int, int, int]]:
        """(first design base, past the last, least GC, most GC) of spans whose GC it bounds together."""
        return []

    def rule(self, layout: Layout) -> Rule:
        """What it allows at each token of `layout`'s design."""
        raise NotImplementedError

    def why_impossible(self, layout: Layout) -> str | None:
        """A sentence when the layout alone (mask, prompt, the GC other parts leave) rules it out."""
        return None

    def checks(self, design: str, head: str) -> list[ConstraintCheck]:
        """PASS/FAIL of it on a finished `design` after the prompt's last bases `head`."""
        raise NotImplementedError


@dataclass
class ConstraintCheck:
    """One design constraint checked on a finished design, named as DNA Chisel names its specifications."""

    specification: str
    passes: bool
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def chisel_check(label: str, specifications: list, design: str, head: str, verb: str = "found at") -> ConstraintCheck:
    """One check from DNA Chisel's own evaluations of `specifications` on `head + design`: where it fails, in
    design coordinates (from 0 or below: across the junction); a failure wholly inside the prompt is the
    prompt's, not the design's."""
    from dnachisel import DnaOptimizationProblem

    problem = DnaOptimizationProblem(sequence=head + design, constraints=specifications, logger=None)
    found = list(problem.constraints_evaluations())
    spans = sorted({(loc.start - len(head) + 1, loc.end - len(head)) for e in found if not e.passes
                    for loc in (e.locations or []) if loc.end > len(head)})
    failed = bool(spans) or any(not e.passes and not e.locations for e in found)
    shown = [f"{a}-{b}" if a >= 1 else f"{a} to {b} (across the junction)" for a, b in spans[:5]]
    detail = (f"{verb} " + ", ".join(shown) + (" …" if len(spans) > 5 else "")
              if spans else ("fails" if failed else "passes"))
    return ConstraintCheck(label, not failed, detail)


def motif_matrix(code: str) -> np.ndarray:
    """An IUPAC motif as [length, 4] bool: the bases each position allows (BASES order)."""
    return np.array([[base in IUPAC[c] for base in BASES] for c in code])


class MotifRule(Rule):
    """No motif of `motifs` ([m, 4] bool each) may end at a design base, counting the bases before it."""

    def __init__(self, layout: Layout, motifs: list[np.ndarray]):
        self.motifs, self.n_kmers = motifs, 4**layout.k
        k, digits = layout.k, layout.digits
        # per motif and per token base j: the 6-mers whose bases up to j complete the motif, given that
        # the motif's bases before the token match
        self.tables = []
        for motif in motifs:
            m, per_end = len(motif), []
            for j in range(k):
                inside = motif[max(0, m - 1 - j) :]  # the motif's bases that fall in the token, ending at j
                begin = j + 1 - len(inside)
                per_end.append(np.logical_and.reduce([inside[p][digits[:, begin + p]] for p in range(len(inside))]))
            self.tables.append(per_end)

    def allowed(self, token: Token) -> np.ndarray:
        ok = np.ones(self.n_kmers, dtype=bool)
        before = token.before
        for motif, per_end in zip(self.motifs, self.tables, strict=True):
            m = len(motif)
            for j in token.live:
                outside = m - 1 - j  # the motif's bases before the token
                if outside > len(before):
                    continue
                tail = before[len(before) - outside :] if outside > 0 else ""
                if all(base in BASES and motif[p][BASES.index(base)] for p, base in enumerate(tail)):
                    ok &= ~per_end[j]
        return ok
