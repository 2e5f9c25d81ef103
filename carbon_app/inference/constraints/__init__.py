"""Design constraints enforced while sampling: a protein, sites to avoid, homopolymers, GC content.

A 6-mer token is two codons, so the model back-translates a protein itself: at each token only the
6-mers that keep every constraint are allowed, given the bases already chosen (the prompt's tail too,
so a site cannot form across the prompt/design junction). Each constraint is one object in its own
module under `kinds/` with one interface (`part.Constraint`: its fields, parse, rule with look-ahead,
feasibility pieces, report check); `compose` puts a request's together.
"""

from .compose import (
    JUNCTION,
    MAX_STEPS_BACK,
    ConstraintChecker,
    DeadEnd,
    DesignConstraints,
    check_feasible,
    constrained_logprobs,
    path_allowed,
    search,
)
from .kinds import FIELDS, KINDS
from .kinds.sites import resolve_site
from .part import Constraint, ConstraintCheck, Field

__all__ = ["Constraint", "ConstraintCheck", "ConstraintChecker", "DeadEnd", "DesignConstraints", "FIELDS", "Field",
           "JUNCTION", "KINDS", "MAX_STEPS_BACK", "check_feasible", "constrained_logprobs", "path_allowed",
           "resolve_site", "search"]
