"""Design constraints enforced while sampling: a protein, sites to avoid, homopolymers, GC content.

A 6-mer token is two codons, so the model back-translates a protein itself:
at each token only the 6-mers that keep every constraint are allowed, given
the bases already chosen (the prompt's tail too, so a site cannot form across
the prompt/design junction). What each candidate 6-mer would complete is
checked at once for all 4,096 of them:

- a protein (`protein`, one-letter code, `*` a stop; an NCBI codon table by
  id): each codon the token completes must encode its residue, and a codon
  it leaves unfinished must be the start of one that does;
- sites to avoid (`avoid`): restriction enzymes by name (Biopython's
  `Bio.Restriction`: EcoRI, BsaI, BsmBI, ...) or IUPAC motifs, on both strands;
- homopolymers longer than `max_homopolymer` bases;
- GC content of the designed bases in [lo, hi] (`gc`), and of every window of
  `gc_window` bases: a candidate is allowed only while the bases still to come
  can bring the total into range.

Where a constraint couples a token's bases (the allowed 6-mers are not every
combination of allowed bases) the token is drawn from the constrained joint
distribution, in base-level mode too. Should every 6-mer be ruled out at some
step (a dead end the look-ahead did not see), generation steps back one token
and rules out the choice that led there: the search is exact, and the same
seed still gives the same design. Before any model work `check_feasible`
runs the same search without the model and names the conflict when there is
no design at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.dna import BASES, IUPAC, reverse_complement
from ..core.validate import whole_number
from ..errors import InputError
from .marginals import kmer_log_mask
from .sampling import SamplingParams, step_logprobs

_GC = np.array([b in "GC" for b in BASES])
#: steps back a design may take before its constraints are called too tight to meet
MAX_STEPS_BACK = 5000


def _motif_matrix(code: str) -> np.ndarray:
    """An IUPAC motif as [length, 4] bool: the bases each position allows (BASES order)."""
    return np.array([[base in IUPAC[c] for base in BASES] for c in code])


def resolve_site(name: str) -> tuple[str, str]:
    """(label, IUPAC site) for a restriction enzyme's name or an IUPAC motif."""
    from Bio import Restriction

    text = name.strip()
    enzyme = Restriction.AllEnzymes.get(text) if text in Restriction.AllEnzymes.elements() else None
    if enzyme is None:  # names are case-sensitive in REBASE; forgive the case of a unique match
        matches = [e for e in Restriction.AllEnzymes.elements() if e.lower() == text.lower()]
        enzyme = Restriction.AllEnzymes.get(matches[0]) if len(matches) == 1 else None
    if enzyme is not None:
        return f"{enzyme} ({enzyme.site})", str(enzyme.site)
    code = text.upper()
    if not code or any(c not in IUPAC for c in code):
        raise InputError(f"'{name}' is neither a restriction enzyme Biopython knows (EcoRI, BsaI, BsmBI, ...) nor "
                         "an IUPAC motif (A C G T and N R Y S W K M B D H V)")
    return code, code


@dataclass(frozen=True)
class DesignConstraints:
    protein: str = ""
    codon_table: int = 1
    avoid: tuple[str, ...] = ()
    max_homopolymer: int = 0  # 0: off
    gc: tuple[float, float] | None = None  # fractions
    gc_window: int = 0  # 0: the GC range applies to the whole design only

    @classmethod
    def from_options(cls, protein=None, codon_table=1, avoid=None, max_homopolymer=None, gc=None,
                     gc_window=None) -> DesignConstraints:
        """Constraints from what a form, the CLI or a notebook gives, each field checked and named."""
        from Bio.Data.CodonTable import unambiguous_dna_by_id

        protein = "".join(str(protein or "").split()).upper()
        bad = next((c for c in protein if c not in "ACDEFGHIKLMNPQRSTVWY*"), None)
        if bad is not None:
            raise InputError(f"the protein has '{bad}' at residue {protein.index(bad) + 1}; use the one-letter "
                             "code of the 20 amino acids and * for a stop")
        table = whole_number(codon_table if codon_table not in (None, "") else 1, "the codon table", 1)
        if table not in unambiguous_dna_by_id:
            raise InputError(f"the codon table must be an NCBI table id ({', '.join(map(str, unambiguous_dna_by_id))}),"
                             f" not {table}")
        if isinstance(avoid, str):
            avoid = avoid.replace(";", ",").replace(" ", ",").split(",")
        sites = tuple(a.strip() for a in (avoid or ()) if a and a.strip())
        for site in sites:
            resolve_site(site)
        homopolymer = 0 if max_homopolymer in (None, "") else whole_number(max_homopolymer,
                                                                            "the longest homopolymer", 0)
        window = 0 if gc_window in (None, "") else whole_number(gc_window, "the GC window (bases)", 0)
        return cls(protein, table, sites, homopolymer, _gc_range(gc), window)

    @property
    def active(self) -> bool:
        return bool(self.protein or self.avoid or self.max_homopolymer or self.gc)

    def describe(self) -> dict:
        return {"protein": self.protein, "codon_table": self.codon_table, "avoid": list(self.avoid),
                "max_homopolymer": self.max_homopolymer, "gc": list(self.gc) if self.gc else None,
                "gc_window": self.gc_window}


def _gc_range(gc) -> tuple[float, float] | None:
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


@dataclass
class ConstraintChecker:
    """The 6-mers allowed at each generated token of one request, given the bases chosen before it.

    Positions: the generated tokens cover `n_tokens * k` bases; the first `start` of them are the
    prompt's leftover bases, the next `n_bases` the design; later ones (to fill the last token)
    are discarded and free.
    """

    constraints: DesignConstraints
    k: int
    start: int
    n_bases: int
    prompt_tail: str  # the prompt's last whole-6-mer bases, before the generated ones (junction sites, runs)
    static: np.ndarray  # [n_tokens * k, 4] bool: what the mask and fixed bases allow per position
    motifs: list[tuple[str, np.ndarray]] = field(default_factory=list)  # (label, [m, 4]) incl. reverse complements
    codons: list[np.ndarray] = field(default_factory=list)  # per residue, [4, 4, 4] bool allowed codons
    gc_bounds: tuple[int, int] | None = None  # allowed GC count of the whole design
    window_bounds: tuple[int, int] | None = None  # allowed GC count of each gc_window
    _digits: np.ndarray = field(init=False, repr=False)
    _rest: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = 4**self.k
        self._digits = (np.arange(n)[:, None] // 4 ** np.arange(self.k - 1, -1, -1)) % 4  # [4^k, k]
        design = self.static[self.start : self.start + self.n_bases]
        self._must_gc = ~design[:, ~_GC].any(1)  # per design base: only G or C allowed
        self._can_gc = design[:, _GC].any(1)  # G or C allowed
        self._rest = self._remaining_gc()
        # what the token's own bases do, for every 6-mer: sites ending at base j with the rest before it
        # matching; GC counts of its first j bases
        self._site_tables = []
        for _, motif in self.motifs:
            m, per_end = len(motif), []
            for j in range(self.k):
                inside = motif[max(0, m - 1 - j) :]  # the motif's bases that fall in the token, ending at j
                start = j + 1 - len(inside)
                per_end.append(np.logical_and.reduce(
                    [inside[p][self._digits[:, start + p]] for p in range(len(inside))]))
            self._site_tables.append(per_end)
        self._gc_prefix = np.concatenate([np.zeros((n, 1), dtype=int), np.cumsum(_GC[self._digits], axis=1)], axis=1)
        self._codon_cache: dict = {}
        self._static_cache: dict = {}
        self._one_hot = np.eye(4, dtype=np.float32)[self._digits].reshape(n, self.k * 4)  # [4^k, k*4]
        self._window_rest = (np.concatenate([[0], np.cumsum(self._must_gc)]),
                             np.concatenate([[0], np.cumsum(self._can_gc)]))

    @classmethod
    def build(cls, constraints: DesignConstraints, k: int, start: int, n_bases: int, context: str,
              static: np.ndarray) -> ConstraintChecker:
        from Bio.Data.CodonTable import unambiguous_dna_by_id

        motifs: list[tuple[str, np.ndarray]] = []
        for name in constraints.avoid:
            label, site = resolve_site(name)
            for code in dict.fromkeys([site, reverse_complement(site)]):
                motifs.append((label, _motif_matrix(code)))
        if constraints.max_homopolymer:
            run = constraints.max_homopolymer + 1
            motifs += [(f"homopolymer over {constraints.max_homopolymer} bases", _motif_matrix(b * run))
                       for b in "ACGT"]
        codons = []
        if constraints.protein:
            table = unambiguous_dna_by_id[constraints.codon_table]
            by_residue: dict[str, list[str]] = {"*": list(table.stop_codons)}
            for codon, residue in table.forward_table.items():
                by_residue.setdefault(residue, []).append(codon)
            for residue in constraints.protein:
                allowed = np.zeros((4, 4, 4), dtype=bool)
                for codon in by_residue.get(residue, []):
                    allowed[tuple(BASES.index(b) for b in codon)] = True
                codons.append(allowed)
        gc_bounds = window_bounds = None
        if constraints.gc:
            lo, hi = constraints.gc
            gc_bounds = (math.ceil(lo * n_bases - 1e-9), math.floor(hi * n_bases + 1e-9))
            if constraints.gc_window:
                w = constraints.gc_window
                window_bounds = (math.ceil(lo * w - 1e-9), math.floor(hi * w + 1e-9))
        reach = max([len(m) for _, m in motifs] + [1])
        return cls(constraints, k, start, n_bases, context[-reach:], static, motifs, codons, gc_bounds, window_bounds)

    # -- look-ahead: how much GC the bases after a point can still bring ---------------------------

    def _remaining_gc(self) -> tuple[np.ndarray, np.ndarray]:
        """(least, most) GC the design positions from d onwards can hold, for d = 0..n_bases
        (codons of a protein counted whole, from their allowed codons)."""
        n = self.n_bases
        per_lo, per_hi = np.zeros(n + 1, dtype=int), np.zeros(n + 1, dtype=int)
        static = self.static[self.start : self.start + n]
        per_lo[:n], per_hi[:n] = self._must_gc, self._can_gc
        for i, allowed in enumerate(self.codons):
            if 3 * i + 3 > n:
                break
            rows = static[3 * i : 3 * i + 3]
            ok = allowed & rows[0][:, None, None] & rows[1][None, :, None] & rows[2][None, None, :]
            counts = [sum(BASES[x] in "GC" for x in idx) for idx in zip(*np.nonzero(ok), strict=True)]
            if counts:
                per_lo[3 * i : 3 * i + 3] = [min(counts), 0, 0]
                per_hi[3 * i : 3 * i + 3] = [max(counts), 0, 0]
        least = np.concatenate([np.cumsum(per_lo[:n][::-1])[::-1], [0]])
        most = np.concatenate([np.cumsum(per_hi[:n][::-1])[::-1], [0]])
        return least, most

    # -- the mask of one token ---------------------------------------------------------------------

    def allowed(self, step: int, chosen: str) -> np.ndarray:
        """[4^k] bool: the 6-mers allowed at token `step` after the generated bases `chosen`
        (step * k of them, fixed bases included): the per-position mask and every constraint.

        Every check splits into the bases before the token (one row's history: plain Python) and the
        token's own bases (the same for every row and step: tables made once), so a step costs a few
        table look-ups, not a pass over every 6-mer per base."""
        k = self.k
        first = step * k  # generated position of this token's first base
        live = [j for j in range(k) if self.start <= first + j < self.start + self.n_bases]
        ok = self.static_ok(step).copy()
        if not live:  # the last token's filling after the design is free
            return ok
        before = self.prompt_tail + chosen
        for index, (_, motif) in enumerate(self.motifs):  # each site that would end at one of the token's bases
            m = len(motif)
            for j in live:
                outside = m - 1 - j  # the site's bases before the token
                if outside > len(before):
                    continue
                tail = before[len(before) - outside :] if outside > 0 else ""
                if all(base in BASES and motif[p][BASES.index(base)] for p, base in enumerate(tail)):
                    ok &= ~self._site_tables[index][j]
        for j in live:
            residue, phase = divmod(first + j - self.start, 3)
            if residue >= len(self.codons):
                continue
            outside = max(0, phase - j)  # the codon's bases before the token
            known = [BASES.index(b) for b in before[len(before) - outside :]] if outside else []
            ok &= self._codon_table(residue, phase, j, tuple(known))
        if self.gc_bounds is not None:
            ok &= self._gc_ok(before, chosen, first, live)
        return ok

    def _codon_table(self, residue: int, phase: int, j: int, known: tuple[int, ...]) -> np.ndarray:
        """[4^k] bool: the token's bases up to j keep codon `residue` (phase = j's place in it) possible."""
        key = (residue, phase, j, known)
        if key not in self._codon_cache:
            allowed = self.codons[residue]
            inside = [self._digits[:, j - phase + q] for q in range(len(known), phase + 1)]
            bases = [np.full(4**self.k, b) for b in known] + inside
            if phase == 0:
                table = allowed.any(axis=(1, 2))[bases[0]]
            elif phase == 1:
                table = allowed.any(axis=2)[bases[0], bases[1]]
            else:
                table = allowed[bases[0], bases[1], bases[2]]
            self._codon_cache[key] = table
        return self._codon_cache[key]

    def _gc_ok(self, before: str, chosen: str, first: int, live: list[int]) -> np.ndarray:
        """The design's GC can still land in range after this token (and each GC window it closes is in range)."""
        lo, hi = self.gc_bounds
        design = chosen[self.start : self.start + self.n_bases]
        so_far = design.count("G") + design.count("C")
        inside = self._gc_prefix[:, live[-1] + 1] - self._gc_prefix[:, live[0]]  # the token's design bases
        done = first + live[-1] + 1 - self.start
        least, most = self._rest
        ok = (so_far + inside + least[done] <= hi) & (so_far + inside + most[done] >= lo)
        if self.window_bounds is not None:
            w = self.constraints.gc_window
            wlo, whi = self.window_bounds
            for j in live:
                d = first + j - self.start
                if d + 1 < w:
                    continue
                outside = w - (j + 1)  # the window's bases before the token (all design bases)
                tail = before[len(before) - outside :] if outside > 0 else ""
                count = (tail.count("G") + tail.count("C") + self._gc_prefix[:, j + 1]
                         - self._gc_prefix[:, max(0, j + 1 - w)])
                ok &= (count >= wlo) & (count <= whi)
            # look-ahead: each window this token opens or continues must still be able to land in range
            token_from = first + live[0] - self.start  # design index of the token's first design base
            last = done - 1
            must, can = self._window_rest
            for end in range(last + 1, min(self.n_bases, last + w)):
                begin = end - w + 1
                if begin < 0:
                    continue
                if begin >= token_from:
                    known = self._gc_prefix[:, live[-1] + 1] - self._gc_prefix[:, begin + self.start - first]
                else:
                    tail = before[len(before) - (token_from - begin) :]
                    known = (tail.count("G") + tail.count("C") + self._gc_prefix[:, live[-1] + 1]
                             - self._gc_prefix[:, live[0]])
                rest_least, rest_most = must[end + 1] - must[last + 1], can[end + 1] - can[last + 1]
                ok &= (known + rest_least <= whi) & (known + rest_most >= wlo)
        return ok

    def kmer_text(self, index: int) -> str:
        return "".join(BASES[d] for d in self._digits[index])

    def extended(self, paths: list[str], kmers) -> list[str]:
        """Each row's generated bases with its next 6-mer added."""
        return [path + self.kmer_text(int(i)) for path, i in zip(paths, kmers, strict=True)]

    def static_ok(self, step: int) -> np.ndarray:
        """[4^k] bool: the 6-mers the per-position mask (fixed bases, IUPAC template) allows at `step`."""
        if step not in self._static_cache:
            rows = self.static[step * self.k : (step + 1) * self.k]
            self._static_cache[step] = np.logical_and.reduce([rows[j][self._digits[:, j]] for j in range(self.k)])
        return self._static_cache[step]

    def coupling(self, allowed: np.ndarray) -> np.ndarray | None:
        """[k, 4] per-base mask when `allowed` is every combination of some allowed bases (a base-level
        draw then keeps it); None when the constraint couples the bases (draw the joint 6-mer)."""
        per_base = (allowed.astype(np.float32) @ self._one_hot).reshape(self.k, 4) > 0
        # `allowed` lies within the product of its bases per position: equal when the sizes agree
        return per_base if int(np.prod(per_base.sum(1))) == int(allowed.sum()) else None


def search(checker: ConstraintChecker, n_tokens: int, order: np.ndarray,
           max_steps_back: int = MAX_STEPS_BACK) -> str | None:
    """A design meeting every constraint, found without the model (6-mers tried in `order`, depth first,
    stepping back from dead ends), or None when there is none (or none within `max_steps_back`)."""
    chosen, tried = "", [np.zeros(4**checker.k, dtype=bool) for _ in range(n_tokens)]
    step, back = 0, 0
    while step < n_tokens:
        ok = checker.allowed(step, chosen) & ~tried[step]
        candidates = order[ok[order]]
        if not len(candidates):
            if step == 0 or back >= max_steps_back:
                return None
            tried[step][:] = False
            step -= 1
            back += 1
            chosen = chosen[: step * checker.k]
            continue
        tried[step][candidates[0]] = True
        chosen += checker.kmer_text(candidates[0])
        step += 1
    return chosen[checker.start : checker.start + checker.n_bases]


def check_feasible(checker: ConstraintChecker, n_tokens: int) -> None:
    """Refuse, before any model work, constraints no design can meet, naming the conflict."""
    order = np.random.default_rng(0).permutation(4**checker.k)
    if search(checker, n_tokens, order) is not None:
        return
    c = checker.constraints
    if c.gc and checker.gc_bounds is not None:
        least, most = ConstraintChecker.build(DesignConstraints(protein=c.protein, codon_table=c.codon_table),
                                              checker.k, checker.start, checker.n_bases, checker.prompt_tail,
                                              checker.static)._rest
        lo, hi = checker.gc_bounds
        if most[0] < lo or least[0] > hi:
            what = f"the protein {_short(c.protein)} and the mask allow" if c.protein else "the mask allows"
            raise InputError(f"the GC range {100 * c.gc[0]:.0f}-{100 * c.gc[1]:.0f}% cannot be met: {what} "
                             f"{100 * least[0] / checker.n_bases:.0f}-{100 * most[0] / checker.n_bases:.0f}% "
                             f"over {checker.n_bases:,} bases")
    parts = [("the protein " + _short(c.protein), DesignConstraints(protein=c.protein, codon_table=c.codon_table))]
    parts += [(f"avoiding {name}", DesignConstraints(avoid=(name,))) for name in c.avoid]
    if c.max_homopolymer:
        parts.append((f"no homopolymer over {c.max_homopolymer}", DesignConstraints(max_homopolymer=c.max_homopolymer)))
    if c.gc:
        parts.append((f"GC {100 * c.gc[0]:.0f}-{100 * c.gc[1]:.0f}%"
                      + (f" in every {c.gc_window}-base window" if c.gc_window else ""),
                      DesignConstraints(gc=c.gc, gc_window=c.gc_window)))
    parts = [(label, part) for label, part in parts if part.active]
    for i, (label_a, a) in enumerate(parts):  # the smallest pair that already conflicts
        for label_b, b in parts[i + 1 :]:
            both = DesignConstraints(a.protein or b.protein, c.codon_table, a.avoid + b.avoid,
                                     a.max_homopolymer or b.max_homopolymer, a.gc or b.gc, a.gc_window or b.gc_window)
            pair = ConstraintChecker.build(both, checker.k, checker.start, checker.n_bases, checker.prompt_tail,
                                           checker.static)
            if search(pair, n_tokens, order) is None:
                raise InputError(f"no design can meet both {label_a} and {label_b} (with the mask and prompt)")
    raise InputError("no design meets all the constraints together (each pair of them can be met; try "
                     "loosening one)")


def _short(protein: str) -> str:
    return protein if len(protein) <= 12 else f"{protein[:10]}… ({len(protein)} residues)"


class DeadEnd(Exception):
    """Every 6-mer is ruled out for some row at a step of a path that cannot step back (a drafted round)."""


def path_allowed(checker: ConstraintChecker, step: int, paths: list[str]) -> np.ndarray:
    """[rows, 4^k] the 6-mers each row may take at `step` after its generated bases `paths[row]`; DeadEnd when
    a row may take none."""
    ok = np.stack([checker.allowed(step, path) for path in paths])
    if not ok.any(axis=1).all():
        raise DeadEnd(step)
    return ok


def constrained_logprobs(kmer_logits: torch.Tensor, params: SamplingParams, ok: np.ndarray,
                         checker: ConstraintChecker) -> torch.Tensor:
    """[B, 4^k] log-probs to draw from when each row may only take the 6-mers `ok` [B, 4^k] allows.

    Base-level mode keeps its per-base draw where the allowed set is every combination of some bases;
    where a constraint couples a token's bases it draws from the constrained joint distribution."""
    device = kmer_logits.device
    per_base = [None] * len(ok) if params.mode == "token" else [checker.coupling(row) for row in ok]
    joint = None
    if any(p is None for p in per_base):  # some row's bases are coupled (or token mode): the masked joint
        joint_mask = torch.from_numpy(np.where(ok, 0.0, -np.inf).astype(np.float32)).to(device)
        joint = step_logprobs(kmer_logits, SamplingParams("token", params.temperature, params.top_k, params.top_p),
                              joint_mask)
        if params.mode == "token":
            return joint
    return torch.stack([joint[r] if p is None else
                        step_logprobs(kmer_logits[r : r + 1], params, kmer_log_mask(torch.from_numpy(p).to(device)))[0]
                        for r, p in enumerate(per_base)])


