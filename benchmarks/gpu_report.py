"""The GPU report: every GPU figure in one command that fits one device call.

    python -m benchmarks.bench --suite gpu [--shapes 500M,3B,8B] [--out benchmarks/gpu/latest.json]

On Carbon shapes with random weights (bf16, fp32 k-mer head), measured side
by side in one run: the device's copy bandwidth; per shape, batch-1 greedy
decoding in tokens/s and the GB/s it implies (weights + KV read per token) as
a share of that bandwidth, stock `transformers` `generate` on the same model,
base-level against token-level time and a 64-sample design in bases/s;
speculative decoding of 3B with a 500M draft made to always agree (the
upper bound), with the target as its own draft and with a 500M draft
that never agrees (the fall-back); the peak memory of 3B + 500M at 32,768 tokens of context with the
allocator capped at 22 GiB (an A10); and, first, the GPU tests (`pytest -m gpu`,
their output beside the JSON). It prints a table and writes the figures as
JSON after each stage, so a run cut short by its time slot keeps what it
measured. On a CPU it runs the same code on whatever shapes it is given (the
tests use the tiny one).
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

import torch

from carbon_app.core.dna import BASES
from carbon_app.core.tokens import dna_prompt
from carbon_app.inference.generate import generate
from carbon_app.model.decoder import attention_kernels
from tests.synthetic import random_bundle, random_pair

from .timing import copy_bandwidth, decode_step_bytes, device_name, interleaved_times, paired_ratio, timed

A10_GIB = 22  # what an A10's 24 GB leave to one process


def _prompt(bases: int, seed: int = 0) -> str:
    generator = torch.Generator().manual_seed(seed)
    return "".join("ACGT"[i] for i in torch.randint(0, 4, (bases - bases % 6,), generator=generator).tolist())


def same_kernels(run):
    with attention_kernels():
        return run()


def forward_step_seconds(bundle, prompt_ids: list[int], steps: int = 100, rows: int = 1) -> float:
    """One decode forward alone (a replayed CUDA graph where the engine uses one) over `rows` samples, per
    step: what a decoded token costs before its 6-mer head, sampling and host round trip."""
    from carbon_app.inference.generate import _prefill
    from carbon_app.model.graphs import forward_over

    synchronize = torch.cuda.synchronize if bundle.device.type == "cuda" else (lambda: None)
    bundle.graph_pools.clear()  # graphs captured under another attention choice must not be replayed
    with torch.inference_mode():
        cache, _ = _prefill(bundle, prompt_ids, steps + 1, rows)
        forward = forward_over(bundle, cache, rows)
        token = torch.full((rows, 1), bundle.tokenizer.kmer_start_id, device=bundle.device)
        forward(token)  # a graph is captured at its first use
        synchronize()
        began = time.perf_counter()
        for _ in range(steps):
            forward(token)
        synchronize()
    return (time.perf_counter() - began) / steps


def many_row_attention_ms(bundle, prompt_ids: list[int], rows: int = 64, repeats: int = 3) -> dict:
    """A decode forward over `rows` samples with the static layer's attention written out and through
    scaled-dot-product attention (`decoder.FUSED_ATTENTION_FROM_ROWS`), interleaved: the figure that
    sets where the engine switches."""
    from carbon_app.model import decoder

    def step_with(fused_from):
        def run():
            kept, decoder.FUSED_ATTENTION_FROM_ROWS = decoder.FUSED_ATTENTION_FROM_ROWS, fused_from
            try:
                return forward_step_seconds(bundle, prompt_ids, steps=50, rows=rows)
            finally:
                decoder.FUSED_ATTENTION_FROM_ROWS = kept
        return run

    runs = {"written": step_with(None), "fused": step_with(1)}
    seconds = {name: [] for name in runs}
    for _ in range(repeats + 1):  # the first round compiles and captures
        for name, run in runs.items():
            seconds[name].append(run())
    bundle.graph_pools.clear()
    written, fused = (statistics.median(seconds[name][1:]) for name in runs)
    return {"rows": rows, "written_ms": 1e3 * written, "fused_ms": 1e3 * fused, "written_over_fused": written / fused}


def measure_shape(shape: str, device: str, copy_gb_s: float, repeats: int, tokens: int = 128,
                  design_samples: int = 64, design_bases: int = 1200) -> dict:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    bundle, stock_model = random_pair(shape, dtype=dtype, device=device)
    prompt = _prompt(600)
    ids = torch.tensor([bundle.tokenizer.encode(dna_prompt("", prompt))], device=device)
    stock = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.inference_mode():
        times = interleaved_times({
            "token": lambda: generate(bundle, prompt, tokens * 6, mode="token", temperature=0, seed=0),
            "prefill": lambda: generate(bundle, prompt, 6, mode="token", temperature=0, seed=0),
            "bp": lambda: generate(bundle, prompt, tokens * 6, mode="bp", temperature=0, seed=0),
            "stock": lambda: stock_model.generate(ids, **stock),
            "stock_same_kernels": lambda: same_kernels(lambda: stock_model.generate(ids, **stock)),
            "design": lambda: generate(bundle, prompt[:60], design_bases, samples=design_samples, temperature=0.9,
                                       seed=0),
        }, repeats)
    median = {name: statistics.median(t) for name, t in times.items()}
    step = (median["token"] - median["prefill"]) / (tokens - 1)
    read = decode_step_bytes(bundle, ids.shape[1] + tokens // 2)
    forward_step = forward_step_seconds(bundle, ids[0].tolist(), steps=min(100, tokens))
    attention_64 = many_row_attention_ms(bundle, ids[0].tolist(), rows=design_samples, repeats=repeats)
    return {
        "decode_tok_s": 1 / step,
        "decode_step_ms": 1e3 * step,
        "forward_step_ms": 1e3 * forward_step,  # the decoder alone; the rest of a step is head and sampling
        "bandwidth_bound_ms": 1e3 * read / (copy_gb_s * 1e9),  # a step's bytes at the copy's rate (bw_fraction's)
        "decode_gb_s": read / step / 1e9,
        "bw_fraction": read / step / 1e9 / copy_gb_s,
        "stock_tok_s": tokens / median["stock"],
        "ours_tok_s": tokens / median["token"],
        "ours_over_stock": paired_ratio(times["stock"], times["token"]),
        # stock again with the engine's choice of attention kernels: what the engine's own code adds
        "stock_same_kernels_tok_s": tokens / median["stock_same_kernels"],
        "ours_over_stock_same_kernels": paired_ratio(times["stock_same_kernels"], times["token"]),
        "bp_over_token": paired_ratio(times["bp"], times["token"]),
        "batched64_bp_s": design_samples * design_bases / median["design"],
        "forward_step_64": attention_64,  # the static layer's two attentions at the design's rows
    }


@contextmanager
def constant_greedy_picks(*bundles):
    """Within the block, each bundle's final norm weighs zero, so every k-mer logit is 0 and greedy
    search picks the first k-mer (AAAAAA) at every step in every model: a draft that always agrees,
    at its real cost (the same kernels on the same weights run)."""
    norms = [bundle.decoder.norm for bundle in bundles]
    saved = [weight.detach().clone() for weight in norms]
    with torch.no_grad():
        for weight in norms:
            weight.zero_()  # in place: captured graphs read the same memory
    try:
        yield
    finally:
        with torch.no_grad():
            for weight, value in zip(norms, saved, strict=True):
                weight.copy_(value)


def speculative_bounds(device: str, repeats: int, target_shape: str = "3B", draft_shape: str = "500M",
                       n_bases: int = 768) -> dict:
    """Greedy, base level, the target alone against: a `draft_shape` draft that always agrees (both
    models' picks made constant: the upper bound of drafting with that draft), one that never agrees
    (the engine must fall back), and the target as its own draft (it agrees, but each drafted token
    costs a target step, so this one cannot beat the target alone: it measures the rounds' overhead)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    target = random_bundle(target_shape, dtype=dtype, device=device)
    useless = random_bundle(draft_shape, seed=7, dtype=dtype, device=device)
    agreeing = random_bundle(draft_shape, seed=8, dtype=dtype, device=device)
    prompt = _prompt(600, seed=1)

    def agreeing_run(draft):
        with constant_greedy_picks(target, agreeing):
            return generate(target, prompt, n_bases, temperature=0, draft=draft, draft_always=draft is not None)

    runs = {
        "alone": lambda: generate(target, prompt, n_bases, temperature=0),
        "self_draft": lambda: generate(target, prompt, n_bases, temperature=0, draft=target, draft_always=True),
        "useless_draft": lambda: generate(target, prompt, n_bases, temperature=0, draft=useless),
        "constant_alone": lambda: agreeing_run(None),
        "agreeing_draft": lambda: agreeing_run(agreeing),
    }
    outputs: dict = {}
    with torch.inference_mode():
        times = interleaved_times(runs, repeats, outputs)
    same = len({tuple(outputs[name].sequences) for name in ("alone", "self_draft", "useless_draft")}) == 1
    agreed = outputs["agreeing_draft"].speculative
    return {
        "target": target_shape, "draft": draft_shape, "bases": n_bases,
        "alone_s": statistics.median(times["alone"]),
        "always_agreeing_speedup": paired_ratio(times["constant_alone"], times["agreeing_draft"]),
        "always_agreeing_accepted": agreed.acceptance_rate,
        "always_agreeing_mean_draft": statistics.mean(agreed.draft_lengths) if agreed.draft_lengths else 0.0,
        "self_draft_speedup": paired_ratio(times["alone"], times["self_draft"]),
        "useless_draft_ratio": paired_ratio(times["alone"], times["useless_draft"]),
        "same_output": same and outputs["constant_alone"].sequences == outputs["agreeing_draft"].sequences,
        "useless_fallback": outputs["useless_draft"].speculative.fallback_reason,
    }


def scoring_ratios(device: str, repeats: int, shape: str = "500M", window: int = 1200) -> dict:
    """Variant scoring on `shape`: six frames against one (per variant), and a batch of 100 SNVs (90
    clustered: three alternates at 30 positions; 10 scattered) against scoring each alone."""
    from carbon_app.inference.scan import mean_substitution_deltas
    from carbon_app.inference.score import score_variant
    from carbon_app.inference.spec import resolve_spec

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    bundle = random_bundle(shape, dtype=dtype, device=device)
    seq = _prompt(40_000, seed=2)
    other = {b: "C" if b != "C" else "A" for b in "ACGT"}
    probes = [f"{p + 1}:{seq[p]}>{other[seq[p]]}" for p in range(5_000, 35_000, 3_000)]
    with torch.inference_mode():
        times = interleaved_times({
            "one frame": lambda: [score_variant(bundle, seq, v, window=window, frames=1) for v in probes],
            "six frames": lambda: [score_variant(bundle, seq, v, window=window) for v in probes],
        }, repeats)
        wanted = {p: "".join(b for b in "ACGT" if b != seq[p]) for p in range(20_000, 20_030)}
        wanted |= {p: other[seq[p]] for p in range(2_000, 40_000, 3_800)}
        positions = sorted(wanted)
        spec = resolve_spec(bundle, window=window, frames=bundle.k, method="marginal", strand_average=False,
                            delta_radius=None)
        batch_s, batch = timed(lambda: mean_substitution_deltas(bundle, seq, positions, spec, alternates=wanted))
        singles = [(i, b, f"{p + 1}:{seq[p]}>{b}") for i, p in enumerate(positions) for b in wanted[p]]
        loop_s, alone = timed(lambda: [score_variant(bundle, seq, v, window=window).delta for _, _, v in singles])
    worst = max(abs(batch[i, BASES.index(b)] - d) for (i, b, _), d in zip(singles, alone, strict=True))
    return {"shape": shape, "window": window, "frames_cost": paired_ratio(times["six frames"], times["one frame"]),
            "batch_snvs": len(singles), "batch_s": batch_s, "loop_s": loop_s, "batch_speedup": loop_s / batch_s,
            "batch_max_delta_diff": float(worst)}


def memory_at_context(device: str, context: int = 32_768, cap_gib: float = A10_GIB) -> float | None:
    """Peak GiB allocated with 3B + 500M loaded and the 3B generating after `context` tokens, under an
    allocator capped at `cap_gib` (None without CUDA)."""
    if device != "cuda":
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gib * 2**30 / total))
    try:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        target = random_bundle("3B", dtype=torch.bfloat16, device=device)
        draft = random_bundle("500M", seed=1, dtype=torch.bfloat16, device=device)
        prompt = _prompt((context - 64) * 6)
        with torch.inference_mode():
            generate(target, prompt, 60 * 6, temperature=0.9, seed=0)
        peak = torch.cuda.max_memory_allocated() / 2**30
        del target, draft
        return peak
    finally:
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0)


_SAMPLER = """
import select, sys
pid, interval, peak = sys.argv[1], float(sys.argv[2]), 0
def anonymous():
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon:"))
print("ready", flush=True)
while not select.select([sys.stdin], [], [], interval)[0]:  # until the parent closes our stdin
    peak = max(peak, anonymous())
print(max(peak, anonymous()))  # the last reading is taken after the run has returned
"""


def peak_anonymous_rss(run, interval: float = 0.002) -> tuple[object, int]:
    """(run's result, the peak of this process's anonymous resident memory while it ran), sampled every
    `interval` seconds by a separate process: a thread here would wait for the GIL while C code that holds
    it (a large copy) allocates, and miss the peak. `ru_maxrss` cannot tell a host copy of a checkpoint
    from its memory-mapped file's pages, which loading reads either way; this can."""
    sampler = subprocess.Popen([sys.executable, "-c", _SAMPLER, str(os.getpid()), str(interval)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sampler.stdout.readline()  # sampling has begun
    try:
        result = run()
    finally:
        out, _ = sampler.communicate("")
    return result, int(out)


_LOAD_CHILD = """
import json, resource, sys, time, torch
from transformers import AutoModelForCausalLM
from carbon_app.model.bundle import load_bundle
from benchmarks.gpu_report import peak_anonymous_rss
path, how = sys.argv[1], sys.argv[2]
began = time.perf_counter()
def load():
    if how == "device_map":
        return load_bundle(path, device=torch.device("cuda"), dtype=torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda")
_, anonymous = peak_anonymous_rss(load)
torch.cuda.synchronize()
print(json.dumps({"seconds": time.perf_counter() - began, "host_peak_anonymous_gib": anonymous / 2**30,
                  "host_peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))
"""


def loading_report(device: str, shape: str = "8B") -> dict | None:
    """Loading a `shape` checkpoint (bf16, from disk) onto the GPU, each way in a fresh process: the
    engine's way (straight to the device) against loading to the CPU first; host peak RSS and time."""
    if device != "cuda":
        return None
    from tests.synthetic import CARBON_VOCAB_SIZE, write_model_dir

    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        path = write_model_dir(Path(tmp) / shape, shape, dtype=torch.bfloat16, device=device,
                               vocab_size=CARBON_VOCAB_SIZE)
        out = {}
        for how in ("device_map", "cpu_first"):
            child = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(path), how], capture_output=True,
                                   text=True, cwd=Path(__file__).resolve().parents[2], check=False)
            lines = child.stdout.strip().splitlines()
            out[how] = json.loads(lines[-1]) if child.returncode == 0 and lines else {"error": child.stderr[-500:]}
        out["checkpoint_gib"] = sum(f.stat().st_size for f in path.iterdir()) / 2**30
    return out


def gpu_tests(repo: Path, log: Path | None = None) -> dict:
    """`pytest -m gpu` in a child process: counts from its JUnit report, its output to `log` (what failed
    and why). Only the files that hold GPU tests are collected, so a GPU host needs no app-only library
    (gradio, pysam, ...) for the engine's GPU tests to run."""
    files = sorted(str(path.relative_to(repo)) for path in (repo / "tests").rglob("test_*.py")
                   if "mark.gpu" in path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "gpu.xml"
        child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-m", "gpu", f"--junitxml={junit}",
                                *files], cwd=repo, check=False, capture_output=True, text=True)
        if log is not None:
            log.write_text(child.stdout + child.stderr)
        print(child.stdout[-3000:] + child.stderr[-1000:], flush=True)
        if not junit.exists():
            return {"passed": 0, "failed": 0, "skipped": 0, "error": "pytest wrote no report"}
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = counts["failures"] + counts["errors"]
    return {"passed": counts["tests"] - failed - counts["skipped"], "failed": failed, "skipped": counts["skipped"]}


def gpu_report(device: str, shapes: list[str], out: str | Path, repeats: int = 3, run_tests: bool = True) -> dict:
    """Every figure, each stage's result written to `out` as soon as it is measured (with the seconds it
    took), so a run cut short by its time slot still returns what it measured; the tests run first."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"device": device_name(device), "torch": torch.__version__, "date": datetime.date.today().isoformat(),
              "complete": False, "stage_seconds": {}, "shapes": {}}

    def stage(name: str, measure, key: str, into: dict = report) -> None:
        """Measure, store the result as into[key], write the report so far. A stage that fails is
        recorded with its error and the report goes on: one broken figure must not cost the others."""
        began = time.perf_counter()
        try:
            value = into[key] = measure()
        except Exception as error:  # noqa: BLE001 (recorded in the report, traceback printed)
            traceback.print_exc()
            value = into[key] = {"error": f"{type(error).__name__}: {error}"[:2000]}
            report.setdefault("failed_stages", []).append(name)
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
        report["stage_seconds"][name] = round(time.perf_counter() - began, 1)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"{name} ({report['stage_seconds'][name]:.0f} s): {json.dumps(value)}", flush=True)

    if run_tests:
        stage("tests", lambda: gpu_tests(Path(__file__).resolve().parents[2],
                                         log=out.with_name(f"{out.stem}-tests.log")), "tests")
    stage("copy bandwidth", lambda: copy_bandwidth(device), "copy_gb_s")
    for shape in shapes:
        stage(shape, lambda shape=shape: measure_shape(shape, device, report["copy_gb_s"], repeats), shape,
              into=report["shapes"])
    stage("scoring", lambda: scoring_ratios(device, repeats, shape="500M" if "500M" in shapes else shapes[0]),
          "scoring")
    if "3B" in shapes:
        stage("speculative", lambda: speculative_bounds(device, repeats), "speculative")
        stage("memory", lambda: memory_at_context(device), "memory_3B_500M_32k_peak_gib")
    stage("loading", lambda: loading_report(device), "loading_8B")
    report["complete"] = True
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(report_table(report))
    return report


def _measured(value) -> bool:
    return value is not None and not (isinstance(value, dict) and "error" in value)


def report_table(report: dict) -> str:
    """The report as a Markdown table, for the README; a stage that failed is named with its error."""
    lines = [f"{report['device']}, torch {report['torch']}, {report['date']}; copy bandwidth "
             f"{report['copy_gb_s']:,.0f} GB/s", "",
             "| shape | decode tok/s | GB/s | share of copy bandwidth | stock tok/s | ours / stock "
             "| ours / stock, same attention kernels | bp / token | 64-sample design, bases/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for shape, r in report["shapes"].items():
        if _measured(r):
            lines.append(f"| {shape} | {r['decode_tok_s']:,.0f} | {r['decode_gb_s']:,.0f} "
                         f"| {100 * r['bw_fraction']:.0f}% | {r['stock_tok_s']:,.0f} | {r['ours_over_stock']:.2f}x "
                         f"| {r['ours_over_stock_same_kernels']:.2f}x | {r['bp_over_token']:.2f} "
                         f"| {r['batched64_bp_s']:,.0f} |")
    many_rows = [f"{shape} {r['forward_step_64']['written_ms']:.2f} / {r['forward_step_64']['fused_ms']:.2f} ms"
                 for shape, r in report["shapes"].items() if _measured(r) and "forward_step_64" in r]
    if many_rows:
        lines += ["", "A decode forward over 64 samples, attention written out / through scaled-dot-product "
                      "attention: " + ", ".join(many_rows)]
    if _measured(s := report.get("speculative")):
        lines += ["", f"Speculative {s['target']} + {s['draft']}: always-agreeing draft "
                      f"{s['always_agreeing_speedup']:.2f}x, useless draft {s['useless_draft_ratio']:.2f}x, "
                      f"the target as its own draft {s.get('self_draft_speedup', float('nan')):.2f}x; "
                      f"same output: {s['same_output']}"]
    if _measured(peak := report.get("memory_3B_500M_32k_peak_gib")):
        lines.append(f"3B + 500M at 32,768 tokens, allocator capped at {A10_GIB} GiB: peak {peak:.2f} GiB")
    if _measured(r := report.get("scoring")):
        lines.append(f"Scoring ({r['shape']}, {r['window']}-base windows): six frames cost "
                     f"{r['frames_cost']:.2f}x one; a batch of {r['batch_snvs']} SNVs "
                     f"{r['batch_speedup']:.2f}x faster than each alone "
                     f"(deltas within {r['batch_max_delta_diff']:.1e})")
    loading = report.get("loading_8B") or {}
    if "seconds" in loading.get("device_map", {}) and "seconds" in loading.get("cpu_first", {}):
        direct, via_cpu = loading["device_map"], loading["cpu_first"]
        lines.append(f"Loading the 8B shape ({loading['checkpoint_gib']:.1f} GiB): straight to the GPU "
                     f"{direct['seconds']:.1f} s, host peak anonymous memory "
                     f"{direct.get('host_peak_anonymous_gib', float('nan')):.1f} GiB (RSS "
                     f"{direct['host_peak_rss_gib']:.1f}); through the CPU {via_cpu['seconds']:.1f} s, "
                     f"{via_cpu.get('host_peak_anonymous_gib', float('nan')):.1f} GiB "
                     f"(RSS {via_cpu['host_peak_rss_gib']:.1f})")
    if _measured(tests := report.get("tests")):
        lines.append(f"GPU tests: {tests['passed']} passed, {tests['failed']} failed")
    lines += [f"Failed: {name}" for name in report.get("failed_stages", [])]
    return "\n".join(lines)
