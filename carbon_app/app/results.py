"""Where the server keeps the files it hands back (downloads: FASTA, TSV, JSON, annotated VCFs), and for how long.

Each result gets a folder of its own in the output directory. Before a new one is made, folders older than
the retention age are removed, then the oldest ones while the folders together exceed the size limit; a
folder written to in the last few minutes (a VCF job still running) is never removed for size. Uploads and
Gradio's own copies of served files live in Gradio's cache, which the app clears on the same age
(`gr.Blocks(delete_cache=...)`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import settings

RECENT_S = 600  # a folder written to this recently may belong to a job that is still running


@dataclass(frozen=True)
class Retention:
    max_age_s: float = 24 * 3600  # results older than this are removed
    max_bytes: int = 2 * 2**30  # and the oldest beyond this total

    @classmethod
    def from_env(cls) -> Retention:
        return cls(max_age_s=settings.get("CARBON_RESULTS_MAX_AGE_HOURS") * 3600,
                   max_bytes=settings.get("CARBON_RESULTS_MAX_MB") * 2**20)

    def sentence(self) -> str:
        return (f"results are kept {self.max_age_s / 3600:g} hours, and at most {self.max_bytes / 2**20:,.0f} MB "
                "of them (the oldest go first)")


def _written(folder: Path) -> tuple[float, int]:
    """(when it was last written, its size in bytes): the latest time and the total over it and its files."""
    latest, size = folder.stat().st_mtime, 0
    for path in folder.rglob("*"):
        try:
            info = path.stat()
        except OSError:  # removed meanwhile
            continue
        latest = max(latest, info.st_mtime)
        size += info.st_size if path.is_file() else 0
    return latest, size


def expire(root: Path, retention: Retention, now: float | None = None) -> list[Path]:
    """Remove the result folders under `root` that `retention` no longer keeps; the folders removed."""
    now = time.time() if now is None else now
    folders = []
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            folders.append((*_written(Path(entry.path)), Path(entry.path)))
    folders.sort()  # oldest first
    removed = [folder for written, _, folder in folders if now - written > retention.max_age_s]
    kept = [(written, size, folder) for written, size, folder in folders if now - written <= retention.max_age_s]
    total = sum(size for _, size, _ in kept)
    for written, size, folder in kept:
        if total <= retention.max_bytes:
            break
        if now - written < RECENT_S:
            continue
        removed.append(folder)
        total -= size
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def new_result_folder(root: Path, retention: Retention) -> Path:
    """A fresh folder for one result, after what `retention` no longer keeps is removed."""
    expire(root, retention)
    return Path(tempfile.mkdtemp(dir=root))
