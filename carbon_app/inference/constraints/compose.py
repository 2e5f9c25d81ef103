"""A request's design constraints together: the value a request carries, the checker that ANDs their rules
at each token, the exact search without the model, and the draw under the allowed set.

Where a constraint couples a token's bases (the allowed 6-mers are not every combination of allowed
bases) the token is drawn from the constrained joint distribution, in base-level mode too. Should every
6-mer be ruled out at some step (a dead end the look-ahead did not see), generation steps back one
token and rules out the choice that led there: the search is exact, and the same seed still gives the
same design. Before any model work `check_feasible` runs the same search without the model and names
the conflict when there is no design at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.dna import BASES
from ...errors import InputError
from ..marginals import kmer_log_mask
from ..sampling import SamplingParams, step_logprobs
from .kinds import FIELDS, KINDS
from .part import JUNCTION, Constraint, ConstraintCheck, Layout, Token, kmer_tables

#: steps back a design may take before its constraints are called too tight to meet
MAX_STEPS_BACK = 5000


@dataclass(frozen=True)
class DesignConstraints:
    """The constraints one design is made under: active parts only, in `KINDS` order."""

    parts: tuple[Constraint, ...] = ()

    @classmethod
    def from_options(cls, **options) -> DesignConstraints:
        """Constraints from the fields (`FIELDS`: protein, avoid, gc, ...) as a form, the CLI or a notebook
        gives them, each field checked and named; a field left blank leaves its constraint off."""
        unknown = sorted(set(options) - {f.name for f in FIELDS})
        if unknown:
            raise TypeError(f"unknown design constraint field(s): {', '.join(unknown)}")
        parts = [kind.parse(**{f.name: options.get(f.name) for f in kind.fields}) for kind in KINDS]
        return cls(tuple(part for part in parts if part is not None))

    @property
    def active(self) -> bool:
        return bool(self.parts)

    def values(self) -> dict[str, object]:
        """Every field's typed value (a constraint that is off gives its off values)."""
        by_kind = {type(part): part for part in self.parts}
        out: dict[str, object] = {}
        for kind in KINDS:
            out.update(by_kind[kind].values() if kind in by_kind else kind.values_off())
        return out

    def describe(self) -> dict:
        return {name: list(value) if isinstance(value, tuple) else value for name, value in self.values().items()}

    def options(self) -> dict[str, str]:
        """The active fields as the command line takes them."""
        return {name: text for part in self.parts for name, text in part.options().items()}

    def check_size(self, n_bases: int) -> None:
        """Refuse, naming it, a constraint that reaches further than a design of `n_bases` can (`too_long_for`)."""
        reason = next((why for part in self.parts if (why := part.too_long_for(n_bases))), None)
        if reason:
            raise InputError(reason)

    def fixed_length(self) -> tuple[int, str] | None:
        """(bases, why) where a constraint sets the design's length."""
        return next((fixed for part in self.parts if (fixed := part.fixed_length())), None)

    def checks(self, design: str, prompt: str = "") -> list[ConstraintCheck]:
        """PASS/FAIL of each constraint on `design` after `prompt`, in `KINDS` order."""
        head = prompt[-JUNCTION:]
        return [check for part in self.parts for check in part.checks(design, head)] if design else []


class ConstraintChecker:
    """The 6-mers allowed at each generated token of one request, given the bases chosen before it: what the
    per-position mask allows, and every constraint's rule."""

    def __init__(self, constraints: DesignConstraints, layout: Layout):
        self.constraints, self.layout, self.k = constraints, layout, layout.k
        layout.bound_gc(constraints.parts)
        self.rules = [part.rule(layout) for part in constraints.parts]
        self._digits, _, self._one_hot = kmer_tables(self.k)
        self._static_cache: dict[int, np.ndarray] = {}

    @classmethod
    def build(cls, constraints: DesignConstraints, k: int, start: int, n_bases: int, context: str,
              static: np.ndarray) -> ConstraintChecker:
        """For a design of `n_bases` after `start` generated prompt bases, the prompt's bases `context` before
        them and the mask's `static` [positions, 4] allowed bases."""
        reach = max([part.reach() for part in constraints.parts] + [1])
        return cls(constraints, Layout(k, start, n_bases, static, context[-reach:]))

    def allowed(self, step: int, chosen: str) -> np.ndarray:
        """[4^k] bool: the 6-mers allowed at token `step` after the generated bases `chosen` (step * k of them,
        fixed bases included)."""
        layout, k = self.layout, self.k
        first = step * k  # generated position of this token's first base
        live = [j for j in range(k) if layout.start <= first + j < layout.start + layout.n_bases]
        ok = self.static_ok(step).copy()
        if not live:  # the last token's filling after the design is free
            return ok
        token = Token(step, first, live, chosen, layout.prompt_tail + chosen)
        for rule in self.rules:
            ok &= rule.allowed(token)
        return ok

    def static_ok(self, step: int) -> np.ndarray:
        """[4^k] bool: the 6-mers the per-position mask (fixed bases, IUPAC template) allows at `step`."""
        if step not in self._static_cache:
            rows = self.layout.static[step * self.k : (step + 1) * self.k]
            self._static_cache[step] = np.logical_and.reduce([rows[j][self._digits[:, j]] for j in range(self.k)])
        return self._static_cache[step]

    def kmer_text(self, index: int) -> str:
        return "".join(BASES[d] for d in self._digits[index])

    def extended(self, paths: list[str], kmers) -> list[str]:
        """Each row's generated bases with its next 6-mer added."""
        return [path + self.kmer_text(int(i)) for path, i in zip(paths, kmers, strict=True)]

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
    layout = checker.layout
    return chosen[layout.start : layout.start + layout.n_bases]


def check_feasible(checker: ConstraintChecker, n_tokens: int) -> None:
    """Refuse, before any model work, constraints no design can meet, naming the conflict: one that the mask
    and the others' bounds rule out, else the first piece (one site, say) that the mask and prompt rule out
    alone, else the first pair of pieces that already conflicts."""
    order = np.random.default_rng(0).permutation(4**checker.k)
    if search(checker, n_tokens, order) is not None:
        return
    layout, parts = checker.layout, checker.constraints.parts
    for part in parts:
        reason = part.why_impossible(layout)
        if reason:
            raise InputError(reason)
    pieces = [(piece.label(), piece) for part in parts for piece in part.pieces()]

    def impossible(*chosen: Constraint) -> bool:
        alone = ConstraintChecker.build(DesignConstraints(chosen), layout.k, layout.start, layout.n_bases,
                                        layout.prompt_tail, layout.static)
        return search(alone, n_tokens, order) is None

    for label, piece in pieces:  # one that the mask and the prompt already rule out
        if impossible(piece):
            raise InputError(f"no design can meet {label} (with the mask and prompt)")
    for i, (label_a, a) in enumerate(pieces):
        for label_b, b in pieces[i + 1 :]:
            if impossible(a, b):
                raise InputError(f"no design can meet both {label_a} and {label_b} (with the mask and prompt)")
    raise InputError("no design meets all the constraints together (each pair of them can be met; try "
                     "loosening one)")


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
