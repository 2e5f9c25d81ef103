"""Each server's own folder for Gradio's cache: what it removes beside it as it starts, and what it leaves."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from carbon_app.app import cache_folder
from carbon_app.app.cache_folder import own_cache_folder


def _folder(parent, name, age_s):
    folder = parent / name
    folder.mkdir()
    (folder / "an-upload.fa").write_text(">x\nACGT\n")
    os.utime(folder, (time.time() - age_s,) * 2)
    return folder


def test_a_new_folder_removes_only_the_ones_no_running_server_holds(tmp_path):
    killed = _folder(tmp_path, "carbon-studio-killed", 7200)
    just_made = _folder(tmp_path, "carbon-studio-just-made", 0)  # another server's, a moment before it locks it
    held = _folder(tmp_path, "carbon-studio-held", 7200)
    another_app = _folder(tmp_path, "another-app", 7200)
    elsewhere = _folder(tmp_path, "elsewhere", 7200)
    (tmp_path / "carbon-studio-link").symlink_to(elsewhere)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(60)"), str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        own = own_cache_folder(tmp_path)
        left = sorted(path.name for path in tmp_path.iterdir())
        assert left == sorted(["carbon-studio-just-made", "carbon-studio-held", "another-app", "elsewhere",
                               "carbon-studio-link", own.name]), left
        assert not killed.exists() and (elsewhere / "an-upload.fa").exists()
        assert own.name.startswith(cache_folder.PREFIX) and cache_folder._in_use(own)  # locked while it runs
        assert cache_folder._in_use(held) and not cache_folder._in_use(another_app)
        assert cache_folder._in_use(just_made)  # within the grace
    finally:
        holder.kill()
        holder.wait()
    assert not cache_folder._in_use(held)  # its holder ended: free, and old enough to go at the next start


def test_a_servers_folder_goes_when_it_exits(tmp_path):
    made = subprocess.run([sys.executable, "-c", (
        "import sys; from pathlib import Path; from carbon_app.app.cache_folder import own_cache_folder; "
        "folder = own_cache_folder(Path(sys.argv[1])); (folder / 'an-upload.fa').write_text('>x'); print(folder)"),
        str(tmp_path)], capture_output=True, text=True, check=True)
    assert made.stdout.strip().startswith(str(tmp_path / cache_folder.PREFIX))
    assert list(tmp_path.iterdir()) == []
