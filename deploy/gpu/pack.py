"""Wheels for an offline GPU host whose Python already holds a CUDA PyTorch and the packages listed in
host-packages.txt: what else the app, its tests and the GPU report need, built for that host's Python,
trimmed of what a headless host never serves, with the Carbon text-tokenizer files the released-layout
tests read. The pack and a checkout travel together, so together they stay under a size limit.

    python3 deploy/gpu/pack.py [--out .whl] [--python 3.12] [--tokenizer ../shared/carbon-tokenizer]

then, on the host, in the checkout with the pack inside it: ./deploy/gpu/run.sh .whl
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: requirements.txt pins it newer than the host's image holds it (5.17): packed anyway; the host's
#: tokenizers (0.23.2) and huggingface-hub (1.33) are within what it and Gradio accept
PINNED_NEWER = {"transformers"}
#: the host's own, or pins of another torch (accelerate: the host has the version requirements.txt names)
NEVER = {"torch", "triton", "accelerate", "playwright", "ray"}
#: parts of wheels a headless host never serves: a browser's ffmpeg and bokeh, Gradio's server-side
#: rendering (Node) and demo media; plotly's own JavaScript and JupyterLab extension (the page draws with
#: Gradio's plotly)
TRIMMED = ("gradio/templates/node/", "gradio/media_assets/", "gradio/templates/frontend/static/ffmpeg/",
           "gradio/templates/frontend/static/bokeh/", "plotly/package_data/plotly.min.js", "plotly/labextension/",
           "plotly-7.1.0.data/")
#: PyPI has it as source only; built here, it is pure Python
SOURCE_ONLY = ["docopt==0.6.2"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
LIMIT_MIB = 62  # the checkout and the pack together


def name_of(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args, "-q", "--disable-pip-version-check"], check=True)


def needed(resolved: list[dict], host: set[str], python: str) -> list[str]:
    """name==version of what the requested packages need on the host's `python` (pip's resolution for it),
    walking their requirements (extras left out) and stopping at what the host holds."""
    from packaging.requirements import Requirement

    by_name = {name_of(item["metadata"]["name"]): item for item in resolved}
    todo = [name for name, item in by_name.items() if item.get("requested")]
    packed: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in packed or name not in by_name or name in NEVER or name.startswith(("nvidia-", "cuda-")):
            continue
        if name in host and name not in PINNED_NEWER:
            continue
        item = by_name[name]
        packed[name] = item["metadata"]["version"]
        for line in item["metadata"].get("requires_dist") or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(
                    {"extra": "", "python_version": python, "python_full_version": f"{python}.0"}):
                todo.append(name_of(requirement.name))
    return [f"{name}=={version}" for name, version in sorted(packed.items())]


def trim(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as source:
        kept = [info for info in source.infolist() if not info.filename.startswith(TRIMMED)]
        if len(kept) == len(source.infolist()):
            return
        trimmed = wheel.with_suffix(".trimmed")
        with zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as out:
            for info in kept:
                out.writestr(info, source.read(info))
    trimmed.replace(wheel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / ".whl")
    parser.add_argument("--python", default="3.12", help="the host's Python version")
    parser.add_argument("--tokenizer", type=Path, default=REPO.parent / "shared" / "carbon-tokenizer")
    args = parser.parse_args()
    if not (args.tokenizer / "vocab.json").is_file():
        parser.error(f"--tokenizer {args.tokenizer}: no vocab.json there")
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    platform = ["--only-binary=:all:", "--python-version", args.python, "--implementation", "cp",
                *[flag for tag in PLATFORMS for flag in ("--platform", tag)]]
    pip("wheel", "--no-deps", "-w", str(out), *SOURCE_ONLY)
    requirements = out / "requirements.txt"
    requirements.write_text("".join(
        line + "\n" for path in ("requirements.txt", "tests/requirements.txt")
        for line in (REPO / path).read_text().splitlines()
        if line.strip() and not line.startswith("#") and name_of(re.split(r"[=<>!~ ]", line)[0]) not in NEVER))
    report = out / "resolved.json"
    pip("install", "--dry-run", "--ignore-installed", "--report", str(report), *platform, "--find-links", str(out),
        "--target", str(out / "unused"), "-r", str(requirements))
    host = {name_of(line) for line in (Path(__file__).parent / "host-packages.txt").read_text().split()
            if not line.startswith("#")}
    packed = [spec for spec in needed(json.loads(report.read_text())["install"], host, args.python)
              if spec.split("==")[0] not in {name_of(s.split("==")[0]) for s in SOURCE_ONLY}]
    (out / "packed.txt").write_text("\n".join(packed) + "\n")
    pip("download", "--no-deps", *platform, "-d", str(out), "-r", str(out / "packed.txt"))
    for wheel in out.glob("*.whl"):
        trim(wheel)
    shutil.rmtree(out / "unused", ignore_errors=True)
    report.unlink()
    tokenizer = out / "tokenizer"
    tokenizer.mkdir()
    for path in sorted(args.tokenizer.iterdir()):
        if path.suffix in (".json", ".txt"):
            (tokenizer / (path.name + ".gz")).write_bytes(gzip.compress(path.read_bytes()))
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    checkout = sum((REPO / name).stat().st_size for name in tracked.decode().split("\0") if name) / 2**20
    pack = sum(path.stat().st_size for path in out.rglob("*") if path.is_file()) / 2**20
    print(f"{out}: {len(list(out.glob('*.whl')))} wheels for Python {args.python} and the tokenizer, "
          f"{pack:.1f} MiB; with the checkout's {checkout:.1f} MiB, {pack + checkout:.1f} MiB")
    if pack + checkout > LIMIT_MIB:
        sys.exit(f"over {LIMIT_MIB} MiB: add what the host already holds to host-packages.txt, or trim more")


if __name__ == "__main__":
    main()
