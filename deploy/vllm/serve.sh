#!/usr/bin/env bash
# Serve one Carbon model with vLLM's OpenAI-compatible server, with what Carbon Studio's client needs:
#   ./deploy/vllm/serve.sh MODEL [PORT] [NAME]     e.g. assets/models/carbon-demo 8000 carbon-demo
# MODEL is a local model directory or a hub id; VLLM_PYTHON is the python of vLLM's environment
# (default .vllm-venv/bin/python); extra vLLM flags go in VLLM_FLAGS (e.g. "--tensor-parallel-size 2").
set -euo pipefail
model="$1"; port="${2:-8000}"; name="${3:-$(basename "$model")}"
python="${VLLM_PYTHON:-.vllm-venv/bin/python}"
# --max-logprobs: the DNA ids and 256 more at each position (the per-base scores read the whole 6-mer
# distribution, which fills the top of the list after <dna>), or the whole vocabulary where that is
# smaller; --max-model-len: the model's own context.
read -r logprobs context < <("$python" - "$model" <<'PY'
import json, sys
from pathlib import Path

def read(name):
    path = Path(sys.argv[1]) / name
    if not path.exists():
        from huggingface_hub import hf_hub_download
        path = Path(hf_hub_download(sys.argv[1], name))
    return json.loads(path.read_text())

config, dna = read("config.json"), read("dna_config.json")
print(min(config["vocab_size"], dna["dna_vocab_size"] + 256), config["max_position_embeddings"])
PY
)
device_flags=()
if ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV cache on a CPU
  # --enforce-eager: on a CPU this vLLM traces the model with torch.compile at every start (its compile cache
  # fails to load again) and runs inductor-free, so tracing buys nothing: measured on the bundled model, 2
  # cores, start 47 s -> 28 s, a 4 x 600-base design 5.6 -> 5.2 s, a two-strand score 15.2 -> 14.0 s
  device_flags=(--dtype float32 --gpu-memory-utilization 0.2 --enforce-eager)
fi
export VLLM_HOST_IP="${VLLM_HOST_IP:-127.0.0.1}"  # its internal sockets stay on loopback
# vLLM reports usage to its maintainers' server (at start, then every 10 minutes, on a GPU) unless told not to;
# a Carbon Studio deployment reports to no one (set VLLM_NO_USAGE_STATS=0 to send them)
export VLLM_NO_USAGE_STATS="${VLLM_NO_USAGE_STATS:-1}"
# Carbon's design plugin (masks, base-level sampling): a logits processor of the V1 model runner's
# interface, read from this checkout; --logprobs-mode processed_logprobs returns what each generated token
# was drawn from (prompt log-probs, which scoring reads, are the model's own either way).
# --skip-tokenizer-init: the client sends and reads token ids only (the DNA codec is Carbon Studio's), and
# without it vLLM decodes every returned log-prob's token to text: 4,096 a position, most of the cost of a
# design's or a score's answer (measured: 20 positions, 0.9 s with, 0.25 s without, on 2 CPU cores).
export PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_USE_V2_MODEL_RUNNER=0
exec "$python" -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name "$name" \
  --host "${VLLM_HOST:-127.0.0.1}" --port "$port" --max-model-len "$context" --max-logprobs "$logprobs" \
  --logits-processors carbon_app.serving.vllm_plugin:CarbonDesign --logprobs-mode processed_logprobs \
  --skip-tokenizer-init \
  "${device_flags[@]}" ${VLLM_FLAGS:-}
