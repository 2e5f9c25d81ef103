"""Where the bundled files live: the demo models and the worked examples.

In a checkout they are its `assets/` folder; installed from a wheel (`pip install .`), they are the data the
package installs under `share/carbon-studio/assets` in the environment.
"""

import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_INSTALLED = Path(sysconfig.get_path("data")) / "share" / "carbon-studio" / "assets"
ASSETS = REPO / "assets" if (REPO / "assets" / "models").is_dir() else _INSTALLED
