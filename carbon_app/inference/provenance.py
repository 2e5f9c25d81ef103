"""What made a result, as every result and every file names it: the app and its version, the model, which
weights it is (a hub commit or a checksum), the scoring setup as used and how it differs from the model's own.

One value, made where the result is made (the engine, a Ray worker, the VCF writer), so that a result read
in a notebook, a file downloaded from the page and a table the CLI wrote say the same thing, and a person
who has only the file can tell whether two numbers were made alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import __version__
from .spec import ScoringSpec, measured_spec

APP = f"Carbon Studio {__version__}"


@dataclass(frozen=True)
class Provenance:
    """The app, the model, its weights and (for a score) the setup as used, with its differences from the
    model's own setup (the one its quality was measured with; none: the model's own)."""

    model: str
    weights: str  # `ModelCard.weights`: "hub-commit:<commit>" or "sha256:<hex>"; a server's: "served:<name>@<url>"
    setup: ScoringSpec | None = None
    differences: tuple[str, ...] = ()
    app: str = APP

    @classmethod
    def of(cls, bundle, spec: ScoringSpec | None = None) -> Provenance:
        """A result's provenance, made with `bundle` (a loaded model or a server's) and read as `spec`."""
        differences = tuple(spec.differences(measured_spec(bundle))) if spec is not None else ()
        return cls(bundle.name, bundle.weights, spec, differences)

    @property
    def version(self) -> str:
        return self.app.rsplit(" ", 1)[-1]

    @property
    def short_weights(self) -> str:
        """The weights' name short enough for one word of a FASTA header or a GenBank line: a checksum's first
        16 hex digits (the JSON and the tables carry it whole)."""
        kind, _, value = self.weights.partition(":")
        return f"{kind}:{value[:16]}" if kind == "sha256" else self.weights

    @property
    def setup_words(self) -> str:
        """How the setup stands to the model's own, in words."""
        if self.setup is None:
            return ""
        if not self.differences:
            return "the model's own scoring setup"
        return "differs from the model's own scoring setup: " + "; ".join(self.differences)

    def to_dict(self) -> dict:
        data = {"app": self.app, "model": self.model, "weights": self.weights}
        if self.setup is not None:
            data["scoring"] = self.setup.settings()
            data["differs_from_model_setup"] = list(self.differences)
        return data

    def comment_lines(self, lead: str = "## ") -> list[str]:
        """The provenance as a table's leading comment lines (`lead` before each, as VEP writes its tables)."""
        lines = [f"{lead}made by {self.app}", f"{lead}model={self.model} weights={self.weights}"]
        if self.setup is not None:
            lines += [f"{lead}scoring {self.setup.header()}", f"{lead}{self.setup_words}"]
        return lines
