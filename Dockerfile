# Self-hosted Carbon Studio on one NVIDIA GPU (e.g. an A10, 24 GB).
#   docker build -t carbon-studio .
#   docker run --gpus all -p 7860:7860 -v carbon-cache:/data/hf -v carbon-out:/data/out \
#     -e CARBON_MODEL=HuggingFaceBio/Carbon-3B carbon-studio
# Beside a vLLM server instead (many users at once; the app then needs no GPU and holds no weights): a vLLM
# container started with deploy/vllm/serve.sh and this image with CARBON_SERVER=http://vllm:8000, as
# deploy/compose.yaml writes them out (docs/deploy.md).
#
# Two build arguments say what differs between hosts; nothing else does:
#   BASE_IMAGE   a Python 3.11 image (default: the python image pinned to one release, Python 3.11.14 on
#                Debian 12; pin its digest too where the registry is reachable:
#                `docker buildx imagetools inspect python:3.11.14-slim-bookworm` prints it);
#                deploy/docker/local-base.sh makes one from Debian's packages where no registry is reachable
#   TORCH, TORCH_INDEX   the PyTorch build and the index it comes from (default: the CUDA 13.0 build the GPU
#                suite ran on, benchmarks/gpu/latest.json: torch 2.11.0+cu130; it needs an NVIDIA driver >= 580 on
#                the host and runs on an A10, sm_86); a CPU build for a host without a GPU
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE}
ARG TORCH=torch==2.11.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130

# MALLOC_ARENA_MAX: the server's worker threads otherwise each keep a malloc arena; with 2 the
# resident memory of a long mixed load levels off about 150 MB lower (measured with benchmarks.soak).
# Every path the server writes lies under /data: the model cache, the results it serves, and the uploads and
# temporary files (Gradio's cache, TMPDIR); the rest of the container can be read-only (docker run --read-only).
ENV PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    HF_HOME=/data/hf \
    TRITON_CACHE_DIR=/data/hf/triton \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    CARBON_OUTPUT_DIR=/data/out \
    GRADIO_TEMP_DIR=/data/tmp/gradio \
    TMPDIR=/data/tmp

# gcc: Triton, which compiles the decode step's fused layers (torch.compile), builds its launcher with it
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 carbon && mkdir -p /data/hf /data/out /data/tmp \
    && chown carbon /data/hf /data/out /data/tmp
WORKDIR /app
# PyTorch first, then the rest as requirements.txt pins them (its torch line is the CPU test suite's version):
# each its own layer, so a change to the code or the requirements rebuilds only what follows it.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" "${TORCH}"
COPY requirements.txt .
RUN grep -v '^torch==' requirements.txt > /tmp/requirements-no-torch.txt \
    && pip install --no-cache-dir -r /tmp/requirements-no-torch.txt && rm /tmp/requirements-no-torch.txt
# The code and the bundled weights belong to root: the serving user reads them and cannot change them.
COPY . .
RUN chmod -R a+rX,go-w /app
USER carbon
VOLUME ["/data/hf", "/data/out", "/data/tmp"]
EXPOSE 7860
# The port the server listens on, whatever GRADIO_SERVER_PORT says
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s CMD ["python", "/app/deploy/docker/healthcheck.py"]
CMD ["python", "app.py"]
