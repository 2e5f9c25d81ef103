#!/usr/bin/env bash
# Build the real Dockerfile on a machine that reaches no image registry and no CUDA wheel index (as CI does):
# the base image made from Debian's packages (local-base.sh) and PyTorch's CPU build, the only two build
# arguments that differ from a GPU host's build.
#   deploy/docker/build-local.sh [TAG [VLLM_TAG]]   (default carbon-studio:local; needs root, debootstrap, docker)
# With VLLM_TAG it builds vLLM's CPU image too (deploy/vllm/Dockerfile.cpu, for deploy/compose.cpu.yaml), the
# same way.
# The CPU wheel is the CPU build of requirements.txt's torch pin, as pip finds it (this machine's wheels, or
# TORCH_CPU_INDEX, e.g. https://download.pytorch.org/whl/cpu), handed to the build from a loopback-only file
# server on WHEEL_PORT (fixed, so the build's cache knows the layer again); the build runs on the host's
# network, which reaches PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-carbon-studio:local}
vllm_tag=${2:-}
base=${BASE_IMAGE:-carbon-base:bookworm}
deploy/docker/local-base.sh "$base"
torch_pin=$(grep '^torch==' requirements.txt)
wheels=$(mktemp -d /tmp/carbon-wheels.XXXXXX)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$wheels"; }
trap cleanup EXIT
pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
  ${TORCH_CPU_INDEX:+--extra-index-url "$TORCH_CPU_INDEX"} -d "$wheels" "${torch_pin}+cpu"
wheel=$(basename "$(ls "$wheels"/torch-*.whl)")
port=${WHEEL_PORT:-18765}
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$wheels" >/dev/null 2>&1 &
server=$!
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
args=(--network host --build-arg BASE_IMAGE="$base" --build-arg TORCH="http://127.0.0.1:$port/$wheel"
      --build-arg TORCH_INDEX=https://pypi.org/simple)
docker build "${args[@]}" -t "$tag" .
if [ -n "$vllm_tag" ]; then
  docker build "${args[@]}" -f deploy/vllm/Dockerfile.cpu -t "$vllm_tag" deploy/vllm
fi
