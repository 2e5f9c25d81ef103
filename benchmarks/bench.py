"""Speed, measured side by side in one run and printed as ratios.

    python -m benchmarks.bench                 # Carbon-500M shape, random weights, CPU
    python -m benchmarks.bench --shape 3B --device cuda

Compares, on the same model, prompt and number of new tokens (batch 1, greedy):
our generation in token mode and in base-level (bp) mode, and stock
`transformers` `generate` (plain, and restricted to DNA with our logits
processor, whose output must equal ours). Times are medians of interleaved
repeats, so drift in machine load hits every contender alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from Bio.Seq import Seq

from carbon_app.core.tokens import dna_prompt
from carbon_app.errors import ModelError
from carbon_app.inference.generate import generate
from carbon_app.inference.sampling import DnaLogitsProcessor, SamplingParams
from carbon_app.model.checkpoint import TransformersDecoder
from tests.synthetic import random_bundle, random_pair

from .server_bench import vcf_records
from .timing import NOMINAL_GB_S, copy_bandwidth, decode_step_bytes, device_name, interleaved_times, paired_ratio, timed


def _where(bundle) -> str:
    """Where a suite runs, as its header says it: the GPU's name and dtype, or the CPU and its threads."""
    if bundle.device.type == "cuda":
        return f"{device_name(bundle.device)}, {str(bundle.dtype).replace('torch.', '')}"
    return f"CPU, {torch.get_num_threads()} threads"


def run_task(bundle, stock_model, prompt_bases: int, tokens: int, repeats: int, device: str,
             copy_gb_s: float) -> dict:
    """Time every contender on one prompt length and print the table and ratios (`stock_model`: the
    `transformers` model whose weights the bundle's decoder shares); return the figures, as recorded."""
    generator = torch.Generator().manual_seed(prompt_bases)
    prompt = "".join("ACGT"[i] for i in torch.randint(0, 4, (prompt_bases,), generator=generator).tolist())
    prompt = prompt[: len(prompt) - len(prompt) % 6]
    n_bases = tokens * 6
    ids = torch.tensor([bundle.tokenizer.encode(dna_prompt("", prompt))], device=device)
    print(f"\n== batch 1, greedy, {ids.shape[1]} prompt tokens ({len(prompt)} bases), "
          f"{tokens} new tokens ({n_bases} bases)")

    stock_config = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                        pad_token_id=0, eos_token_id=None)
    dna_only = DnaLogitsProcessor(bundle.tokenizer.kmer_start_id, bundle.tokenizer.n_kmers,
                                  SamplingParams(mode="token", temperature=0), ids.shape[1])
    # our engine on transformers' decoder forward
    hf_forward = dataclasses.replace(bundle, decoder=TransformersDecoder(stock_model))
    contenders = {
        "ours, token mode": lambda: generate(bundle, prompt, n_bases, mode="token", temperature=0, seed=0),
        "ours, token mode, transformers forward": lambda: generate(hf_forward, prompt, n_bases, mode="token",
                                                                   temperature=0, seed=0),
        "ours, token mode, 1 token (prefill)": lambda: generate(bundle, prompt, 6, mode="token", temperature=0,
                                                                  seed=0),
        "ours, bp mode (FNS)": lambda: generate(bundle, prompt, n_bases, mode="bp", temperature=0, seed=0),
        "ours, bp mode, sampling T=0.9": lambda: generate(bundle, prompt, n_bases, mode="bp", temperature=0.9,
                                                          seed=0),
        "stock generate": lambda: stock_model.generate(ids, **stock_config),
        "stock generate, DNA-only processor": lambda: stock_model.generate(ids, logits_processor=[dna_only],
                                                                           **stock_config),
    }
    outputs: dict[str, object] = {}
    with torch.inference_mode():
        times = interleaved_times(contenders, repeats, outputs)
    median = {name: statistics.median(t) for name, t in times.items()}
    best = {name: min(t) for name, t in times.items()}
    print(f"{'contender':40s} {'median s':>9s} {'best s':>8s} {'tokens/s':>9s} {'bases/s':>9s}")
    for name, seconds in median.items():
        made = 1 if "1 token" in name else tokens
        print(f"{name:40s} {seconds:9.3f} {best[name]:8.3f} {made / seconds:9.1f} {made * 6 / seconds:9.1f}")

    ours_token = outputs["ours, token mode"].sequences[0]
    stock_dna = bundle.tokenizer.decode(outputs["stock generate, DNA-only processor"][0, ids.shape[1]:].tolist())
    print(f"same output, ours (token mode) and stock restricted to DNA: {ours_token == stock_dna}")
    print(f"ratios, the median of {repeats} back-to-back pairs and (best of {repeats} against best); "
          "other load on the machine only ever adds time:")

    def ratio(a: str, b: str) -> str:
        return f"{paired_ratio(times[a], times[b]):.3f} ({best[a] / best[b]:.3f})"

    def both(a: str, b: str) -> dict:
        return {"paired": paired_ratio(times[a], times[b]), "best": best[a] / best[b]}

    print(f"  bp-level / token-level time:   {ratio('ours, bp mode (FNS)', 'ours, token mode')}"
          "  (goal <= 1.05; reference implementation ~1.5)")
    print(f"  stock generate / ours (token): {ratio('stock generate', 'ours, token mode')}  (goal >= 1.3)")
    print(f"  stock generate / ours (bp):    {ratio('stock generate', 'ours, bp mode (FNS)')}  (goal >= 1.3)")
    if bundle.decoder.static:
        print(f"  transformers forward / ours:   "
              f"{ratio('ours, token mode, transformers forward', 'ours, token mode')}  (same engine, token mode)")
    step = (median["ours, token mode"] - median["ours, token mode, 1 token (prefill)"]) / (tokens - 1)
    decode_gb_s = bandwidth_report(bundle, step, ids.shape[1] + tokens // 2, copy_gb_s)
    return {"prompt_bases": len(prompt), "prompt_tokens": ids.shape[1], "new_tokens": tokens, "repeats": repeats,
            "median_s": median, "best_s": best, "same_output": ours_token == stock_dna,
            "bp_over_token": both("ours, bp mode (FNS)", "ours, token mode"),
            "stock_over_token": both("stock generate", "ours, token mode"),
            "stock_over_bp": both("stock generate", "ours, bp mode (FNS)"),
            "transformers_forward_over_ours": both("ours, token mode, transformers forward", "ours, token mode"),
            "decode_step_ms": 1e3 * step, "decode_gb_s": decode_gb_s, "copy_gb_s": copy_gb_s}


def figure(value: float) -> str:
    """A reading with three significant figures and no exponent: 1612, 45.3, 0.812 (a tiny CPU shape's
    bandwidth share is a fraction of a percent, and must not print as 0)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def bandwidth_report(bundle, step_seconds: float, mean_context: int, peak: float) -> float:
    """Bytes a batch-1 decode step must read (decoder weights, k-mer head, KV cache) over its time: printed,
    and the GB/s returned."""
    read = decode_step_bytes(bundle, mean_context)
    achieved = read / step_seconds / 1e9
    line = (f"decode step {1000 * step_seconds:.1f} ms reads {figure(read / 1e9)} GB: {figure(achieved)} GB/s, "
            f"{figure(100 * achieved / peak)}% of the measured copy bandwidth ({peak:.0f} GB/s)")
    if bundle.device.type == "cuda":
        name = device_name(bundle.device)
        nominal = next((v for k, v in NOMINAL_GB_S.items() if k in name), None)
        line += f", {figure(100 * achieved / nominal)}% of {name}'s nominal {nominal} GB/s" if nominal else f" ({name})"
    print(line + "  (goal on a GPU: >= 60%)")
    return achieved


def scan_suite(repeats: int, device: str = "cpu", dtype: torch.dtype | None = None) -> dict:
    """On the bundled demo model: what averaging over the six 6-mer frames costs against the single
    centred window, and the scan against scoring each substitution separately (both frame-averaged,
    each substitution in the same windows, so the deltas must agree)."""
    from carbon_app.assets import ASSETS
    from carbon_app.core.dna import read_fasta
    from carbon_app.inference.scan import scan_substitutions
    from carbon_app.inference.score import score_variant
    from carbon_app.model.manager import ModelManager

    bundle = ModelManager(device=device, dtype=dtype).get("carbon-demo")
    examples = ASSETS / "examples"
    seq = read_fasta(examples / "hbb.fa").sequence
    from carbon_app.inference.spec import resolve_spec

    print(f"\n== variant scoring: {bundle.name}, its own setup ({resolve_spec(bundle).sentence()}), {_where(bundle)}")
    variants = [f"{pos}:{seq[pos - 1]}>{'A' if seq[pos - 1] != 'A' else 'C'}" for pos in range(1100, 1400, 30)]
    figures: dict = {"model": bundle.name, "where": _where(bundle), "repeats": repeats}
    for strand_average in (False, True):
        times = interleaved_times({
            "one frame": lambda sa=strand_average: [score_variant(bundle, seq, v, frames=1, strand_average=sa)
                                                    for v in variants],
            "six frames": lambda sa=strand_average: [score_variant(bundle, seq, v, strand_average=sa)
                                                     for v in variants],
        }, repeats)
        per_variant = {name: 1000 * statistics.median(t) / len(variants) for name, t in times.items()}
        print(f"{'both strands' if strand_average else 'one strand  '}: single frame "
              f"{per_variant['one frame']:7.1f} ms, six frames {per_variant['six frames']:7.1f} ms per variant: "
              f"{paired_ratio(times['six frames'], times['one frame']):.2f}x  (goal <= ~3x)")
        figures["both_strands" if strand_average else "one_strand"] = {
            "one_frame_ms": per_variant["one frame"], "six_frames_ms": per_variant["six frames"],
            "six_over_one": paired_ratio(times["six frames"], times["one frame"])}

    start, end = 1201, 1320  # 120 positions at the start of HBB
    print(f"\n== mutation scan: {end - start + 1} positions x 3 substitutions, six frames each")
    outputs: dict[str, object] = {}
    timed = interleaved_times({"scan": lambda: scan_substitutions(bundle, seq, start, end, delta_radius=None),
                               "scan within 12": lambda: scan_substitutions(bundle, seq, start, end, delta_radius=12)},
                              repeats, outputs)
    scan_times, scan = timed["scan"], outputs["scan"]
    began = time.perf_counter()
    separate = [score_variant(bundle, seq, f"{pos}:{ref}>{alt}", delta_radius=None).delta
                for pos, ref, alt, _ in scan.rows()]
    separate_s = time.perf_counter() - began
    diff = max(abs(a - b[3]) for a, b in zip(separate, scan.rows(), strict=True))
    scan_s = statistics.median(scan_times)
    print(f"scan (shared windows and prefixes): {scan_s:8.2f} s")
    print(f"each substitution scored alone:     {separate_s:8.2f} s")
    print(f"largest |delta difference|:         {diff:.2e}")
    print(f"ratio alone / scan:                 {separate_s / scan_s:.1f}x")
    print(f"the same scan, each delta summed within 12 bases (the tokens re-read stop there): "
          f"{statistics.median(timed['scan within 12']):.2f} s, "
          f"{paired_ratio(timed['scan'], timed['scan within 12']):.1f}x faster than over the whole window")
    figures["scan"] = {"positions": end - start + 1, "setup": scan.spec.sentence(), "scan_s": scan_s,
                       "alone_s": separate_s, "largest_delta_difference": diff,
                       "within_12_s": statistics.median(timed["scan within 12"])}
    return figures


def vcf_suite(device: str = "cpu", window: int = 1536, dtype: torch.dtype | None = None) -> dict:
    """score-vcf on 1,000 SNVs against a loop of single `score_at` calls in the same process, on the bundled
    demo model: 900 clustered as a saturation study writes them (all three alternates at 300 positions of
    HBB's first exon and intron) and 100 scattered over a 60-kb contig, each kind timed on its own."""
    import tempfile
    from pathlib import Path

    from carbon_app.assets import ASSETS
    from carbon_app.core.dna import read_fasta
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.scoring import score_at
    from carbon_app.genome.vcf import score_vcf
    from carbon_app.model.manager import ModelManager

    bundle = ModelManager(device=device, dtype=dtype).get("carbon-demo")
    hbb = read_fasta(ASSETS / "examples" / "hbb.fa").sequence
    rng = random.Random(7)
    wide = "".join(rng.choice("ACGT") for _ in range(60_000))
    kinds = {
        "clustered": [("chr11", pos, hbb[pos - 1], alt) for pos in range(1180, 1480) for alt in "ACGT"
                      if alt != hbb[pos - 1]][:900],
        "scattered": [("chrR", pos, wide[pos - 1], rng.choice([b for b in "ACGT" if b != wide[pos - 1]]))
                      for pos in sorted(rng.sample(range(1, 60_001), 100))],
    }
    print(f"\n== score-vcf: 1,000 SNVs, {bundle.name}, window {window:,}, {bundle.k} frames, {_where(bundle)}")
    totals = [0.0, 0.0]
    worst = 0.0
    figures: dict = {"model": bundle.name, "where": _where(bundle), "window": window}
    with tempfile.TemporaryDirectory() as tmp:
        fasta = Path(tmp) / "genome.fa"
        fasta.write_text(f">chr11\n{hbb}\n>chrR\n{wide}\n")
        reference = Reference(fasta, "bench")
        for kind, rows in kinds.items():
            vcf, tsv = Path(tmp) / f"{kind}.vcf", Path(tmp) / f"{kind}.tsv"
            vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + "".join(
                f"{c}\t{p}\t.\t{r}\t{a}\t.\t.\t.\n" for c, p, r, a in rows))
            batch_s, _ = timed(lambda vcf=vcf, tsv=tsv: score_vcf(bundle, reference, vcf, Path(tmp) / "out.vcf", tsv,
                                                                   window=window))
            table = [line for line in tsv.read_text().splitlines() if not line.startswith("## ")]  # no provenance
            batched = [float(line.split("\t")[6]) for line in table[1:]]
            began = time.perf_counter()
            alone = [score_at(bundle, reference, f"{c}:{p}:{r}>{a}", window=window).delta for c, p, r, a in rows]
            loop_s = time.perf_counter() - began
            worst = max([worst] + [abs(a - b) for a, b in zip(batched, alone, strict=True)])
            totals[0] += batch_s
            totals[1] += loop_s
            print(f"{len(rows):>5} {kind}: score-vcf {batch_s:7.1f} s, loop {loop_s:7.1f} s, "
                  f"ratio {loop_s / batch_s:.1f}x")
            figures[kind] = {"snvs": len(rows), "score_vcf_s": batch_s, "loop_s": loop_s}
    print(f"all 1,000: score-vcf {totals[0]:7.1f} s, loop {totals[1]:7.1f} s, ratio {totals[1] / totals[0]:.1f}x "
          f"(goal >= 3x); largest |delta difference| {worst:.1e}")
    figures["largest_delta_difference"] = worst
    return figures


def constraints_suite(repeats: int, shape: str = "500M") -> dict:
    """A constrained design against an unconstrained one of the same length, same seed, back to back: the
    bundled demo model and a Carbon-shaped one (random weights), where a step costs what it costs on a real
    checkpoint. Constraints: 60 residues of GFP back-translated, no BsaI/BsmBI sites, runs of at most 5,
    GC 40-60%."""
    from carbon_app.inference.constraints import DesignConstraints
    from carbon_app.model.manager import ModelManager

    gfp = "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTTGKLPVPWPTL"
    constraints = DesignConstraints.from_options(protein=gfp, avoid="BsaI,BsmBI", max_homopolymer=5, gc="40:60")
    models = [ModelManager(device="cpu").get("carbon-demo"), random_bundle(shape)]
    print(f"\n== design constraints: {len(gfp)} residues ({3 * len(gfp)} bases), 4 samples, T=0.9, CPU, "
          f"{torch.get_num_threads()} threads; median of {repeats} back-to-back pairs")
    figures = {"residues": len(gfp), "samples": 4, "repeats": repeats, "models": []}
    for bundle in models:
        free, held = [], []
        for r in range(repeats):
            tags = "mammal" if bundle.tokenizer.text_tokenizer else None  # the random shapes read DNA only
            options = dict(seed=r, samples=4, temperature=0.9, species=tags)
            free.append(timed(lambda o=options, b=bundle: generate(b, "GCCACC", 3 * len(gfp), **o))[0])
            seconds, result = timed(lambda o=options, b=bundle: generate(b, "GCCACC", None, constraints=constraints,
                                                                          **o))
            held.append(seconds)
            assert all(str(Seq(s).translate()) == gfp for s in result.sequences)
        cost = paired_ratio(held, free) - 1
        print(f"{bundle.name:>14}: unconstrained {statistics.median(free):6.2f} s, constrained "
              f"{statistics.median(held):6.2f} s: cost {100 * cost:+.0f}% (goal <= +15%)")
        figures["models"].append({"model": bundle.name, "unconstrained_s": statistics.median(free),
                                  "constrained_s": statistics.median(held), "cost": cost})
    return figures


def ray_suite(workers: int = 2, window: int = 300, n: int = 1536) -> None:
    """score-vcf on the same scattered SNVs (three chunks of records) in one process and on a local Ray
    cluster of `workers` workers (each loading its own model replica), outputs compared."""
    import tempfile
    from pathlib import Path

    from carbon_app.distributed.ray_jobs import RayScorer
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.vcf import score_vcf
    from carbon_app.model.manager import ModelManager

    bundle = ModelManager(device="cpu").get("carbon-demo")
    rng = random.Random(11)
    contig = "".join(rng.choice("ACGT") for _ in range(200_000))
    rows = sorted(rng.sample(range(1, 200_001), n))
    options = dict(window=window, strand_average=False, species=None, region=None, method="marginal",
                   frames=bundle.k, context=0)
    with tempfile.TemporaryDirectory() as tmp:
        fasta, vcf = Path(tmp) / "genome.fa", Path(tmp) / "in.vcf"
        fasta.write_text(f">chrR\n{contig}\n")
        vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + "".join(
            f"chrR\t{p}\t.\t{contig[p - 1]}\t{'A' if contig[p - 1] != 'A' else 'C'}\t.\t.\t.\n" for p in rows))
        reference = Reference(fasta, "bench")
        print(f"\n== score-vcf on Ray: {n:,} scattered SNVs, {bundle.name}, window {window}, CPU, "
              f"{os.cpu_count()} cores")
        alone_s, _ = timed(lambda: score_vcf(bundle, reference, vcf, Path(tmp) / "one.vcf", **options))
        began = time.perf_counter()
        scorer = RayScorer("local", workers, "carbon-demo", fasta, "bench", "cpu", options)
        scorer.worker_pids()  # the workers are up and hold their models
        start_s = time.perf_counter() - began
        ray_s, _ = timed(lambda: score_vcf(bundle, reference, vcf, Path(tmp) / "ray.vcf", scorer=scorer, **options))
        scorer.close()
        one, spread = vcf_records(Path(tmp) / "one.vcf"), vcf_records(Path(tmp) / "ray.vcf")
    same = [r[:-1] for r in one] == [r[:-1] for r in spread]  # every record, its alleles and filters
    largest = max((abs(a - b) for r, q in zip(one, spread, strict=True) for a, b in zip(r[-1], q[-1], strict=True)
                   if a is not None and b is not None), default=0.0) if same else float("nan")
    print(f"one process:                   {alone_s:7.1f} s")
    print(f"Ray, {workers} workers (after {start_s:.0f} s of start-up): {ray_s:7.1f} s   "
          f"ratio one process / Ray {alone_s / ray_s:.2f}x; same records: {same}, largest delta difference "
          f"{largest:.1e} (a worker runs on one thread, this process on {torch.get_num_threads()})")


def app_suite(repeats: int, context: int = 8) -> dict:
    """The Variant tab's worked example (HBB sickle-cell, 1,500-base windows, both strands) with its context
    ranked, asked of the running app through gradio_client and of the engine in this script, interleaved:
    what serving a request costs beyond the work itself."""
    import json
    import tempfile
    from pathlib import Path

    from gradio_client import Client

    from carbon_app.assets import ASSETS
    from carbon_app.core.dna import read_fasta
    from carbon_app.inference.annotate import describe_variant
    from carbon_app.model.manager import ModelManager

    from .soak import start_app

    bundle = ModelManager(device="cpu").get("carbon-demo")
    example = json.loads((ASSETS / "examples" / "hbb.json").read_text())
    hbb = read_fasta(ASSETS / "examples" / example["file"]).sequence
    variant = example["variants"][0]["variant"]
    print(f"\n== the app against a script: {variant} in HBB, {bundle.name}, window 1,500, both strands, context "
          f"{context} bases, CPU, {os.cpu_count()} cores; median of {repeats} interleaved")
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_app(Path(tmp) / "app.log", CARBON_MODEL="", CARBON_OUTPUT_DIR=tmp, HF_HUB_OFFLINE="1")
        try:
            client = Client(url, verbose=False)
            contenders = {
                # the same method on both sides: the app is asked for the marginals by name, and the engine's
                # default is the model's own method, which for carbon-demo is the chain rule
                "script": lambda: describe_variant(bundle, hbb, variant, None, context, window=1500,
                                                   strand_average=True, method="marginal").context.more_damaging_than,
                "app": lambda: client.predict("carbon-demo", "none", "none", hbb, None, variant, "", 1500, True,
                                              "marginal", "none", "", context, api_name="/score_variant"
                                              )[-1]["context"]["more_damaging_than"],
            }
            outputs: dict = {}
            times = interleaved_times(contenders, repeats, outputs)
        finally:
            process.terminate()
            process.wait(timeout=30)
    script, app = statistics.median(times["script"]), statistics.median(times["app"])
    same = outputs["script"] == outputs["app"]
    print(f"script {script:6.1f} s, app {app:6.1f} s: the app takes {app / script:.2f}x the script's time "
          f"(same ranking: {same})")
    return {"variant": variant, "context": context, "repeats": repeats, "script_s": script, "app_s": app,
            "app_over_script": app / script, "same_ranking": same}


def speculative_suite(repeats: int, target_name: str = "carbon-demo", draft_names: tuple = ("carbon-demo-draft",)
                      ) -> dict:
    """A target alone against the target with each draft, greedy and sampling, bp and token mode; the bundled
    pair unless other models (names or folders) are given: drafts for one target, side by side."""
    from carbon_app.model.manager import ModelManager

    manager = ModelManager(device="cpu")
    target, drafts = manager.get(target_name), [manager.get(name) for name in draft_names]
    prompt = "ATGGCTTCAGATCTCGAAGCTTCAGCTCCAGCCATGACCGTGGAAGCAGCTGCCAAGGAACTGATCTCCGGCAAGTCTTACAAG"
    n_bases = 900
    print(f"\n== speculative decoding: {target.name} drafted by {', '.join(d.name for d in drafts)}, {n_bases} bases, "
          "batch 1, CPU")
    print(f"{'mode':6s} {'temperature':>11s} {'draft':>24s} {'alone s':>8s} {'drafted s':>9s} {'speed-up':>8s} "
          f"{'accepted':>8s} {'same output':>11s}  fall-back")
    figures = {"target": target.name, "bases": n_bases, "repeats": repeats, "runs": []}
    for mode in ("bp", "token"):
        for temperature in (0.0, 0.9):
            def alone(mode=mode, temperature=temperature):
                return generate(target, prompt, n_bases, mode=mode, temperature=temperature, seed=1)

            contenders = {"alone": alone}
            for i, draft in enumerate(drafts):
                def drafted(mode=mode, temperature=temperature, draft=draft):
                    return generate(target, prompt, n_bases, mode=mode, temperature=temperature, seed=1, draft=draft)

                contenders[i] = drafted
            outputs: dict = {}
            times = interleaved_times(contenders, repeats, outputs)
            plain, a = outputs["alone"], statistics.median(times["alone"])
            for i, draft in enumerate(drafts):
                spec, d = outputs[i], statistics.median(times[i])
                speedup = paired_ratio(times["alone"], times[i])
                same = "yes" if plain.sequences == spec.sequences else "NO"
                stats = spec.speculative
                shown = "/".join(Path(draft.name).parts[-2:])  # a folder's last two parts, a name whole
                print(f"{mode:6s} {temperature:11.1f} {shown[-24:]:>24s} {a:8.3f} {d:9.3f} {speedup:7.2f}x "
                      f"{100 * stats.acceptance_rate:7.0f}% {same:>11s}  {stats.fallback_reason or '-'}")
                figures["runs"].append({"mode": mode, "temperature": temperature, "draft": shown, "alone_s": a,
                                        "drafted_s": d, "speedup": speedup, "accepted": stats.acceptance_rate,
                                        "same_output": same == "yes", "fallback": stats.fallback_reason})
    figures["checks"] = [{"draft": draft.name, **greedy_identity_check(target, draft),
                          **sampling_distribution_check(target, draft)} for draft in drafts]
    figures["useless_draft"] = useless_draft_suite(repeats)
    return figures


def greedy_identity_check(target, draft, cases: int = 100) -> dict:
    """Seeded greedy generations with IUPAC masks, odd base counts, prompts of any length and
    1-3 samples, both modes: the drafted output must equal the target's own, token for token."""
    rng = random.Random(2026)
    same, drafted_rounds = 0, 0
    for case in range(cases):
        n = rng.randrange(1, 121, 2)  # odd
        prompt = "".join(rng.choice("ACGT") for _ in range(rng.randint(0, 40)))
        mask = "".join(rng.choice("ACGTNNNNNNRYSWKM") for _ in range(n))
        options = dict(mask=mask, temperature=0, mode=("bp", "token")[case % 2], samples=rng.randint(1, 3))
        alone = generate(target, prompt, n, **options)
        drafted = generate(target, prompt, n, draft=draft, draft_always=True, **options)
        same += drafted.sequences == alone.sequences
        drafted_rounds += drafted.speculative.rounds
    print(f"\n== greedy identity: {same}/{cases} seeded generations with masks and odd base counts identical with "
          f"and without the draft ({drafted_rounds} drafted rounds in all, no fall-back)")
    return {"greedy_cases": cases, "greedy_identical": same}


def _chi2_sf_3(x: float) -> float:
    """Survival function of the chi-squared distribution with 3 degrees of freedom."""
    return math.erfc(math.sqrt(x / 2)) + math.sqrt(2 * x / math.pi) * math.exp(-x / 2)


def sampling_distribution_check(target, draft, batches: int = 32, samples: int = 64) -> dict:
    """Sampling with the draft (T=1, bp mode): the same designs as the target alone for each
    seed, and base frequencies that fit the target's own distribution.

    The mask fixes the first two generated tokens (the speed calibration), so the third, the
    first drafted one, has known per-base marginals; each of its 6 positions gets a
    chi-squared goodness-of-fit test of the drafted samples, read with a Bonferroni correction.
    """
    from carbon_app.core.dna import BASES
    from carbon_app.inference.marginals import log_marginals

    prompt, fixed, n = "ATGGCTTCAGATCTCGAA", "GATTACAGATTA", 30
    ids = torch.tensor([target.tokenizer.encode(dna_prompt("", prompt + fixed))], device=target.device)
    with torch.inference_mode():
        logits = target.kmer_logits(target.hidden_states(ids)[0, -1])
    expected = log_marginals(torch.log_softmax(logits, dim=-1)).exp().cpu().numpy()  # [6, 4]
    counts = np.zeros((6, 4))
    identical = 0
    for seed in range(batches):
        options = dict(mask=fixed + "N" * (n - len(fixed)), temperature=1.0, seed=seed, samples=samples)
        drafted = generate(target, prompt, n, draft=draft, draft_always=True, **options)
        identical += drafted.sequences == generate(target, prompt, n, **options).sequences
        for seq in drafted.sequences:
            for j, base in enumerate(seq[len(fixed) : len(fixed) + 6]):
                counts[j, BASES.index(base)] += 1
    p_values = []
    for observed, probs in zip(counts, expected, strict=True):
        want = observed.sum() * probs
        used = want > 0
        p_values.append(_chi2_sf_3(float((((observed - want) ** 2)[used] / want[used]).sum())))
    level = 0.01 / len(p_values)
    verdict = "fits the target's distribution" if min(p_values) > level else "DOES NOT FIT"
    print(f"== sampling with the draft, T=1, bp mode: {identical}/{batches} seeds gave the same {samples} designs as "
          f"the target alone; bases 13-18 (first drafted token) over {batches * samples} samples: smallest p = "
          f"{min(p_values):.3f} over 6 chi-squared tests against the target's marginals (Bonferroni level "
          f"{level:.1e}): {verdict}")
    return {"sampling_seeds": batches, "sampling_identical": identical, "smallest_p": min(p_values),
            "bonferroni_level": level}


def useless_draft_suite(repeats: int, tokens: int = 48) -> dict:
    """A draft that never agrees (random weights) on a Carbon-500M-shaped target: the toggle must
    cost at most ~5%, because the engine measures that the draft does not pay and drops it."""
    target, draft = random_bundle("500M"), random_bundle("tiny", seed=5)
    prompt, n_bases = "ACGTTGCA" * 30, tokens * 6
    runs = {"alone": lambda: generate(target, prompt, n_bases, temperature=0),
            "with a useless draft": lambda: generate(target, prompt, n_bases, temperature=0, draft=draft)}
    outputs: dict[str, object] = {}
    times = interleaved_times(runs, repeats, outputs)
    alone, drafted = (statistics.median(times[name]) for name in runs)
    best_alone, best_drafted = (min(times[name]) for name in runs)
    toggle_ratio = paired_ratio(times["with a useless draft"], times["alone"])
    stats = outputs["with a useless draft"].speculative
    print(f"\n== Carbon-500M shape (random) with a random tiny draft, greedy, {tokens} tokens: alone {alone:.2f} s, "
          f"toggle on {drafted:.2f} s (medians of {repeats}), ratio {toggle_ratio:.3f} "
          f"(median of back-to-back pairs), best of {repeats} "
          f"{best_drafted / best_alone:.3f} (goal <= 1.05; load on the machine only ever adds time); same output: "
          f"{outputs['alone'].sequences == outputs['with a useless draft'].sequences}; "
          f"{stats.fallback_reason or 'no fall-back'}")
    # The toggle's own cost from the engine's timings inside one run, which other load on the
    # machine blurs far less than the difference of two whole runs.
    drafted_tokens = tokens - stats.plain_tokens
    extra = drafted_tokens * (stats.speculative_ms_per_token - stats.plain_ms_per_token) / 1000
    print(f"   the drafted rounds made {drafted_tokens} tokens at {stats.speculative_ms_per_token:.1f} ms each "
          f"against {stats.plain_ms_per_token:.1f} ms alone: {1000 * extra:.0f} ms spent on the draft, "
          f"{100 * extra / alone:.1f}% of the run")
    return {"tokens": tokens, "toggle_on_over_off": toggle_ratio, "best_over_best": best_drafted / best_alone,
            "draft_share_of_run": extra / alone,
            "same_output": outputs["alone"].sequences == outputs["with a useless draft"].sequences,
            "fallback": stats.fallback_reason}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="500M", help="tiny, 500M, 3B or 8B (random weights)")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per run (6 bases each)")
    parser.add_argument("--prompt-bases", default="60,600", help="comma-separated prompt lengths, one task each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--suite", default="generation,scan,speculative",
                        help="comma-separated: generation, scan, speculative, vcf, constraints, ray, app, server "
                             "(benchmarks.server_bench), gpu (the whole GPU report: benchmarks.gpu_report)")
    parser.add_argument("--server", help="the server suite's vLLM server (default: deploy/vllm/serve.sh, started)")
    parser.add_argument("--users", type=int, default=16, help="the server suite's designs sent at once")
    parser.add_argument("--server-model", help="the server suite's model directory (default: the bundled model)")
    parser.add_argument("--snvs", type=int, default=200, help="the server suite's score-vcf SNVs (0: none)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"],
                        help="the scan and vcf suites' dtype (default: bfloat16 on a GPU, float32 on a CPU); "
                             "deltas agree with the one-at-a-time path to 1e-4 in float32 only")
    parser.add_argument("--shapes", default="500M,3B,8B", help="the gpu suite's shapes")
    parser.add_argument("--out", default="benchmarks/gpu/latest.json", help="where the gpu suite writes its report")
    parser.add_argument("--record", action="store_true",
                        help="write the generation, scan, vcf, speculative, constraints and app suites' figures to "
                             "benchmarks/results/<suite>-<device>-<date>.json (docs/speed.md's tables read them)")
    parser.add_argument("--target", default="carbon-demo", help="the speculative suite's target (a name or folder)")
    parser.add_argument("--drafts", default="carbon-demo-draft",
                        help="the speculative suite's drafts for that target, comma-separated, measured side by side")
    args = parser.parse_args(argv)
    suites = set(args.suite.split(","))
    if "gpu" in suites:
        from .gpu_report import gpu_report

        gpu_report(args.device, args.shapes.split(","), args.out, repeats=args.repeats)
    suite_dtype = getattr(torch, args.dtype) if args.dtype else None
    if "scan" in suites:
        record(args.record, "scan", args.device, scan_suite(args.repeats, args.device, suite_dtype))
    if "vcf" in suites:
        record(args.record, "vcf", args.device, vcf_suite(args.device, dtype=suite_dtype))
    if "speculative" in suites:
        try:
            figures = speculative_suite(args.repeats, args.target, tuple(args.drafts.split(",")))
        except ModelError as exc:  # a --target or --drafts entry that names no model
            parser.error(str(exc))
        record(args.record, "speculative", "cpu", figures)
    if "constraints" in suites:
        record(args.record, "constraints", "cpu", constraints_suite(args.repeats))
    if "ray" in suites:
        ray_suite()
    if "app" in suites:
        record(args.record, "app", "cpu", app_suite(args.repeats))
    if "server" in suites:
        from .server_bench import server_suite

        server_suite(args.server, users=args.users, repeats=args.repeats, model_dir=args.server_model,
                     snvs=args.snvs)
    if "generation" not in suites:
        return

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    began = time.perf_counter()
    bundle, stock_model = random_pair(args.shape, dtype=dtype, device=args.device)
    params = bundle.decoder.n_parameters
    print(f"model: Carbon-{args.shape} shape, random weights, {params / 1e6:.0f}M parameters, "
          f"{str(dtype).replace('torch.', '')} on {args.device} (built in {time.perf_counter() - began:.0f} s)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("Prefill is the same work for every contender; the ratios grow as the prompt shrinks.")
    copy_gb_s = copy_bandwidth(args.device)
    tasks = [run_task(bundle, stock_model, prompt_bases, args.tokens, args.repeats, args.device, copy_gb_s)
             for prompt_bases in (int(x) for x in args.prompt_bases.split(","))]
    record(args.record, "generation", args.device, {
        "shape": args.shape, "dtype": str(dtype).replace("torch.", ""), "parameters": params, "where": _where(bundle),
        "torch": torch.__version__, "tasks": tasks})
    scoring_throughput(bundle, args.repeats)
    del bundle
    memory_report(args.device)


RESULTS = Path(__file__).parent / "results"


def record(asked: bool, suite: str, device: str, figures: dict) -> None:
    """`figures` as a dated result file (`benchmarks.tables` makes the docs' tables from these)."""
    if not asked:
        return
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{suite}-{device}-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps({"suite": suite, "device": device, "date": time.strftime("%Y-%m-%d"), **figures},
                              indent=1, default=float) + "\n")
    print(f"recorded in {out}")


def memory_report(device: str, target_shape: str = "3B", draft_shape: str = "500M", context: int = 8192) -> None:
    """3B + 500M together in bf16 (fp32 k-mer heads): measured peak on a GPU, computed from the shapes elsewhere."""
    gib = 2**30
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        target = random_bundle(target_shape, dtype=torch.bfloat16, device=device)
        draft = random_bundle(draft_shape, seed=1, dtype=torch.bfloat16, device=device)
        prompt = "ACGTTGCA" * ((context - 300) * 6 // 8)
        generate(target, prompt, 1200, temperature=0.9, seed=0, draft=draft, draft_always=True)
        peak = torch.cuda.max_memory_allocated() / gib
        print(f"\n== memory: Carbon-{target_shape} + Carbon-{draft_shape} shapes, bf16, drafted generation at "
              f"{context:,} tokens of context: peak {peak:.2f} GiB allocated (measured; an A10 has 24 GiB, "
              f"about 22 GiB usable)")
        return
    target = random_bundle(target_shape, dtype=torch.bfloat16, device="meta")
    draft = random_bundle(draft_shape, dtype=torch.bfloat16, device="meta")
    weights = (target.n_bytes + draft.n_bytes) / gib
    working = (target.memory.bytes_for(context, context, 2048) + draft.memory.bytes_for(context, context, 2048)) / gib
    print(f"\n== memory: Carbon-{target_shape} + Carbon-{draft_shape} shapes, bf16 with fp32 k-mer heads: weights "
          f"{weights:.2f} GiB, plus {working:.2f} GiB working memory for one {context:,}-token request = "
          f"{weights + working:.2f} GiB (computed from the shapes, no GPU here; an A10 has 24 GiB)")


def scoring_throughput(bundle, repeats: int, n_bases: int = 3000) -> None:
    """Per-base scoring (one forward pass, reference FNS marginals) in bases per second."""
    from carbon_app.inference.score import score_sequence

    generator = torch.Generator().manual_seed(1)
    seq = "".join("ACGT"[i] for i in torch.randint(0, 4, (n_bases,), generator=generator).tolist())
    score_sequence(bundle, seq)
    seconds = statistics.median(timed(lambda: score_sequence(bundle, seq))[0] for _ in range(repeats))
    print(f"\n== scoring: {n_bases} bases in {seconds:.2f} s, {n_bases / seconds:,.0f} bases/s (marginal method)")


if __name__ == "__main__":
    main()
