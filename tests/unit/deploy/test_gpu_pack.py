"""deploy/gpu/pack.py: what an offline GPU host is sent (what its packages need, less what it holds) and the
trimmed wheels (a real wheel file, read back by pip's own installer)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("pack", REPO / "deploy" / "gpu" / "pack.py")
pack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pack)


def _item(name: str, version: str, requires: list[str], requested: bool = False) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": requires}, "requested": requested}


def test_the_pack_holds_what_the_requested_packages_need_and_stops_at_the_hosts_own():
    resolved = [
        _item("gradio", "6.31.0", ["fastapi>=0.1", "pandas<4", "audioop-lts; python_version >= '3.13'",
                                   "typing-extensions; python_version >= '3.12'",
                                   "pytest; extra == 'test'"], requested=True),
        _item("fastapi", "0.165.0", ["starlette>=1"]),
        _item("starlette", "1.10.0", []),
        _item("typing_extensions", "4.16.0", []),  # needed on the host's 3.12, whatever Python packs it
        _item("pandas", "3.1.1", ["tzdata>=2022"]),  # the host's: neither it nor its needs are packed
        _item("tzdata", "2026.6", []),
        _item("Transformers", "5.23.0", ["tokenizers<0.24", "torch; extra == 'torch'"], requested=True),
        _item("tokenizers", "0.23.3", []),
        _item("torch", "2.13.0", ["nvidia-cublas"], requested=True),
    ]
    host = {"pandas", "tokenizers", "transformers", "torch"}
    assert pack.needed(resolved, host, "3.12") == ["fastapi==0.165.0", "gradio==6.31.0", "starlette==1.10.0",
                                                   "transformers==5.23.0",  # pinned newer than the host's
                                                   "typing-extensions==4.16.0"]


def test_a_trimmed_wheel_loses_only_what_a_headless_host_never_serves_and_still_installs(tmp_path):
    wheel = tmp_path / "gradio-6.31.0-py3-none-any.whl"
    kept = {"gradio/__init__.py": "VERSION = '6.31.0'\n", "gradio/templates/frontend/index.html": "<html></html>",
            "gradio-6.31.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: gradio\nVersion: 6.31.0\n",
            "gradio-6.31.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            "gradio-6.31.0.dist-info/RECORD": ""}
    dropped = {"gradio/templates/node/build/server.js": "x" * 1000, "gradio/media_assets/audio/a.wav": "RIFF",
               "gradio/templates/frontend/static/ffmpeg/ffmpeg-core.wasm": "\0" * 1000}
    with zipfile.ZipFile(wheel, "w") as out:
        for name, text in {**kept, **dropped}.items():
            out.writestr(name, text)
    pack.trim(wheel)
    assert set(zipfile.ZipFile(wheel).namelist()) == set(kept)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                    str(tmp_path / "site"), str(wheel)], check=True)
    assert (tmp_path / "site" / "gradio" / "templates" / "frontend" / "index.html").is_file()
    assert not (tmp_path / "site" / "gradio" / "media_assets").exists()
