"""Carbon Studio web app: the Hugging Face Space / Docker entry point.

    python app.py        # http://localhost:7860

Models: CARBON_MODEL (one hub id or local directory) or CARBON_MODELS (a comma
list); by default the bundled demo model and its draft. See README.md.
"""

import sys

from carbon_app.app.gradio_app import launch
from carbon_app.errors import CarbonError

if __name__ == "__main__":
    try:
        launch()
    except CarbonError as exc:  # a setting or a model the server cannot use: one line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
