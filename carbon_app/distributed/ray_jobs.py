"""VCF batches and region scans on a Ray cluster: one model replica per worker, ordered output.

    python -m carbon_app score-vcf --reference hg38.fa --vcf in.vcf.gz --out out.vcf.gz --ray local --workers 2
    python -m carbon_app scan-regions --reference hg38.fa --bed exons.bed --out scan.tsv --ray HOST:6379

Each worker is a Ray actor that loads the model once through the model manager
(one GPU each where the model runs on GPUs) and opens the genome itself; the
driver reads the input, hands out chunks of records (or regions) in order, and
writes what comes back in that same order, so the output is the single-process
output. An actor that dies mid-job is restarted by Ray and its chunk retried;
the driver writes each chunk once, when its result arrives.

Ray is optional: the app and the single-process CLI do not need it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..inference.provenance import Provenance
from ..inference.spec import ScoringSpec, resolve_spec

RESTARTS = 3  # times Ray brings a dead worker back, each time retrying the chunk it held


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs the 'ray' package: pip install 'ray[default]'") from None
    return ray


def connect(address: str, workers: int | None = None):
    """Join the cluster at `address` ("local": start one on this machine with `workers` CPUs)."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    host, _, port = address.rpartition(":")
    if address not in ("local", "auto") and port.isdigit():
        # Ray waits minutes for an address that does not answer; a plain connection says so in seconds
        import socket

        try:
            socket.create_connection((host.removeprefix("ray://") or "127.0.0.1", int(port)), timeout=5).close()
        except OSError as exc:
            raise InputError(f"cannot reach the Ray cluster at '{address}': {exc.strerror or exc} (start one with "
                             "'ray start --head', or use --ray local)") from None
    try:
        if address == "local":
            ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise InputError(f"cannot reach the Ray cluster at '{address}': {str(exc).splitlines()[0]} (start one with "
                         "'ray start --head', or use --ray local)") from None
    return ray


@dataclass(frozen=True)
class ModelFacts:
    """What the driver needs to know of the model to write a job's header: no weights."""

    name: str
    k: int
    tags: object  # the model's TagScheme
    spec: ScoringSpec  # the job's scoring spec, resolved against the model where it is loaded
    provenance: Provenance  # the app, the model, its weights and the spec, as the job's outputs name them


class Worker:
    """One model replica and one open genome, on one Ray worker."""

    def __init__(self, model: str, reference_path: str, reference_name: str, device: str | None):
        import ray
        import torch

        from ..genome.reference import Reference
        from ..model.manager import ModelManager

        # as many threads as the CPUs Ray gave this worker: workers sharing a machine do not fight over cores
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
        torch.set_num_threads(max(1, int(cpus)))
        self.bundle = ModelManager(device=device).get(model)
        self.reference = Reference(reference_path, reference_name)

    def pid(self) -> int:
        return os.getpid()

    def facts(self, settings: dict) -> ModelFacts:
        spec = resolve_spec(self.bundle, **settings)
        return ModelFacts(self.bundle.name, self.bundle.k, self.bundle.tags, spec, Provenance.of(self.bundle, spec))

    def score(self, variants: list, spec: ScoringSpec) -> list:
        from ..genome.scoring import score_batch

        return score_batch(self.bundle, self.reference, variants, spec=spec)

    def scan(self, contig: str, start: int, end: int, spec: ScoringSpec) -> list:
        from ..genome.regions import scan_region

        return scan_region(self.bundle, self.reference, contig, start, end, spec=spec)


class RayScorer:
    """The chunk scorer `score_vcf` and `scan_regions` use to spread work over a Ray cluster's workers."""

    def __init__(self, address: str, workers: int, model: str, reference_path: Path, reference_name: str,
                 device: str | None, options: dict):
        if device not in (None, "cpu", "cuda"):
            raise InputError(f"--device must be cpu or cuda, not '{device}'")
        ray = connect(address, workers)
        self.ray, self.options = ray, options
        available = ray.cluster_resources()
        device = device or ("cuda" if available.get("GPU", 0) >= 1 else "cpu")  # the workers' hardware decides
        gpus = 1 if device == "cuda" else 0
        if gpus and available.get("GPU", 0) < 1:
            raise InputError("the Ray cluster has no GPU for a worker to hold the model (start workers with GPUs, "
                             "or run on CPU with --device cpu)")
        if available.get("CPU", 0) < 1:
            raise InputError("the Ray cluster has no CPU free for a worker")
        actor = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=RESTARTS, max_task_retries=RESTARTS)(Worker)
        self.workers = [actor.remote(model, str(reference_path), reference_name, device) for _ in range(workers)]
        self.in_flight = 2 * workers  # chunks handed out ahead of the one being written
        try:  # the model as the workers loaded it: the driver itself never loads the weights
            self.facts = ray.get(self.workers[0].facts.remote(options))
        except ray.exceptions.RayActorError as exc:
            raise InputError(f"a Ray worker could not load the model '{model}': {str(exc).splitlines()[0]}") from None
        self.spec, self.provenance = self.facts.spec, self.facts.provenance
        self._next = 0

    def _worker(self):
        worker = self.workers[self._next % len(self.workers)]
        self._next += 1
        return worker

    def submit(self, variants: list, step: Callable[[int], None]):
        return self._worker().score.remote(variants, self.spec)

    def submit_scan(self, contig: str, start: int, end: int):
        return self._worker().scan.remote(contig, start, end, self.spec)

    def result(self, handle, step: Callable[[int], None] | None = None) -> list:
        try:
            out = self.ray.get(handle)
        except self.ray.exceptions.RayActorError as exc:
            raise InputError(f"a Ray worker died {RESTARTS + 1} times on the same chunk: {exc}") from None
        if step:
            step(len(out))
        return out

    def worker_pids(self) -> list[int]:
        return self.ray.get([w.pid.remote() for w in self.workers])

    def close(self) -> None:
        for worker in self.workers:
            self.ray.kill(worker)
