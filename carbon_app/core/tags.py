"""Species and gene-region tags, as a per-model tag scheme.

Tags are ordinary BPE text placed before `<dna>` (species first, then region).
Public sources spell them three ways (see the spec, section 4), so the spelling
is a setting of each model: a model directory may ship `tag_scheme.json`; the
default is the data-pipeline spelling, the best evidence for what pretraining
used. A user may always pass a literal tag such as `<vertebrate_mammalian>`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError, ModelError

_PIPELINE_SPECIES = {
    "mammal": "<mammalian_species>",
    "vertebrate": "<vertebrate_non_mammalian_species>",
    "invertebrate": "<invertebrate_species>",
    "plant": "<plant_species>",
    "fungus": "<fungi_species>",
    "protozoa": "<protozoa_species>",
}
_PIPELINE_REGIONS = {
    "protein_coding": "<protein_coding_region>",
    "pseudogene": "<pseudo_gene>",
    "trna": "<transfer_rna>",
    "tmrna": "<transfer_messenger_rna>",
    "ncrna": "<non_coding_rna>",
    "misc_rna": "<miscellaneous_rna>",
    "rrna": "<ribosomal_rna>",
}

#: Other names users type for the same keys.
_ALIASES = {
    "mammalian": "mammal", "mammals": "mammal",
    "vertebrate_non_mammalian": "vertebrate", "other_vertebrate": "vertebrate",
    "invertebrates": "invertebrate", "plants": "plant",
    "fungi": "fungus", "protozoan": "protozoa",
    "cds": "protein_coding", "coding": "protein_coding",
    "pseudo_gene": "pseudogene", "transfer_rna": "trna", "transfer_messenger_rna": "tmrna",
    "non_coding_rna": "ncrna", "lncrna": "ncrna", "miscellaneous_rna": "misc_rna",
    "ribosomal_rna": "rrna",
}
_NONE = {"", "none", "no", "-"}
_LITERAL = re.compile(r"^(<[A-Za-z0-9_\-.]+>)+$")


@dataclass(frozen=True)
class TagScheme:
    """How one model spells its species and region tags."""

    name: str
    species: dict[str, str] = field(default_factory=dict)
    regions: dict[str, str] = field(default_factory=dict)

    def species_tag(self, value: str | None) -> str:
        return self._resolve(value, self.species, "species")

    def region_tag(self, value: str | None) -> str:
        return self._resolve(value, self.regions, "region")

    def prefix(self, species: str | None = None, region: str | None = None) -> str:
        """The text placed before `<dna>`: species tag, then region tag."""
        return self.species_tag(species) + self.region_tag(region)

    def probe_text(self) -> str:
        """A species and a region tag of this scheme, to check that two tokenizers agree on tags."""
        return self.prefix(next(iter(self.species), None), next(iter(self.regions), None))

    def _resolve(self, value: str | None, table: dict[str, str], kind: str) -> str:
        if value is not None and not isinstance(value, str):  # a client may send anything (a number, a list)
            raise InputError(f"the {kind} tag must be a name such as {next(iter(table), 'none')} or 'none', "
                             f"not {type(value).__name__} {str(value)[:40]}")
        if value is None or value.strip().lower() in _NONE:
            return ""
        value = value.strip()
        if value.startswith("<"):
            if not _LITERAL.match(value) or "<dna>" in value or "</dna>" in value:
                raise InputError(
                    f"the literal {kind} tag '{value}' is not of the form <name> "
                    "(letters, digits and _ inside angle brackets)"
                )
            return value
        key = value.lower().replace("-", "_").replace(" ", "_")
        key = _ALIASES.get(key, key)
        if key in table:
            return table[key]
        known = ", ".join(table) or "none"
        raise InputError(
            f"unknown {kind} '{value}' for the '{self.name}' tag scheme (known: {known}); "
            "or pass a literal tag such as <plant_species>"
        )

    def to_dict(self) -> dict:
        return {"name": self.name, "species": dict(self.species), "regions": dict(self.regions)}


SCHEMES: dict[str, TagScheme] = {
    # Data-pipeline mapping said to match the pretraining script.
    "pipeline": TagScheme("pipeline", _PIPELINE_SPECIES, _PIPELINE_REGIONS),
    # The official sequence-recovery evaluation writes <protozoan_species>.
    "eval": TagScheme(
        "eval", {**_PIPELINE_SPECIES, "protozoa": "<protozoan_species>"}, _PIPELINE_REGIONS
    ),
    # The model card's example; it documents only the mammalian species tag.
    "model_card": TagScheme("model_card", {"mammal": "<vertebrate_mammalian>"}, _PIPELINE_REGIONS),
}
DEFAULT_SCHEME = "pipeline"


def load_tag_scheme(model_dir: Path) -> TagScheme:
    """The scheme a model directory declares in `tag_scheme.json`, else the default.

    The file either names a built-in scheme (`{"scheme": "eval"}`) or spells
    the tables out (`{"name": ..., "species": {...}, "regions": {...}}`).
    """
    path = Path(model_dir) / "tag_scheme.json"
    if not path.exists():
        return SCHEMES[DEFAULT_SCHEME]
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path} cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} must hold a JSON object ({{\"scheme\": ...}} or species and regions), "
                         f"not a {type(data).__name__}")
    if "scheme" in data:
        if data["scheme"] not in SCHEMES:
            raise ModelError(f"{path} names the unknown tag scheme '{data['scheme']}'")
        return SCHEMES[data["scheme"]]
    tables = {key: data.get(key, {}) for key in ("species", "regions")}
    for key, table in tables.items():
        if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
            raise ModelError(f"{path}: \"{key}\" must map each key to its tag text, e.g. "
                             "{\"mammal\": \"<vertebrate_mammalian>\"}")
    return TagScheme(name=str(data.get("name", "custom")), species=tables["species"], regions=tables["regions"])


def get_scheme(name: str) -> TagScheme:
    if name not in SCHEMES:
        raise InputError(f"unknown tag scheme '{name}' (known: {', '.join(SCHEMES)})")
    return SCHEMES[name]
