"""deploy/vllm/serve.sh, run with a stand-in for vLLM's python that records what vLLM would be started with (the
script's own reads of the model's config run on this interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def _started_with(tmp_path, **env) -> tuple[list[str], dict[str, str]]:
    stand_in = tmp_path / "python"
    stand_in.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ]; then\n  env > "{tmp_path}/env"\n'
                        f'  printf "%s\\n" "$@" > "{tmp_path}/argv"\n  exit 0\nfi\nexec "{sys.executable}" "$@"\n')
    stand_in.chmod(0o755)
    done = subprocess.run([str(REPO / "deploy" / "vllm" / "serve.sh"), "assets/models/carbon-demo", "8123", "demo"],
                          cwd=REPO, env={**os.environ, "VLLM_PYTHON": str(stand_in), **env}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    started = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    return argv, started


def test_serve_sh_starts_vllm_with_what_carbon_needs_and_its_usage_reports_off(tmp_path):
    argv, env = _started_with(tmp_path)
    assert argv[:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "assets/models/carbon-demo"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert flags["--served-model-name"] == "demo" and flags["--port"] == "8123" and flags["--host"] == "127.0.0.1"
    assert flags["--max-model-len"] == "256"  # the demo model's own context
    # every 6-mer and 256 more at each position, or (the demo model's 4,124 ids) the whole vocabulary
    vocabulary = json.loads((REPO / "assets" / "models" / "carbon-demo" / "config.json").read_text())["vocab_size"]
    assert vocabulary < 4096 + 256 and flags["--max-logprobs"] == str(vocabulary)
    assert flags["--logits-processors"] == "carbon_app.serving.vllm_plugin:CarbonDesign"
    assert "--skip-tokenizer-init" in argv and "--enforce-eager" in argv  # no CUDA here: the CPU flags
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    # an operator who wants vLLM's usage reports sent says so
    assert _started_with(tmp_path, VLLM_NO_USAGE_STATS="0")[1]["VLLM_NO_USAGE_STATS"] == "0"
