"""The self-hosted image, built from the real Dockerfile and driven as a person with Docker drives it.

`.ci/run` builds it (deploy/docker/build-local.sh: the local base image and PyTorch's CPU build, the only
two build arguments that differ from a GPU host's build) and names it in CARBON_TEST_IMAGE; where no Docker
engine runs, or no image was built outside CI, these tests skip. Containers share the host's network (the
engine runs with no bridge), so the app answers on a loopback port, and the model comes from a loopback
stand-in for the hub on the first start only."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pysam
import pytest
from Bio import SeqIO

from tests.conftest import REPO, table_lines
from tests.hub_standin import HubStandIn
from tests.vcf_jobs import partial_line, random_vcf, records_of, vcf_job_running

IMAGE = os.environ.get("CARBON_TEST_IMAGE", "carbon-studio:local")
HUB_MODEL = "carbon-test/carbon-demo"  # the bundled demo model, served as a hub repository by the stand-in
COMMIT = "5d2e1c0b9a8f7e6d5c4b3a29180706f5e4d3c2b1"
WAIT_S = 300


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        pytest.skip("no Docker engine runs here (.ci/run starts one)")
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        if os.environ.get("CARBON_TEST_IMAGE"):
            pytest.fail(f"the image {IMAGE} was not built")
        pytest.skip(f"no image {IMAGE}: deploy/docker/build-local.sh builds it")
    return IMAGE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(name: str) -> str:
    return docker("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()


def _wait_healthy(name: str) -> float:
    began = time.monotonic()
    while time.monotonic() - began < WAIT_S:
        status = _health(name)
        if status == "healthy":
            return time.monotonic() - began
        if docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip() != "true":
            break
        time.sleep(0.5)
    pytest.fail(f"{name} is {_health(name)}, not healthy: {docker('logs', name, check=False).stderr[-3000:]}")


class Deployment:
    """The image run with its three /data volumes as host folders (uid 1000 writes them), on a port of its own."""

    def __init__(self, image: str, root: Path, hub_url: str):
        self.image, self.hub_url, self.port = image, hub_url, _free_port()
        self.volumes = {name: root / name for name in ("hf", "out", "tmp")}
        for folder in self.volumes.values():
            folder.mkdir()
            folder.chmod(0o777)
        self.name = f"carbon-test-{os.getpid()}-{self.port}"
        self.url = f"http://127.0.0.1:{self.port}/"

    def run(self) -> None:
        mounts = [arg for name, folder in self.volumes.items() for arg in ("-v", f"{folder}:/data/{name}")]
        docker("run", "-d", "--name", self.name, "--network", "host", "--health-interval", "1s", *mounts,
               "-e", f"GRADIO_SERVER_PORT={self.port}", "-e", f"CARBON_MODELS=carbon-demo,{HUB_MODEL}",
               "-e", f"HF_ENDPOINT={self.hub_url}", self.image)

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)


@pytest.fixture(scope="module")
def deployed(image, tmp_path_factory):
    """The image's first start: the hub stand-in serves the second model, downloaded into the cache volume."""
    root = tmp_path_factory.mktemp("docker")
    hub = HubStandIn({HUB_MODEL: (COMMIT, REPO / "assets" / "models" / "carbon-demo")})
    with hub:
        deployment = Deployment(image, root, hub.url)
        deployment.run()
        try:
            deployment.healthy_after_s = _wait_healthy(deployment.name)
            deployment.hub = hub
            yield deployment
        finally:
            deployment.remove()


@pytest.fixture(scope="module")
def client(deployed):
    from gradio_client import Client

    return Client(deployed.url, verbose=False)


def test_the_first_start_fetches_the_hub_model_into_the_cache_volume_and_turns_healthy_on_its_port(deployed):
    fetched = deployed.hub.fetched(HUB_MODEL)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.split("/", 1)[1] for p in fetched}
    assert all(p.startswith(COMMIT + "/") for p in fetched)
    assert (deployed.volumes["hf"] / "hub" / "models--carbon-test--carbon-demo" / "snapshots" / COMMIT).is_dir()
    assert deployed.port != 7860 and _health(deployed.name) == "healthy"


def test_it_runs_as_uid_1000_cannot_change_its_code_or_weights_and_writes_only_to_its_volumes(deployed, client):
    status = docker("exec", deployed.name, "cat", "/proc/1/status").stdout
    assert next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:] == ["1000"] * 4
    for target in ("/app/app.py", "/app/carbon_app/__init__.py", "/app/assets/models/carbon-demo/model.safetensors"):
        refused = docker("exec", deployed.name, "sh", "-c", f"echo x >> {target}", check=False)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, target
    client.predict("carbon-demo", "none", "none", "ACGTAC", None, 30, "", "bp", 0.9, 0, 1.0, "1", 1, False,
                   api_name="/generate")
    assert docker("diff", deployed.name).stdout.strip() == ""  # nothing written outside the /data volumes
    assert any(deployed.volumes["out"].iterdir()) and any(deployed.volumes["tmp"].iterdir())


def test_a_design_and_its_fasta_genbank_and_json_downloads(client):
    out = client.predict("carbon-demo", "mammal", "none", "ATGGCTTCAGATCTCGAA", None, 60, "", "bp", 0.9, 0, 1.0,
                         "7", 2, False, api_name="/generate")
    result, files = out[-1], out[5]
    assert len(result["sequences"]) == 2 and all(len(s) == 60 for s in result["sequences"])
    by_name = {Path(f).name: Path(f) for f in files}
    assert set(by_name) == {"designs.fa", "designs_with_prompt.fa", "designs.gb", "designs.json"}
    assert [str(r.seq) for r in SeqIO.parse(by_name["designs.fa"], "fasta")] == result["sequences"]
    assert [str(r.seq)[-60:] for r in SeqIO.parse(by_name["designs.gb"], "genbank")] == result["sequences"]
    assert json.loads(by_name["designs.json"].read_text())["sequences"] == result["sequences"]


def test_a_variant_score_a_scan_and_the_models_tab(client):
    hbb = "".join(REPO.joinpath("assets", "examples", "hbb.fa").read_text().splitlines()[1:])
    scored = client.predict(HUB_MODEL, "none", "none", hbb, None, "1206:A>T", "", 300, False, "marginal", "none", "",
                            0, api_name="/score_variant")
    assert isinstance(scored[-1]["delta"], float) and "delta = LL(alt) − LL(ref)" in scored[0]
    scan = client.predict("carbon-demo", "none", "none", hbb, None, 1200, 1209, 300, "marginal", "", api_name="/scan")
    assert len(scan[-1]["rows"]) == 30
    table, pairing, data = client.predict(api_name="/models")
    assert data["configured"] == ["carbon-demo", HUB_MODEL]
    assert "carbon-demo" in client.predict(HUB_MODEL, api_name="/model_card")  # its card, read from the cache


def test_a_vcf_batch_and_its_downloads(client):
    from gradio_client import handle_file

    vcf = handle_file(str(REPO / "assets" / "examples" / "hbb_variants.vcf"))
    summary, plot, table, files = client.predict("carbon-demo", "none", "none", "HBB-locus-demo", vcf, 300, False,
                                                 "marginal", 0, api_name="/score_vcf")
    assert "7 records, 8 ALT alleles: 7 scored" in summary
    vcf = next(f for f in files if f.endswith(".vcf.gz"))
    assert len(list(pysam.VariantFile(vcf))) == 7 and any(f.endswith(".vcf.gz.tbi") for f in files)
    assert len(table_lines(next(f for f in files if f.endswith(".tsv")))) == 1 + 8


def test_docker_stop_during_a_vcf_job_leaves_a_valid_indexed_partial_vcf_then_it_restarts_offline(deployed, client,
                                                                                                   tmp_path):
    job = vcf_job_running(client, random_vcf(tmp_path / "in.vcf", 1100))
    began = time.monotonic()
    docker("stop", "--time", "60", deployed.name, timeout=90)  # room to see how long it takes
    stopped_in = time.monotonic() - began
    del job
    # within the 30 s docs/deploy.md tells docker to wait (--stop-timeout 30): the chunk, then a clean close
    assert stopped_in < 30, stopped_in
    logs = docker("logs", deployed.name).stderr
    assert "SIGTERM: closing; 1 running job(s) stop after their current chunk" in logs, logs[-3000:]
    assert "every job has stopped; the server closes" in logs
    assert docker("inspect", "--format", "{{.State.ExitCode}}", deployed.name).stdout.strip() != "137"  # not killed
    kept = [p for p in deployed.volumes["out"].rglob("in.carbon.vcf.gz")]
    assert len(kept) == 1, logs[-3000:]
    # whole chunks of 512 records: the one the job was on when it finished within the grace (on a quiet host),
    # on a host loaded past that none, the stop then made at once (the close keeps to the grace either way)
    records = len(records_of(kept[0]))
    assert records in (0, 512, 1024) and Path(f"{kept[0]}.tbi").is_file()
    assert partial_line(kept[0]).startswith(f"##carbon_partial=stopped after record {records} of 1100")

    deployed.hub.__exit__()  # the hub goes away: the restart reads the model from the cache volume
    asked = len(deployed.hub.requests)
    docker("start", deployed.name)
    _wait_healthy(deployed.name)
    from gradio_client import Client

    again = Client(deployed.url, verbose=False).predict(HUB_MODEL, "none", "none", "ACGTAC", None, 12, "", "bp", 0.9,
                                                         0, 1.0, "3", 1, False, api_name="/generate")
    assert len(again[-1]["sequences"][0]) == 12 and len(deployed.hub.requests) == asked


VLLM_IMAGE = os.environ.get("CARBON_TEST_VLLM_IMAGE", "carbon-vllm-cpu:local")


def test_the_compose_file_brings_the_app_up_beside_vllm_and_down_leaves_nothing(image, demo, tmp_path):
    """deploy/compose.yaml with its CPU file, as a host without a GPU brings it up, on the images CI built (the
    test's own file serves the bundled model and checks health every 2 s)."""
    from gradio_client import Client

    from carbon_app.core.dna import read_fasta
    from carbon_app.inference.score import score_variant

    if shutil.which("docker-compose") is None:
        pytest.skip("Debian's docker-compose is not installed (.ci/run installs it)")
    if docker("image", "inspect", VLLM_IMAGE, check=False).returncode != 0:
        if os.environ.get("CARBON_TEST_VLLM_IMAGE"):
            pytest.fail(f"the image {VLLM_IMAGE} was not built")
        pytest.skip(f"no image {VLLM_IMAGE}: deploy/docker/build-local.sh TAG VLLM_TAG builds it")
    project, port = f"carbontest{os.getpid()}", _free_port()
    compose = ["docker-compose", "-p", project, "-f", str(REPO / "deploy" / "compose.yaml"),
               "-f", str(REPO / "deploy" / "compose.cpu.yaml"), "-f", str(REPO / "tests" / "compose.test.yaml")]
    env = {**os.environ, "CARBON_IMAGE": image, "VLLM_IMAGE": VLLM_IMAGE, "CARBON_PORT": f"127.0.0.1:{port}"}
    try:
        began = time.monotonic()
        up = subprocess.run([*compose, "up", "-d"], env=env, capture_output=True, text=True, timeout=WAIT_S)
        assert up.returncode == 0, up.stderr[-3000:] + docker("logs", f"{project}_vllm_1", check=False).stderr[-3000:]
        _wait_healthy(f"{project}_app_1")
        up_s = time.monotonic() - began
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert client.predict(api_name="/models")[2]["server"] == {
            "url": "http://vllm:8000/v1", "model": "carbon-demo", "context_tokens": 256, "answers": True}
        hbb = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence
        there = client.predict("carbon-demo", "none", "none", hbb, None, "1206:A>T", "", 300, False, "marginal",
                               "none", "", 0, api_name="/score_variant")[-1]["delta"]
        here = score_variant(demo, hbb, "1206:A>T", window=300, strand_average=False, method="marginal").delta
        assert there == pytest.approx(here, abs=1e-4) and up_s < WAIT_S
    finally:
        down = subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr[-2000:]
    label = f"label=com.docker.compose.project={project}"
    assert docker("ps", "-aq", "--filter", label).stdout.strip() == ""
    assert docker("volume", "ls", "-q", "--filter", label).stdout.strip() == ""
    assert docker("network", "ls", "-q", "--filter", label).stdout.strip() == ""
