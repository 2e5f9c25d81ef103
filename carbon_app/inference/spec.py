"""How a variant is scored: one frozen value, resolved once against the model, the same on every path.

A `ScoringSpec` holds every setting that changes a delta (the window, the
tokenization frames, the strands, the method, the radius the delta is summed
within, the tags) and the context a delta is ranked in. Tags are part of the
setup, not of the page: a model's own setup names its tags (none, unless its
card says otherwise, as Carbon's variant scores were measured), and any tag is a
difference from it, named beside the score. `resolve_spec` fills
each setting a caller leaves out (None) with the model's own, the setup its
quality was measured with (`model.card.measured_setup`), and clamps the window to what the
model's context holds, by one rule, so the Variant tab, the scan, VCF batches,
the command line, the notebook API and Ray score a variant in the same windows
and get the same number.

A model's own setup lives in `scoring.json` beside its weights (what its card
recommends; `model.card` reads it), else the Carbon evaluation's, in every
tokenization frame (this project's deliberate improvement: a single frame moves
a delta by about half a nat, `score.py` says why).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core.tokens import dna_prompt
from ..core.validate import whole_number
from ..errors import InputError
from ..model.card import SETTINGS

METHODS = ("marginal", "chain")
#: the scoring methods in words, as the page and every result name them
METHOD_WORDS = {"marginal": "reference FNS marginals", "chain": "exact chain rule"}
OWN_RADIUS = "own"  # a radius argument meaning: the one the model's measured figures were read with
MAX_SCAN_POSITIONS = 2000  # substitutions' positions one scan (or one context ranking) reads
MAX_CONTEXT_BASES = (MAX_SCAN_POSITIONS - 1) // 2  # a context is ranked by a scan of 2r + 1 positions


def check_method(method: str) -> str:
    if method not in METHODS:
        raise InputError(f"scoring method must be 'marginal' (reference FNS) or 'chain', not '{method}'")
    return method


def checked_radius(radius) -> int:
    """A context radius (bases either side a delta is ranked among), checked."""
    radius = whole_number(radius, "the context (bases either side)", 0)
    if radius > MAX_CONTEXT_BASES:
        raise InputError(f"the context is {radius:,} bases either side; at most {MAX_CONTEXT_BASES:,}")
    return radius


def context_room_bases(bundle, prefix_text: str) -> int:
    """How many bases one forward pass can score after the tag prefix and `<dna>`."""
    prefix_tokens = len(bundle.tokenizer.encode(dna_prompt(prefix_text)))
    return (bundle.max_tokens - prefix_tokens + 1) * bundle.k  # the last token is read, never fed


@dataclass(frozen=True)
class ScoringSpec:
    """Every setting a variant's delta depends on, as used (never as asked): pass it whole."""

    window: int  # bases in each frame's window, at most what the model's context holds
    frames: int  # tokenization frames averaged (1..k)
    strand_average: bool  # both strands read, each delta their mean
    method: str  # "marginal" (reference FNS) or "chain"
    delta_radius: int | None  # bases either side of the variant the delta sums; None: the whole window
    species: str | None = None  # tag keys of the model's scheme
    region: str | None = None
    prefix: str = ""  # the tag text they make, read before `<dna>`
    context: int = 0  # bases either side a delta is ranked among the substitutions there (0: not ranked)
    asked_window: int | None = None  # the window asked for, when the context could not hold it

    def reads(self, alleles: int = 0, scanned: int = 0) -> int:
        """Windows the model reads (one a frame and strand) for `alleles` alternate alleles, each with its
        reference and, with a context, the 3 substitutions at each of the 2r + 1 positions around it, and
        for a scan of `scanned` positions (3 substitutions each, and the reference): the work a job asks for,
        before the windows it shares are counted once."""
        around = substitutions_within(self.context) if self.context else 0
        windows = alleles * (2 + around) + (3 * scanned + 1 if scanned else 0)
        return windows * self.frames * (2 if self.strand_average else 1)

    def settings(self) -> dict:
        """The settings as plain values (JSON, VCF and TSV headers)."""
        return {key: value for key, value in asdict(self).items() if key != "prefix"}

    def header(self) -> str:
        """One line of `key=value` settings, as VCF and TSV headers and FASTA lines carry them."""
        return (f"window={self.window},frames={self.frames},strand_average={self.strand_average},"
                f"method={self.method},delta_radius={radius_text(self.delta_radius)},species={self.species or 'none'},"
                f"region={self.region or 'none'},context={self.context}")

    def sentence(self) -> str:
        """The setup in one sentence, as the page shows it beside a score."""
        strands = "both strands" if self.strand_average else "one strand"
        frames = f"{self.frames} tokenization frame{'s' if self.frames != 1 else ''}"
        within = ("summed over the whole window" if self.delta_radius is None
                  else f"summed within {self.delta_radius} base{'s' if self.delta_radius != 1 else ''} of the variant")
        clamped = (f" (the {self.asked_window:,} asked for is more than the model's context holds)"
                   if self.asked_window else "")
        return (f"Read in {self.window:,}-base windows{clamped}, {frames}, {strands}, with the "
                f"{METHOD_WORDS[self.method]}, {within}.")

    def differences(self, measured: ScoringSpec) -> list[str]:
        """The settings in which this spec differs from `measured` (the model's own), in words."""
        words = {"window": "window", "frames": "frames", "strand_average": "strands", "method": "method",
                 "delta_radius": "radius", "species": "species tag", "region": "region tag"}
        return [f"{words[key]} {_shown(key, getattr(self, key))} (model's own: {_shown(key, getattr(measured, key))})"
                for key in SETTINGS if getattr(self, key) != getattr(measured, key)]


def _shown(key: str, value) -> str:
    if key == "strand_average":
        return "both" if value else "one"
    if key == "delta_radius":
        return "whole window" if value is None else f"{value} bases"
    if key in ("species", "region"):
        return value or "none"
    return f"{value:,}" if isinstance(value, int) else str(value)


def substitutions_within(radius: int) -> int:
    """The substitutions at the 2r + 1 positions around a variant: what a context of `radius` bases scans."""
    return 3 * (2 * radius + 1)


def radius_text(radius: int | None) -> str:
    """A radius as it is written (`parse_delta_radius`'s inverse): a number of bases, or "whole" (None)."""
    return "whole" if radius is None else str(radius)


def parse_delta_radius(text: str) -> int | None:
    """A radius as typed: a whole number of bases, 0 or more, or "whole" (None: the whole window)."""
    text = text.strip()
    if text == "whole":
        return None
    if not text.isdigit():
        raise InputError(f"'{text}' is not a radius: a whole number of bases, 0 or more, or 'whole'")
    return int(text)


def checked_delta_radius(own: int | None, delta_radius: int | str | None) -> int | None:
    """`delta_radius` checked (bases either side of the variant its delta sums; None or "whole": the whole
    window), or `own` (the model's) for OWN_RADIUS."""
    if delta_radius == OWN_RADIUS:
        return own
    if isinstance(delta_radius, str):
        delta_radius = parse_delta_radius(delta_radius)
    if delta_radius is None:
        return None
    return whole_number(delta_radius, "the delta's radius (bases either side of the variant)", 0)


def resolve_spec(bundle, spec: ScoringSpec | None = None, *, window=None, frames=None, strand_average=None,
                 method=None, delta_radius=OWN_RADIUS, species=None, region=None, context=None) -> ScoringSpec:
    """The one place a scoring setup is made, at a public entry point: `spec` as it is when given (no setting
    may be given beside it), else each setting as asked, the model's own (`ModelCard.scoring`) where it is
    None (`delta_radius`: OWN_RADIUS), every value checked and the window clamped to the context. Below the
    entry points every function takes the spec it made, and nothing that the spec holds."""
    if spec is not None:
        beside = [name for name, value in (("window", window), ("frames", frames), ("strand_average", strand_average),
                                           ("method", method), ("species", species), ("region", region),
                                           ("context", context or None)) if value is not None]
        beside += ["delta_radius"] if delta_radius != OWN_RADIUS else []
        if beside:
            raise InputError(f"give a scoring spec or its settings, not both: {', '.join(beside)} given beside the "
                             "spec (the spec holds them)")
        return spec
    own = bundle.card.scoring
    frames = own["frames"] if frames is None else frames
    frames = bundle.k if frames is None else whole_number(frames, "frames", 1, bundle.k)
    method = check_method(own["method"] if method is None else method)
    delta_radius = checked_delta_radius(own["delta_radius"], delta_radius)
    asked = whole_number(own["window"] if window is None else window, "the window (bases)", 1)
    species = own.get("species") if species is None else species  # "none" (the page's) is no tag
    region = own.get("region") if region is None else region
    prefix = bundle.tags.prefix(species, region)  # each checked: a tag the scheme lacks is named
    room = context_room_bases(bundle, prefix)
    species = species.strip() if bundle.tags.species_tag(species) else None  # a "none" word: no tag
    region = region.strip() if bundle.tags.region_tag(region) else None
    return ScoringSpec(window=min(asked, room), frames=frames,
                       strand_average=bool(own["strand_average"] if strand_average is None else strand_average),
                       method=method, delta_radius=delta_radius, species=species, region=region,
                       prefix=prefix, context=checked_radius(context or 0),
                       asked_window=asked if asked > room else None)


def measured_spec(bundle) -> ScoringSpec:
    """The model's own setup, resolved: what its quality was measured with."""
    return resolve_spec(bundle)
