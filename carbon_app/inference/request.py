"""A design request, checked once: the one place where what a face sends becomes what the engine runs.

A web form sends 300.0, "40" or None, the CLI ints, a notebook anything; `DesignRequest.from_options`
takes each field as it comes, refuses a bad one with one sentence that names it, and returns typed,
frozen values. The engine (`generate.run_design`) takes only those, and checks against the model only
what needs the model (tags, the context's room, the prompt's last bases).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ..core.dna import clean_sequence, mask_from_template
from ..core.validate import whole_number
from ..errors import InputError
from .constraints import DesignConstraints
from .sampling import SamplingParams

MAX_SAMPLES = 64
MAX_SEED = 2**63 - 1
#: The temperature a design runs at unless it names one: long designs at T <= 0.5 fall into repeats.
DEFAULT_TEMPERATURE = 0.9


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


@dataclass(frozen=True)
class DesignRequest:
    """One design, every field checked and of the type it says.

    `n_bases` is what is made: given, or set by the mask's length or by a constraint (a protein: 3 bases
    a residue), which must then agree with it. `seed` is always a number: a request without one draws it,
    and the result reports it, so the same request can be made again."""

    n_bases: int
    seed: int
    prompt: str = ""  # bases, cleaned (may be empty)
    mask: str | None = None  # IUPAC template of n_bases positions, cleaned
    species: str | None = None
    region: str | None = None
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=DEFAULT_TEMPERATURE))
    samples: int = 1
    constraints: DesignConstraints | None = None  # active constraints only
    draft_always: bool = False  # a draft drafts to the end, even where it does not pay

    @classmethod
    def from_options(
        cls,
        prompt: str | None = "",
        n_bases=None,
        *,
        mask: str | None = None,
        species: str | None = None,
        region: str | None = None,
        mode: str = "bp",
        temperature=DEFAULT_TEMPERATURE,
        top_k=0,
        top_p=1.0,
        seed=None,
        samples=1,
        draft_always: bool = False,
        constraints: DesignConstraints | None = None,
        **constraint_fields,
    ) -> DesignRequest:
        """A request from the fields as any face sends them (see `generate.generate` for what each means);
        `constraint_fields` are the design constraints' (`constraints.FIELDS`), or `constraints` gives them."""
        sampling = SamplingParams.checked(mode, temperature, top_k, top_p)
        samples = whole_number(samples, "the number of samples", 1, MAX_SAMPLES)
        seed = secrets.randbelow(2**31) if _blank(seed) else whole_number(seed, "the seed", 0, MAX_SEED)
        if constraints is None:
            constraints = DesignConstraints.from_options(**constraint_fields)
        constraints = constraints if constraints.active else None
        prompt = "" if _blank(prompt) else clean_sequence(prompt, what="prompt")
        n_bases = None if _blank(n_bases) else whole_number(n_bases, "the number of bases", 1)
        fixed = constraints.fixed_length() if constraints else None
        if fixed:
            if n_bases is not None and n_bases != fixed[0]:
                raise InputError(f"{fixed[1]}, but {n_bases:,} bases were asked for")
            n_bases = fixed[0]
        if _blank(mask):
            mask = None
        else:
            positions = len(mask_from_template(mask))
            mask = clean_sequence(mask, what="mask")
            if n_bases is not None and positions != n_bases:
                raise InputError(f"the mask has {positions} positions but {n_bases} bases were asked for")
            n_bases = positions
        if n_bases is None:
            raise InputError("give the number of bases to generate (or a mask, whose length sets it)")
        if constraints:
            constraints.check_size(n_bases)
        return cls(n_bases=n_bases, seed=seed, prompt=prompt, mask=mask, species=species or None,
                   region=region or None, sampling=sampling, samples=samples, constraints=constraints,
                   draft_always=bool(draft_always))
