#!/usr/bin/env bash
# On an offline GPU host whose python3 holds a CUDA PyTorch: install a pack that deploy/gpu/pack.py made
# (beside the host's own packages, not over them) and run the GPU report, its tests first.
#   ./deploy/gpu/run.sh [PACK] [REPORT]     (default .whl benchmarks/gpu/latest.json)
# GPU_REPORT_FLAGS adds flags to `bench --suite gpu` (a dry run on a CPU: "--device cpu --shapes tiny").
set -euo pipefail
cd "$(dirname "$0")/../.."
pack="${1:-.whl}"; report="${2:-benchmarks/gpu/latest.json}"
site="${CARBON_PACK_SITE:-/tmp/carbon-site}"; tokenizer="$site-tokenizer"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
  "$pack"/*.whl
mkdir -p "$tokenizer"
for file in "$pack"/tokenizer/*.gz; do
  gunzip -c "$file" > "$tokenizer/$(basename "$file" .gz)"
done
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" CARBON_TEXT_TOKENIZER_DIR="$tokenizer"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda:', torch.cuda.is_available())"
# shellcheck disable=SC2086  # the flags are words
python3 -m benchmarks.bench --suite gpu --out "$report" ${GPU_REPORT_FLAGS:-}
