"""Speed, measured side by side in one run and printed as ratios.

    python -m carbon_app.bench                 # Carbon-500M shape, random weights, CPU
    python -m carbon_app.bench --shape 3B --device cuda

Compares, on the same model, prompt and number of new tokens (batch 1, greedy):
our generation in token mode and in base-level (bp) mode, and stock
`transformers` `generate` (plain, and restricted to DNA with our logits
processor, whose output must equal ours). Times are medians of interleaved
repeats, so drift in machine load hits every contender alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from .generate import generate
from .sampling import DnaLogitsProcessor, SamplingParams
from .synthetic import random_bundle


def _timed(fn) -> tuple[float, object]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    began = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - began, out


def run_task(bundle, prompt_bases: int, tokens: int, repeats: int, device: str) -> None:
    """Time every contender on one prompt length and print the table and ratios."""
    generator = torch.Generator().manual_seed(prompt_bases)
    prompt = "".join("ACGT"[i] for i in torch.randint(0, 4, (prompt_bases,), generator=generator).tolist())
    prompt = prompt[: len(prompt) - len(prompt) % 6]
    n_bases = tokens * 6
    ids = torch.tensor([bundle.tokenizer.encode("<dna>" + prompt)], device=device)
    print(f"\n== batch 1, greedy, {ids.shape[1]} prompt tokens ({len(prompt)} bases), "
          f"{tokens} new tokens ({n_bases} bases)")

    stock_config = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                        pad_token_id=0, eos_token_id=None)
    dna_only = DnaLogitsProcessor(bundle.tokenizer.kmer_start_id, bundle.tokenizer.n_kmers,
                                  SamplingParams(mode="token", temperature=0), ids.shape[1])
    contenders = {
        "ours, token mode": lambda: generate(bundle, prompt, n_bases, mode="token", temperature=0, seed=0),
        "ours, bp mode (FNS)": lambda: generate(bundle, prompt, n_bases, mode="bp", temperature=0, seed=0),
        "ours, bp mode, sampling T=0.9": lambda: generate(bundle, prompt, n_bases, mode="bp", temperature=0.9,
                                                          seed=0),
        "stock generate": lambda: bundle.model.generate(ids, **stock_config),
        "stock generate, DNA-only processor": lambda: bundle.model.generate(ids, logits_processor=[dna_only],
                                                                            **stock_config),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    outputs: dict[str, object] = {}
    with torch.inference_mode():
        for fn in contenders.values():  # warm-up
            fn()
        for _ in range(repeats):
            for name, fn in contenders.items():
                seconds, outputs[name] = _timed(fn)
                times[name].append(seconds)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{'contender':40s} {'median s':>9s} {'tokens/s':>9s} {'bases/s':>9s}")
    for name, seconds in median.items():
        print(f"{name:40s} {seconds:9.3f} {tokens / seconds:9.1f} {n_bases / seconds:9.1f}")

    ours_token = outputs["ours, token mode"].sequences[0]
    stock_dna = bundle.tokenizer.decode(outputs["stock generate, DNA-only processor"][0, ids.shape[1]:].tolist())
    print(f"same output, ours (token mode) and stock restricted to DNA: {ours_token == stock_dna}")
    print(f"ratio bp-level / token-level time:   {median['ours, bp mode (FNS)'] / median['ours, token mode']:.3f}"
          "  (goal <= 1.05; reference implementation ~1.5)")
    print(f"ratio stock generate / ours (token): {median['stock generate'] / median['ours, token mode']:.2f}x"
          "  (goal >= 1.25x)")
    print(f"ratio stock generate / ours (bp):    {median['stock generate'] / median['ours, bp mode (FNS)']:.2f}x")


def scan_suite(repeats: int) -> None:
    """Saturation mutagenesis of 300 positions on the bundled demo model: the shared-prefix scan
    against scoring each substitution separately with `score_variant` on the same window."""
    from pathlib import Path

    from .dna import read_fasta
    from .models import ModelManager
    from .scan import scan_substitutions
    from .score import score_variant

    bundle = ModelManager(device="cpu").get("carbon-demo")
    examples = Path(__file__).resolve().parent.parent / "assets" / "examples"
    seq = read_fasta(examples / "hbb.fa").sequence
    start, end = 1050, 1349  # 300 positions around the start of HBB
    print(f"\n== mutation scan: {bundle.name}, {end - start + 1} positions x 3 substitutions, CPU, "
          f"{torch.get_num_threads()} threads")
    scan_times, separate_times = [], []
    for _ in range(repeats):
        seconds, scan = _timed(lambda: scan_substitutions(bundle, seq, start, end))
        scan_times.append(seconds)
    window = (scan.window_start, scan.window_end)
    sub_seq = seq[window[0] - 1 : window[1]]
    began = time.perf_counter()
    separate = [score_variant(bundle, sub_seq, f"{pos - window[0] + 1}:{ref}>{alt}", window=len(sub_seq)).delta
                for pos, ref, alt, _ in scan.rows()]
    separate_times.append(time.perf_counter() - began)
    diff = max(abs(a - b[3]) for a, b in zip(separate, scan.rows(), strict=True))
    scan_s, separate_s = statistics.median(scan_times), statistics.median(separate_times)
    print(f"window {window[0]}-{window[1]} ({window[1] - window[0] + 1} bases); {len(separate)} substitutions")
    print(f"scan (shared prefix, batched):   {scan_s:8.2f} s")
    print(f"each variant scored separately:  {separate_s:8.2f} s")
    print(f"largest |delta difference|:      {diff:.2e}")
    print(f"ratio separate / scan:           {separate_s / scan_s:.1f}x  (goal >= 3x)")


def speculative_suite(repeats: int) -> None:
    """The bundled pair: target alone against target + draft, greedy and sampling, bp and token mode."""
    from .models import ModelManager

    manager = ModelManager(device="cpu")
    target, draft = manager.get("carbon-demo"), manager.get("carbon-demo-draft")
    prompt = "ATGGCTTCAGATCTCGAAGCTTCAGCTCCAGCCATGACCGTGGAAGCAGCTGCCAAGGAACTGATCTCCGGCAAGTCTTACAAG"
    n_bases = 900
    print(f"\n== speculative decoding: {target.name} drafted by {draft.name}, {n_bases} bases, batch 1, CPU")
    print(f"{'mode':6s} {'temperature':>11s} {'alone s':>8s} {'drafted s':>9s} {'speed-up':>8s} "
          f"{'accepted':>8s} {'same output':>11s}  fall-back")
    for mode in ("bp", "token"):
        for temperature in (0.0, 0.9):
            def alone(mode=mode, temperature=temperature):
                return generate(target, prompt, n_bases, mode=mode, temperature=temperature, seed=1)

            def drafted(mode=mode, temperature=temperature):
                return generate(target, prompt, n_bases, mode=mode, temperature=temperature, seed=1, draft=draft)

            alone(), drafted()  # warm-up
            alone_times, drafted_times = [], []
            for _ in range(repeats):
                seconds, plain = _timed(alone)
                alone_times.append(seconds)
                seconds, spec = _timed(drafted)
                drafted_times.append(seconds)
            a, d = statistics.median(alone_times), statistics.median(drafted_times)
            same = "yes" if plain.sequences == spec.sequences else ("n/a" if temperature else "NO")
            stats = spec.speculative
            accepted = 100 * stats["acceptance_rate"]
            print(f"{mode:6s} {temperature:11.1f} {a:8.3f} {d:9.3f} {a / d:7.2f}x {accepted:7.0f}% "
                  f"{same:>11s}  {stats['fallback_reason'] or '-'}")
    print("(sampling draws other random numbers with a draft, so its outputs differ while the distribution is the "
          "target's: tests/test_speculative.py checks base frequencies)")
    useless_draft_suite(repeats)


def useless_draft_suite(repeats: int, tokens: int = 48) -> None:
    """A draft that never agrees (random weights) on a Carbon-500M-shaped target: the toggle must
    cost at most ~5%, because the engine measures that the draft does not pay and drops it."""
    target, draft = random_bundle("500M"), random_bundle("tiny", seed=5)
    prompt, n_bases = "ACGTTGCA" * 30, tokens * 6
    runs = {"alone": lambda: generate(target, prompt, n_bases, temperature=0),
            "with a useless draft": lambda: generate(target, prompt, n_bases, temperature=0, draft=draft)}
    for fn in runs.values():
        fn()
    times = {name: [] for name in runs}
    outputs = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            seconds, outputs[name] = _timed(fn)
            times[name].append(seconds)
    alone, drafted = (statistics.median(times[name]) for name in runs)
    stats = outputs["with a useless draft"].speculative
    print(f"\n== Carbon-500M shape (random) with a random tiny draft, greedy, {tokens} tokens: alone {alone:.2f} s, "
          f"toggle on {drafted:.2f} s, ratio {drafted / alone:.3f} (goal <= 1.05); same output: "
          f"{outputs['alone'].sequences == outputs['with a useless draft'].sequences}; "
          f"{stats['fallback_reason'] or 'no fall-back'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m carbon_app.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="500M", help="tiny, 500M, 3B or 8B (random weights)")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per run (6 bases each)")
    parser.add_argument("--prompt-bases", default="60,600", help="comma-separated prompt lengths, one task each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--suite", default="generation,scan,speculative",
                        help="comma-separated: generation, scan, speculative")
    args = parser.parse_args(argv)
    suites = set(args.suite.split(","))
    if "scan" in suites:
        scan_suite(args.repeats)
    if "speculative" in suites:
        speculative_suite(args.repeats)
    if "generation" not in suites:
        return

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    began = time.perf_counter()
    bundle = random_bundle(args.shape, dtype=dtype, device=args.device)
    params = sum(p.numel() for p in bundle.model.parameters())
    print(f"model: Carbon-{args.shape} shape, random weights, {params / 1e6:.0f}M parameters, "
          f"{str(dtype).replace('torch.', '')} on {args.device} (built in {time.perf_counter() - began:.0f} s)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("Prefill is the same work for every contender; the ratios grow as the prompt shrinks.")
    for prompt_bases in (int(x) for x in args.prompt_bases.split(",")):
        run_task(bundle, prompt_bases, args.tokens, args.repeats, args.device)
    scoring_throughput(bundle, args.repeats)


def scoring_throughput(bundle, repeats: int, n_bases: int = 3000) -> None:
    """Per-base scoring (one forward pass, reference FNS marginals) in bases per second."""
    from .score import score_sequence

    generator = torch.Generator().manual_seed(1)
    seq = "".join("ACGT"[i] for i in torch.randint(0, 4, (n_bases,), generator=generator).tolist())
    score_sequence(bundle, seq)
    seconds = statistics.median(_timed(lambda: score_sequence(bundle, seq))[0] for _ in range(repeats))
    print(f"\n== scoring: {n_bases} bases in {seconds:.2f} s, {n_bases / seconds:,.0f} bases/s (marginal method)")


if __name__ == "__main__":
    main()
