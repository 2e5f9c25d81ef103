"""`pip install .` makes a package that works from any folder: the `carbon` command, and the bundled models and
examples installed beside it as data; the workshop (training, benchmarks, test helpers) stays out of it."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REPO

CDS = json.loads((REPO / "assets" / "examples" / "hbb.json").read_text())["hbb_cds"]


def test_an_installed_wheel_serves_the_carbon_command_and_its_bundled_models_from_any_folder(tmp_path, demo):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(REPO),
                    "-w", str(tmp_path / "dist")], check=True, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("carbon_studio-*.whl"))
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    # the new environment sees this one's libraries (torch and the rest), not its checkout
    site = next((env_dir / "lib").glob("python*/site-packages"))
    (site / "parent.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def carbon(*args: str) -> str:
        done = subprocess.run([str(env_dir / "bin" / "carbon"), *args], cwd=elsewhere, capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "bundled  carbon-demo\n" in carbon("models")
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import carbon_app.assets as a; print(a.ASSETS)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout.strip()
    assets = Path(where)
    assert assets.is_relative_to(env_dir) and (assets / "models" / "carbon-demo" / "model.safetensors").is_file()
    scored = json.loads(carbon("score", "--fasta", str(assets / "examples" / "hbb.fa"), "--variant", "c.20A>T",
                               "--cds", CDS, "--json").strip().splitlines()[-1])
    from carbon_app.core.dna import read_fasta
    from carbon_app.inference.score import score_variant

    here = score_variant(demo, read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence, "1206:A>T")
    assert scored["variant"] == "1206:A>T" and scored["delta"] == pytest.approx(here.delta, abs=1e-6)
    # the wheel holds the app, the engine and the assets: no demo-model pipeline, benchmark or test helper
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("carbon_studio-")}
    assert tops == {"carbon_app"}, tops
    assert not [name for name in names if "/training/" in name or "/tools/" in name or "synthetic" in name]
