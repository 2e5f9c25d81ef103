"""Where the repository's bundled files live: the demo models and the worked examples."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO / "assets"
