"""Where the server keeps the files it hands back (downloads: FASTA, TSV, JSON, annotated VCFs), and for how long.

Each result gets a folder of its own in the output directory (`ResultSpace`). Before a new one is made,
folders older than the retention age are removed, then the oldest ones while the folders together and the
room the new one needs exceed the size limit; the folder of a job still running is held and never removed.
When the held folders alone leave no room, the new result is refused with a sentence: the limit is a limit,
whatever the rate of requests. A folder whose job was refused before it wrote a result is removed at once
(a genome upload refused part-way leaves nothing behind). Uploads and Gradio's own copies of served files
live in Gradio's cache, which the app clears on the same age (`gr.Blocks(delete_cache=...)`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..errors import CarbonError, InputError


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


def written(folder: Path) -> tuple[float, int]:
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


def expire(root: Path, retention: Retention, now: float | None = None, held=frozenset(),
           room: int = 0) -> tuple[list[Path], int]:
    """Remove the result folders under `root` that `retention` no longer keeps (the `held` ones, of running
    jobs, excepted), leaving `room` bytes under the size limit where it can; (the folders removed, the bytes
    the rest hold)."""
    now = time.time() if now is None else now
    folders = []
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            folders.append((*written(Path(entry.path)), Path(entry.path)))
    folders.sort()  # oldest first
    removed = [folder for written, _, folder in folders
               if now - written > retention.max_age_s and folder not in held]
    kept = [(size, folder) for _, size, folder in folders if folder not in removed]
    total = sum(size for size, _ in kept)
    for size, folder in kept:
        if total + room <= retention.max_bytes:
            break
        if folder in held:
            continue
        removed.append(folder)
        total -= size
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed, total


class ResultSpace:
    """The output directory, one folder a result, within the retention's age and size (a lock makes two
    requests' checks one after the other, so together they cannot outrun the limit)."""

    def __init__(self, root: Path, retention: Retention):
        self.root, self.retention = Path(root), retention
        self._held: dict[Path, int] = {}  # the folders of running jobs and the room each was given
        self._lock = threading.Lock()

    def new_folder(self, room: int = 0, hold: bool = False) -> Path:
        """A fresh folder for one result that may grow to `room` bytes, once expired results are removed;
        refused when the results of running jobs leave no such room. `hold`: kept, with its room, from the
        next requests' removals and counts until `release` (in the same step: no request slips between)."""
        with self._lock:
            promised = sum(self._held.values())  # room running jobs may still fill (counted whole: a bound)
            _, total = expire(self.root, self.retention, held=frozenset(self._held), room=room + promised)
            if total + promised + room > self.retention.max_bytes:
                raise InputError(f"this server's space for results is full ({total / 2**20:,.0f} of "
                                 f"{self.retention.max_bytes / 2**20:,.0f} MB held by jobs still running): try again "
                                 "when one has finished")
            folder = Path(tempfile.mkdtemp(dir=self.root))
            if hold:
                self._held[folder] = room
            return folder

    @contextmanager
    def held(self, room: int = 0) -> Iterator[Path]:
        """A new folder (`new_folder`) kept from removal while the block runs; removed with what it holds when
        the block refuses its job (a person's mistake found part-way: nothing of it is a result)."""
        folder = self.new_folder(room, hold=True)
        try:
            yield folder
        except CarbonError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            with self._lock:
                self._held.pop(folder, None)
