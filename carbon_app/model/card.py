"""What a model directory says of itself beside its weights: the scoring setup its card recommends
(`scoring.json`) and the variant-effect quality measured on held-out genes (`eval.json`).

A model directory without `scoring.json` is read as its `eval.json` measured it (older demo cards), else
with the Carbon evaluation's setup (spec section 7): one window of 8 kb centred on the variant, one strand,
the reference FNS marginals over the whole window, in every tokenization frame.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelError

SCORING_FILE = "scoring.json"
SETTINGS = ("window", "frames", "strand_average", "method", "delta_radius")

#: The Carbon evaluation's setup (spec section 7), for a model that names none of its own. frames None: all k.
CARBON_EVALUATION = {"window": 8000, "frames": None, "strand_average": False, "method": "marginal",
                     "delta_radius": None}


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
