"""What a model directory says of itself beside its weights: the scoring setup its card recommends
(`scoring.json`) and the variant-effect quality measured on held-out genes (`eval.json`).

A model directory without `scoring.json` is read as its `eval.json` measured it (older demo cards), else
with the Carbon evaluation's setup (spec section 7): one window of 8 kb centred on the variant, one strand,
the reference FNS marginals over the whole window, in every tokenization frame, no species or region tag.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path

from ..errors import ModelError

SCORING_FILE = "scoring.json"
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
_HUB_SNAPSHOT = re.compile(r"(?:^|/)snapshots/([0-9a-f]{40})$")  # huggingface_hub's cache: .../snapshots/<commit>
SETTINGS = ("window", "frames", "strand_average", "method", "delta_radius", "species", "region")

#: The Carbon evaluation's setup (spec section 7), for a model that names none of its own. frames None: all k.
#: No tags: variant scores were measured untagged (tags are a design feature), and a tag moves every delta.
CARBON_EVALUATION = {"window": 8000, "frames": None, "strand_average": False, "method": "marginal",
                     "delta_radius": None, "species": None, "region": None}


def measured_setup(model_dir: Path) -> dict:
    """A model's own scoring setup: `scoring.json`, else what its `eval.json` measured, else the Carbon
    evaluation's. Every key of `CARBON_EVALUATION`, plus "measured": whether held-out figures were read so."""
    path = Path(model_dir) / SCORING_FILE
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"{path} cannot be read as JSON: {exc}") from None
        if not isinstance(data, dict) or set(data) - {*SETTINGS, "measured", "note"}:
            raise ModelError(f"{path} must be a JSON object with the keys {', '.join(SETTINGS)} (and 'measured')")
        return {**CARBON_EVALUATION, "measured": False, **data}
    quality = measured_quality(model_dir)
    if quality:
        setup = {key: quality[key] for key in ("window", "method", "delta_radius") if key in quality}
        return {**CARBON_EVALUATION, "strand_average": True, **setup, "measured": True}
    return {**CARBON_EVALUATION, "measured": False}


def measured_quality(model_dir: Path) -> dict | None:
    """`eval.json`'s "quality" in a model directory (what the page shows beside a score), or None."""
    path = Path(model_dir) / "eval.json"
    try:
        return json.loads(path.read_text()).get("quality") if path.exists() else None
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def quality_method(quality: dict | None) -> str:
    """The scoring method a quality measurement names ("marginal" when none: older cards, real checkpoints)."""
    return (quality or {}).get("method", "marginal")


def quality_delta_radius(quality: dict | None) -> int | None:
    """The radius (bases either side of a variant) a quality measurement's deltas were summed within;
    None, the whole window, when it names none (older cards, real checkpoints)."""
    return (quality or {}).get("delta_radius")


def measured_group_quality(model_dir: Path) -> dict[str, dict[str, float]]:
    """The measured AUROCs by species group ({"coding": {"mammal": 0.74, ..., "all": ...}, "splice": {...}}),
    read with the measured setup, where `eval.json` has them."""
    try:
        variants = json.loads((Path(model_dir) / "eval.json").read_text()).get("target_variants") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}
    return {task: dict(variants[task]["auroc"]) for task in ("coding", "splice")
            if isinstance(variants.get(task), dict) and isinstance(variants[task].get("auroc"), dict)}


def weights_identity(model_dir: Path) -> str:
    """Which weights a model directory holds, as a result names them (one word): the hub commit of a hub
    snapshot ("hub-commit:<commit>"), else the SHA-256 of its weight files ("sha256:<hex>", the files in name
    order; read once, at about 1 GB/s); "no weight files" for a directory that holds none (a model a server runs)."""
    model_dir = Path(model_dir).resolve()
    commit = _HUB_SNAPSHOT.search(model_dir.as_posix())
    if commit:
        return f"hub-commit:{commit[1]}"
    files = sorted({path for pattern in WEIGHT_FILES for path in model_dir.glob(pattern)})
    if not files:
        return "no weight files"
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as weights:
            while piece := weights.read(1 << 22):
                digest.update(piece)
    return f"sha256:{digest.hexdigest()}"


class ModelCard:
    """A model directory's own word on itself, read once, when the model is first asked (a damaged
    `scoring.json` is named then, not at load)."""

    def __init__(self, model_dir: Path):
        self.model_dir = Path(model_dir)

    @functools.cached_property
    def weights(self) -> str:
        """Which weights these are (`weights_identity`): named in every result's provenance."""
        return weights_identity(self.model_dir)

    @functools.cached_property
    def quality(self) -> dict | None:
        """The measured variant-effect quality on held-out genes (`eval.json`'s "quality", written by the
        demo-model pipeline), or None when the model ships no such measurement."""
        return measured_quality(self.model_dir)

    @functools.cached_property
    def group_quality(self) -> dict[str, dict[str, float]]:
        """`measured_group_quality`, where the model has a measurement of its own (`quality`)."""
        return measured_group_quality(self.model_dir) if self.quality else {}

    @functools.cached_property
    def scoring(self) -> dict:
        """How this model's variants are scored unless a caller says otherwise (`measured_setup`)."""
        return measured_setup(self.model_dir)

    @property
    def method(self) -> str:
        """The method of the model's own scoring setup (the reference FNS marginals unless it names another)."""
        return self.scoring["method"]

    @property
    def delta_radius(self) -> int | None:
        """The radius of the model's own scoring setup (None, the whole window, unless it names one)."""
        return self.scoring["delta_radius"]
