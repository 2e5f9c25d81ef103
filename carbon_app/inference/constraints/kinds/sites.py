"""Sites the design must not hold, on either strand, across the prompt junction too: restriction enzymes by
name (Biopython's `Bio.Restriction`: EcoRI, BsaI, BsmBI, ...) or IUPAC motifs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ....core.dna import IUPAC, reverse_complement
from ....errors import InputError
from ..part import JUNCTION, Constraint, ConstraintCheck, Field, Layout, MotifRule, Rule, chisel_check, motif_matrix

#: sites one design may keep out: a cloning plan names a handful (Golden Gate: BsaI, BsmBI and a few more),
#: and each site is one more motif on both strands checked at every base
MAX_SITES = 30
#: the longest IUPAC motif: Biopython's REBASE sites are 15 bases at most; a recombination site (loxP, 34) fits
MAX_MOTIF_BASES = 60
#: the longest list text: MAX_SITES motifs of MAX_MOTIF_BASES with a separator each
MAX_LIST_CHARS = MAX_SITES * (MAX_MOTIF_BASES + 2)


@lru_cache(maxsize=1024)  # looked up by parsing, the rule, the reach and the report alike; bounded, as names are sent
def resolve_site(name: str) -> tuple[str, str]:
    """(label, IUPAC site) for a restriction enzyme's name or an IUPAC motif."""
    from Bio import Restriction

    text = name.strip()
    if len(text) > MAX_MOTIF_BASES:
        raise InputError(f"the site to avoid '{text[:20]}…' is {len(text):,} characters; a motif may have at most "
                         f"{MAX_MOTIF_BASES} bases")
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
class AvoidSites(Constraint):
    avoid: tuple[str, ...]

    fields = (Field("avoid", "Avoid sites (enzymes or IUPAC motifs)",
                    "restriction enzymes (BsaI,BsmBI,EcoRI,...) or IUPAC motifs, comma-separated, kept out of the "
                    "design on both strands and across the prompt junction", placeholder="BsaI, BsmBI, EcoRI, GCNNGC"),)
    order = 20

    @classmethod
    def parse(cls, avoid=None) -> AvoidSites | None:
        if isinstance(avoid, str):
            if len(avoid) > MAX_LIST_CHARS:
                raise InputError(f"the sites to avoid are {len(avoid):,} characters; at most {MAX_LIST_CHARS:,} "
                                 f"({MAX_SITES} sites of up to {MAX_MOTIF_BASES} bases)")
            avoid = avoid.replace(";", ",").replace(" ", ",").split(",")
        if avoid is not None and not isinstance(avoid, list | tuple):
            raise InputError("the sites to avoid must be text (enzyme names or IUPAC motifs, comma-separated)")
        if avoid and len(avoid) > MAX_LIST_CHARS:
            raise InputError(f"{len(avoid):,} sites to avoid were given; at most {MAX_SITES}")
        if any(not isinstance(a, str) for a in avoid or ()):
            raise InputError("each site to avoid must be text: an enzyme name or an IUPAC motif")
        sites = tuple(dict.fromkeys(a.strip() for a in (avoid or ()) if a.strip()))
        if len(sites) > MAX_SITES:
            raise InputError(f"{len(sites):,} sites to avoid were given; at most {MAX_SITES}")
        for site in sites:
            resolve_site(site)
        return cls(sites) if sites else None

    def options(self) -> dict[str, str]:
        return {"avoid": ",".join(self.avoid)}

    @classmethod
    def values_off(cls) -> dict[str, object]:
        return {"avoid": ()}

    def label(self) -> str:
        return "avoiding " + ", ".join(self.avoid)

    def pieces(self) -> list[AvoidSites]:
        return [AvoidSites((name,)) for name in self.avoid]

    def motifs(self) -> list[str]:
        """Each site and its reverse complement, as IUPAC codes."""
        codes = []
        for name in self.avoid:
            site = resolve_site(name)[1]
            codes += [code for code in dict.fromkeys([site, reverse_complement(site)]) if code not in codes]
        return codes

    def reach(self) -> int:
        return max(len(code) for code in self.motifs())

    def too_long_for(self, n_bases: int) -> str | None:
        most = n_bases + JUNCTION
        longest = max(self.avoid, key=lambda name: len(resolve_site(name)[1]))
        label, site = resolve_site(longest)
        if len(site) <= most:
            return None
        return (f"the site {label} has {len(site)} bases, more than the design's {n_bases:,} bases and the "
                f"{JUNCTION} prompt bases before them: it could never be found there")

    def rule(self, layout: Layout) -> Rule:
        return MotifRule(layout, [motif_matrix(code) for code in self.motifs()])

    def checks(self, design: str, head: str) -> list[ConstraintCheck]:
        from dnachisel import AvoidPattern

        return [chisel_check(f"AvoidPattern({label})", [AvoidPattern(site)], design, head)
                for label, site in map(resolve_site, self.avoid)]
