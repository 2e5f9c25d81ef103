"""This server's own folder for Gradio's cache: the uploads, and Gradio's copies of the files the page shows.

Gradio's default, `<system temp>/gradio`, is shared by every Gradio app on the host and by this app's earlier
runs, and Gradio clears only the files of the app that is running. The uploads' cap (`admission.UploadBudget`)
measures the folder, so in a shared one it counted other apps' files and what a killed run left: past the cap,
every upload was refused, for good. Each server therefore takes a folder of its own inside the configured one
(GRADIO_TEMP_DIR), holding a lock on it while it runs; at start it removes the folders of servers that no longer
run (nobody holds their lock, which the system lets go of when a process ends, however it ends), and at exit
its own.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

PREFIX = "carbon-studio-"
#: a folder nobody holds is left alone until it is this old: it may be another server's, made a moment ago and
#: not yet locked
_UNHELD_GRACE_S = 60


def own_cache_folder(parent: Path) -> Path:
    """A new folder inside `parent`, this process's until it exits; the stale ones beside it removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    for folder in parent.glob(PREFIX + "*"):
        if folder.is_dir() and not folder.is_symlink() and not _in_use(folder):
            shutil.rmtree(folder, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    held = os.open(folder, os.O_RDONLY)  # kept open, and so locked, for the process's life
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    atexit.register(_remove, folder, held)
    return folder


def _in_use(folder: Path) -> bool:
    """Whether a running server holds `folder`, or may be about to (made within the grace)."""
    try:
        probe = os.open(folder, os.O_RDONLY)
    except OSError:
        return True  # gone meanwhile, or not ours to read: left alone
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(probe)  # and with it the probe's lock
    try:
        return time.time() - folder.stat().st_mtime < _UNHELD_GRACE_S
    except OSError:
        return True


def _remove(folder: Path, held: int) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os.close(held)
