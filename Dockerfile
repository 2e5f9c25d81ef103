# Self-hosted Carbon Studio on one NVIDIA GPU (e.g. an A10, 24 GB).
#   docker build -t carbon-studio .
#   docker run --gpus all -p 7860:7860 -v carbon-cache:/data/hf -e CARBON_MODEL=HuggingFaceBio/Carbon-3B carbon-studio
# Beside a vLLM server instead (many users at once; the app then needs no GPU and holds no weights): a vLLM
# container started with deploy/vllm/serve.sh and this image with CARBON_SERVER=http://vllm:8000, as
# deploy/compose.yaml writes them out (README, "A vLLM server as the backend").
# The base image pinned to one release (Python 3.11.14 on Debian 12); pin its digest too where the registry is
# reachable (`docker buildx imagetools inspect python:3.11.14-slim-bookworm` prints it): FROM python:...@sha256:...
FROM python:3.11.14-slim-bookworm

# MALLOC_ARENA_MAX: the server's worker threads otherwise each keep a malloc arena; with 2 the
# resident memory of a long mixed load levels off about 150 MB lower (measured with carbon_app.tools.soak).
ENV PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    HF_HOME=/data/hf \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    CARBON_OUTPUT_DIR=/data/out

# gcc: Triton, which compiles the decode step's fused layers (torch.compile), builds its launcher with it
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 carbon && mkdir -p /data/hf /data/out && chown carbon /data/hf /data/out
WORKDIR /app
COPY requirements.txt .
# The PyTorch build the GPU suite was run on (benchmarks/gpu/latest.json: torch 2.11.0+cu130 on an
# H100): CUDA 13.0, which needs an NVIDIA driver >= 580 on the host and runs on an A10 (sm_86).
# requirements.txt pins the version the CPU test suite runs on; the rest is installed as pinned there.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cu130 torch==2.11.0 \
    && grep -v '^torch==' requirements.txt > /tmp/requirements-no-torch.txt \
    && pip install --no-cache-dir -r /tmp/requirements-no-torch.txt
# The code and the bundled weights belong to root: the serving user reads them and cannot change them. It
# writes only the model cache (/data/hf) and the results it serves (/data/out).
COPY . .
RUN chmod -R a+rX,go-w /app
USER carbon
VOLUME ["/data/hf", "/data/out"]
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=4)"
CMD ["python", "app.py"]
