"""The server backend against the in-process engine, on the same model, in one run.

    python -m benchmarks.bench --suite server            # starts deploy/vllm/serve.sh on loopback
    python -m benchmarks.bench --suite server --server URL
    python -m benchmarks.bench --suite server --server-model DIR --snvs 0   # another model, no VCF part

The bundled model (3 MB) leaves a server's batching nothing to win; a model directory of a released
shape (`python -m benchmarks.synthetic DIR --shape 500M`: random weights, the real layout) asks the
question the backend is for: many users on one model whose every step is work.

Three questions, each asked of both backends side by side:
- one design's latency (base-level, sampled; median of interleaved repeats);
- USERS designs sent at once to the app (two launched apps: one running the model itself, one with
  CARBON_SERVER): aggregate bases/s and each request's p50/p95 latency;
- score-vcf over SNVS scattered SNVs: records/s and the largest delta difference between the two outputs.
Both backends share this machine's cores with everything else the run starts, as printed.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from carbon_app.assets import REPO

from .soak import _free_port, start_app, visitor
from .timing import interleaved_times, timed

VLLM_PYTHON = Path(os.environ.get("CARBON_VLLM_PYTHON") or REPO / ".vllm-venv" / "bin" / "python")



def vcf_records(path) -> list[tuple]:
    """(contig, position, REF, ALTs, FILTERs, CARBON_DELTA values) of each record of an annotated VCF."""
    import pysam

    with pysam.VariantFile(str(path)) as vcf:
        return [(r.chrom, r.pos, r.ref, r.alts, tuple(r.filter.keys()), tuple(r.info.get("CARBON_DELTA") or ()))
                for r in vcf]

def start_vllm(log_path: Path, model: str = "assets/models/carbon-demo", wait_s: float = 300
               ) -> tuple[subprocess.Popen, str]:
    """`deploy/vllm/serve.sh` on `model` on a free loopback port, as the README starts it; (process, URL) once
    it serves. Its output goes to `log_path`; stop it with `stop_vllm` (it runs in its own process group)."""
    from carbon_app.serving.client import ServerClient, ServerError

    if not VLLM_PYTHON.exists():
        raise RuntimeError(f"no vLLM environment at {VLLM_PYTHON}: deploy/vllm/install-cpu.sh makes it")
    port = _free_port()
    with open(log_path, "w") as out:
        process = subprocess.Popen([str(REPO / "deploy" / "vllm" / "serve.sh"), model, str(port)], cwd=REPO,
                                   env={**os.environ, "VLLM_PYTHON": str(VLLM_PYTHON)}, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + wait_s
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited: {Path(log_path).read_text()[-3000:]}")
        try:
            ServerClient(url, tries=1).info()
            return process, url
        except ServerError:
            time.sleep(2)
    stop_vllm(process)
    raise RuntimeError(f"vLLM did not start in {wait_s:.0f} s: {Path(log_path).read_text()[-3000:]}")


def stop_vllm(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=60)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _design_args(model: str, bases: int, seed: int) -> tuple:
    """The Design tab's inputs for one sampled base-level design of `bases` bases, no prompt."""
    return (model, "none", "none", "", None, bases, "", "bp", 0.9, 0, 1.0, seed, 1, False)


def _concurrent_designs(url: str, model: str, users: int, bases: int) -> tuple[float, list[float]]:
    """(wall seconds, each request's seconds) of `users` designs sent to the app at `url` at once."""
    from gradio_client import Client

    clients = [Client(url, verbose=False, headers=visitor(i)) for i in range(users)]  # as many people
    clients[0].predict(*_design_args(model, bases, 0), api_name="/generate")  # warmed: nothing first-use is timed

    def one(i: int) -> float:
        seconds, result = timed(lambda: clients[i].predict(*_design_args(model, bases, 100 + i),
                                                           api_name="/generate"))
        assert len(result[-1]["sequences"][0]) == bases
        return seconds

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=users) as pool:
        latencies = list(pool.map(one, range(users)))
    return time.perf_counter() - began, latencies


def _bare_design_seconds(served, bases: int, repeats: int) -> float:
    """Median seconds of the server's design request alone, without the per-token log-probs."""
    from carbon_app.inference.sampling import SamplingParams
    from carbon_app.serving.design_args import DesignArgs

    xargs = DesignArgs(SamplingParams(mode="bp", temperature=0.9), served.tokenizer.kmer_start_id, served.k,
                       None).to_xargs()
    times = [timed(lambda: served.server.complete(served.served.model, [served.tokenizer.open_id], bases // served.k,
                                                  samples=1, seed=7, sampling={"temperature": 1.0}, top_logprobs=0,
                                                  xargs=xargs))[0] for _ in range(repeats + 1)]
    return statistics.median(times[1:])


def server_suite(server: str | None = None, users: int = 16, bases: int = 120, snvs: int = 200,
                 repeats: int = 3, model_dir: str | None = None) -> None:
    """`model_dir`: a model directory that both backends run (default: the bundled model); `snvs` 0 skips the
    VCF part (on a large model on a CPU it takes long)."""
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.vcf import score_vcf
    from carbon_app.inference.generate import generate
    from carbon_app.model.manager import ModelManager
    from carbon_app.serving.served import connect

    with tempfile.TemporaryDirectory() as tmp:
        vllm = None
        name, app_models = "carbon-demo", {"CARBON_MODEL": ""}
        if model_dir:
            name = Path(model_dir).resolve().name
            app_models = {"CARBON_MODEL": f"{name}={Path(model_dir).resolve()}"}
            os.environ.update(app_models)  # this process's ModelManager finds it by the same name
        if server is None:
            vllm, server = start_vllm(Path(tmp) / "vllm.log", str(model_dir or "assets/models/carbon-demo"))
        try:
            bundle, served = ModelManager(device="cpu").get(name), connect(server, name)
            print(f"\n== the server backend: {bundle.name} in this process against vLLM at {server} "
                  f"(plugin: {served.takes_designs}); CPU, {os.cpu_count()} cores shared by both")
            contenders = {where: (lambda model=model: generate(model, "", bases, mode="bp", temperature=0.9,
                                                               seed=7).sequences)
                          for where, model in (("in-process", bundle), ("server", served))}
            times = interleaved_times(contenders, repeats)
            here, there = statistics.median(times["in-process"]), statistics.median(times["server"])
            print(f"one design of {bases} bases (bp, sampled): in-process {here * 1000:6.0f} ms, server "
                  f"{there * 1000:6.0f} ms: server / in-process {there / here:.2f}x")
            bare = _bare_design_seconds(served, bases, repeats)
            print(f"  what bounds the server's: the same request without each token's {served.tokenizer.n_kmers:,} "
                  f"log-probs (which the per-base confidences and marginals are read from) takes {bare * 1000:.0f} "
                  "ms; the rest is their JSON")

            rates = {}
            for where, env in (("in-process", {}), ("server", {"CARBON_SERVER": server,
                                                               "CARBON_SERVER_CONCURRENCY": str(users)})):
                process, url = start_app(Path(tmp) / f"app-{where}.log", CARBON_OUTPUT_DIR=tmp, HF_HUB_OFFLINE="1",
                                         **app_models, **env)
                try:
                    wall, latencies = _concurrent_designs(url, name, users, bases)
                finally:
                    process.terminate()
                    process.wait(timeout=60)
                rates[where] = users * bases / wall
                print(f"{users} designs at once through the app, {where:10}: {rates[where]:7,.0f} bases/s, "
                      f"p50 {_percentile(latencies, 0.5):5.1f} s, p95 {_percentile(latencies, 0.95):5.1f} s")
            print(f"aggregate throughput, server / in-process app: {rates['server'] / rates['in-process']:.2f}x "
                  f"at {users} users (goal: 2x)")
            def design(model, seed):
                return generate(model, "", bases, mode="bp", temperature=0.9, seed=seed)

            # in this process one model runs one request at a time (the app's model thread); a server takes all
            direct = {"in-process": users * bases / timed(lambda: [design(bundle, s) for s in range(users)])[0]}
            with ThreadPoolExecutor(max_workers=users) as pool:
                wall, _ = timed(lambda: list(pool.map(lambda s: design(served, s), range(users))))
            direct["server"] = users * bases / wall
            print(f"  what bounds it: the same {users} designs sent at once without the app (no page, plots, checks or "
                  f"files): in-process {direct['in-process']:,.0f} bases/s (one model, so one at a time), server "
                  f"{direct['server']:,.0f} bases/s; the app's own work per design is the rest")

            if not snvs:
                return
            rng = random.Random(5)
            contig = "".join(rng.choice("ACGT") for _ in range(100_000))
            rows = sorted(rng.sample(range(2_000, 98_000), snvs))
            fasta, vcf = Path(tmp) / "genome.fa", Path(tmp) / "in.vcf"
            fasta.write_text(f">chrB\n{contig}\n")
            vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + "".join(
                f"chrB\t{p}\t.\t{contig[p - 1]}\t{'A' if contig[p - 1] != 'A' else 'C'}\t.\t.\t.\n" for p in rows))
            reference = Reference(fasta, "bench")
            seconds = {}
            for where, model in (("in-process", bundle), ("server", served)):
                seconds[where], _ = timed(lambda model=model, where=where: score_vcf(
                    model, reference, vcf, Path(tmp) / f"{where}.vcf"))
            ours, theirs = vcf_records(Path(tmp) / "in-process.vcf"), vcf_records(Path(tmp) / "server.vcf")
            same = [r[:-1] for r in ours] == [r[:-1] for r in theirs]
            largest = max(abs(a - b) for r, q in zip(ours, theirs, strict=True)
                          for a, b in zip(r[-1], q[-1], strict=True)) if same else float("nan")
            print(f"score-vcf, {snvs} SNVs, the model's own spec ({served.card.delta_radius} bases either side, "
                  f"{bundle.k} frames, both strands): in-process {snvs / seconds['in-process']:6.1f} records/s, "
                  f"server {snvs / seconds['server']:6.1f} records/s; same records: {same}, largest delta "
                  f"difference {largest:.1e}")
        finally:
            if vllm is not None:
                stop_vllm(vllm)
