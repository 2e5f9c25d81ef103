"""The speed tables of docs/speed.md, made from the dated result files the benchmarks write.

    python -m benchmarks.tables            # rewrite every table in docs/speed.md from the newest files
    python -m benchmarks.tables --check    # say which tables differ from what the files make (exit 1)

A table in the page stands between `<!-- table: NAME -->` and `<!-- /table -->`; `TABLES` says what
makes each. The figures come from `python -m benchmarks.bench --record` with the suites generation,
scan, vcf, speculative, constraints and app (benchmarks/results/<suite>-<device>-<date>.json) and from the
GPU suite (benchmarks/gpu/*.json), so a number in a table is always one a run printed, and each table says
which file it read.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
RESULTS, GPU = HERE / "results", HERE / "gpu"
PAGE = HERE.parent / "docs" / "speed.md"
_BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def newest(suite: str, device: str = "cpu") -> tuple[dict, str]:
    """The newest result file of `suite` on `device`: its figures and its name."""
    files = sorted(RESULTS.glob(f"{suite}-{device}-*.json"))
    if not files:
        raise FileNotFoundError(f"no {suite}-{device}-*.json in {RESULTS}: run python -m benchmarks.bench --suite "
                                f"{suite} --record")
    return json.loads(files[-1].read_text()), f"benchmarks/results/{files[-1].name}"


def _x(value: float, goal: float | None = None) -> str:
    """A ratio as the page writes it: bold where it meets its goal."""
    text = f"{value:.2f}x"
    return f"**{text}**" if goal is not None and value >= goal else text


def _three(value: float) -> str:
    """Three significant figures, trailing zeros kept: 14.2, 9.69, 5.00."""
    return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"


def _rows(header: list[str], rows: list[list[str]], source: str) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + f"\n\n(made from `{source}` by `python -m benchmarks.tables`)\n"


def _bandwidth(task: dict) -> str:
    return f"{task['decode_gb_s']:.0f} GB/s, {100 * task['decode_gb_s'] / task['copy_gb_s']:.0f}% of copy"


def generation_summary() -> str:
    """Batch-1 greedy generation on the CPU against stock `generate`: the paired medians."""
    figures, source = newest("generation")
    rows = [[f"{t['prompt_bases']} bases", f"{t['bp_over_token']['paired']:.3f}",
             _x(t["stock_over_token"]["paired"], 1.3), _x(t["stock_over_bp"]["paired"], 1.3), _bandwidth(t)]
            for t in figures["tasks"]]
    return _rows(["prompt", "bp-level / token-level", "stock / ours (token)", "stock / ours (bp)",
                  "decode bandwidth"], rows, source)


def generation_detail() -> str:
    """The same runs with best against best beside each paired median, and transformers' forward."""
    figures, source = newest("generation")

    def both(ratio: dict, goal: float | None = None) -> str:
        return f"{_x(ratio['paired'], goal)} (best {ratio['best']:.2f}x)"

    rows = [[f"{t['prompt_bases']} bases", both(t["bp_over_token"]), both(t["stock_over_token"], 1.3),
             both(t["stock_over_bp"], 1.3), both(t["transformers_forward_over_ours"]), _bandwidth(t),
             "yes" if t["same_output"] else "**no**"] for t in figures["tasks"]]
    return _rows(["prompt", "bp-level / token-level", "stock generate / ours (token)", "stock generate / ours (bp)",
                  "transformers forward / ours", "decode bandwidth", "same output as stock"], rows, source)


def scoring_cpu() -> str:
    """Frames, the scan and score-vcf on the bundled model, each against the way it saves work over."""
    scan, scan_source = newest("scan")
    vcf, vcf_source = newest("vcf")
    rows = []
    for key, what in (("one_strand", "one variant, six frames (one strand)"),
                      ("both_strands", "one variant, six frames, both strands")):
        f = scan[key]
        rows.append([what, f"{f['six_frames_ms']:.0f} ms", f"one frame: {f['one_frame_ms']:.1f} ms",
                     f"{f['six_over_one']:.1f}x the cost", "<= ~3x: " + ("met" if f["six_over_one"] <= 3 else
                                                                          "**not met**")])
    s = scan["scan"]
    setup = s.get("setup", "As the model's own setup reads them.")  # a sentence: "Read in ... window."
    rows.append([f"scan, {s['positions']} positions x 3, {setup[0].lower()}{setup[1:].rstrip('.')}",
                 f"{s['scan_s']:.1f} s",
                 f"each scored alone: {s['alone_s']:.1f} s", f"{_x(s['alone_s'] / s['scan_s'], 3)} faster", ">= 3x"])
    for kind, what in (("clustered", "clustered SNVs (all three alternates at each of their positions)"),
                       ("scattered", "scattered SNVs over 60 kb")):
        f = vcf[kind]
        rows.append([f"score-vcf, {f['snvs']:,} {what}", f"{f['score_vcf_s']:.1f} s",
                     f"a loop of `score_at`: {f['loop_s']:.1f} s", f"{_x(f['loop_s'] / f['score_vcf_s'])} faster", ""])
    batch = sum(vcf[k]["score_vcf_s"] for k in ("clustered", "scattered"))
    loop = sum(vcf[k]["loop_s"] for k in ("clustered", "scattered"))
    rows.append([f"score-vcf, all {sum(vcf[k]['snvs'] for k in ('clustered', 'scattered')):,}", f"{batch:.1f} s",
                 f"loop: {loop:.1f} s", f"{_x(loop / batch, 3)} faster", ">= 3x"])
    return _rows(["what", "measured", "against", "ratio", "goal"], rows, f"{scan_source}` and `{vcf_source}")


def features_cpu() -> str:
    """Speculative decoding, design constraints and the app's own cost on the CPU, each against its plain run."""
    spec, spec_source = newest("speculative")
    constraints, constraints_source = newest("constraints")
    app, app_source = newest("app")
    greedy = {run["mode"]: run for run in spec["runs"] if run["temperature"] == 0}
    identical = "output identical" if all(run["same_output"] for run in spec["runs"]) else "**output differs**"
    rows = [[f"speculative decoding, {spec['target']} drafted by {greedy['token']['draft']}, {spec['bases']} bases",
             "token greedy / bp greedy",
             f"{_x(greedy['token']['speedup'], 1)} / {_x(greedy['bp']['speedup'], 1)}, {identical}"]]
    for check in spec["checks"]:
        rows.append([f"seeded greedy designs with masks and odd lengths, drafted by {check['draft']}",
                     "identical to the target's own", f"{check['greedy_identical']}/{check['greedy_cases']}"])
    useless = spec["useless_draft"]
    dropped = " (the engine drops the draft)" if useless["fallback"] else ""
    rows.append(["a draft that never agrees (500M-shaped target)", "toggle on against off",
                 f"{useless['toggle_on_over_off']:.2f}x{dropped}; by the engine's own timings the draft cost "
                 f"{100 * useless['draft_share_of_run']:.1f}% of the run"])
    for model in constraints["models"]:
        rows.append([f"design constraints ({constraints['residues']} residues of a protein, no BsaI/BsmBI, runs of "
                     f"at most 5, GC 40-60%), {model['model']}", "against unconstrained",
                     f"{100 * model['cost']:+.0f}% time"])
    same = "" if app["same_ranking"] else ", **a different ranking**"
    rows.append(["the app through `gradio_client` against the same call in a script",
                 f"HBB example, context of {app['context']} ranked", f"{app['app_over_script']:.2f}x the time{same}"])
    return _rows(["what (same CPU)", "measured", "ratio"], rows,
                 f"{spec_source}`, `{constraints_source}` and `{app_source}")


def speculative_cpu() -> str:
    """Each mode and temperature of the speculative suite: the target alone against the target drafted."""
    spec, source = newest("speculative")
    rows = [[run["mode"], f"{run['temperature']:g}", run["draft"], f"{run['alone_s']:.3f} s",
             f"{run['drafted_s']:.3f} s", _x(run["speedup"], 1.3), f"{100 * run['accepted']:.0f}%",
             "identical" if run["same_output"] else "**differs**",
             "finished alone: the draft stopped paying" if run["fallback"] else ""] for run in spec["runs"]]
    checks = [f"{c['greedy_identical']}/{c['greedy_cases']} seeded greedy designs and {c['sampling_identical']}/"
              f"{c['sampling_seeds']} sampled seeds identical with {c['draft']}; first drafted token's bases against "
              f"the target's marginals: smallest p = {c['smallest_p']:.3f} (Bonferroni level "
              f"{c['bonferroni_level']:.1e})" for c in spec["checks"]]
    return _rows(["mode", "temperature", "draft", "alone", "drafted", "speed-up", "accepted", "output", ""],
                 rows, source) + "".join(f"\n{line}\n" for line in checks)


#: The two GPU reports the GPU tables read: the newest, and the complete run with each layer in two parts.
GPU_LATEST, GPU_TWO_PART = "latest.json", "h200-2026-11-27-two-part-layer.json"
GPU_SOURCES = f"benchmarks/gpu/{GPU_LATEST}` and `benchmarks/gpu/{GPU_TWO_PART}"


def gpu_reports() -> tuple[dict, dict]:
    """(the newest GPU report, the two-part-layer run's)."""
    return tuple(json.loads((GPU / name).read_text()) for name in (GPU_LATEST, GPU_TWO_PART))


def gpu_shapes() -> str:
    """Each Carbon shape on the GPU: the newest report, and the two-part-layer run beside it."""
    latest, before = gpu_reports()
    rows = []
    for shape, now in latest["shapes"].items():
        then = before["shapes"].get(shape, {})

        def pair(key: str, show: Callable[[float], str], now=now, then=then) -> str:
            return f"{show(now[key])} (two-part: {show(then[key])})" if key in then else show(now[key])

        rows.append([shape, pair("decode_tok_s", lambda v: f"{v:.0f}"),
                     pair("bw_fraction", lambda v: f"{100 * v:.0f}%"),
                     pair("ours_over_stock", lambda v: f"{_three(v)}x"),
                     pair("batched64_bp_s", lambda v: f"{v:,.0f}")])
    return _rows(["shape", "decode tok/s", "share of copy bandwidth", "ours / stock `generate`",
                  "64-sample design, bases/s"], rows,
                 GPU_SOURCES)


def gpu_layers() -> str:
    """Both GPU runs shape by shape: each layer compiled in two parts (the first run) and as one function."""
    latest, before = gpu_reports()
    runs = (("two parts", before), ("one function", latest))
    rows = []
    for shape in runs[1][1]["shapes"]:
        for layer, report in runs:
            f = report["shapes"][shape]
            rows.append([shape, layer, f"{f['forward_step_ms']:.2f} ms", f"{f['decode_step_ms']:.2f} ms",
                         f"{f['bandwidth_bound_ms']:.2f} ms", f"{f['decode_tok_s']:.0f}",
                         f"{100 * f['bw_fraction']:.0f}%",
                         f"{_three(f['ours_over_stock'])}x ({_three(f['ours_over_stock_same_kernels'])}x)",
                         f"{f['bp_over_token']:.2f}", f"{f['batched64_bp_s']:,.0f}"])
    return _rows(["shape", "layer", "forward step", "decode step", "bandwidth bound", "decode tok/s",
                  "share of copy bandwidth", "ours / stock (same attention kernels)", "bp / token",
                  "64-sample design, bases/s"], rows,
                 GPU_SOURCES)


def gpu_goals() -> str:
    """The GPU goals, each against its figure: the newest report's, else the two-part-layer run's."""
    latest, before = gpu_reports()
    three, eight, five = (latest["shapes"][shape] for shape in ("3B", "8B", "500M"))

    def goal(met: bool, text: str) -> str:
        return f"{text}: {'met' if met else '**not met**'}"

    spec, loading = before["speculative"], before["loading_8B"]
    memory = before["memory_3B_500M_32k_peak_gib"]
    rows = [
        [f"decode GB/s / copy bandwidth ({latest['copy_gb_s']:,.0f} GB/s)",
         f"{100 * three['bw_fraction']:.0f}% (8B: {100 * eight['bw_fraction']:.0f}%)",
         goal(three["bw_fraction"] >= 0.6, ">= 60%")],
        ["ours / stock `generate`", f"{_three(three['ours_over_stock'])}x",
         goal(three["ours_over_stock"] >= 5, ">= 5x")],
        ["64-sample design (1,200 bases each)", f"{three['batched64_bp_s']:,.0f} bases/s (two-part layer: "
         f"{before['shapes']['3B']['batched64_bp_s']:,.0f})", goal(three["batched64_bp_s"] >= 100_000, ">= 100,000")],
        ["speculative 3B + 500M: a draft that always agrees / a useless draft",
         f"{spec['always_agreeing_speedup']:.2f}x / {spec['useless_draft_ratio']:.2f}x (two-part run)",
         goal(spec["always_agreeing_speedup"] >= 2 and spec["useless_draft_ratio"] >= 0.95, ">= 2x / >= 0.95x")],
        ["3B + 500M at 32,768 tokens, allocator capped at 22 GiB (an A10)", f"peak {memory:.2f} GiB (two-part run)",
         goal(memory <= 22, "<= 22 GiB")],
        ["base level / token level", f"{three['bp_over_token']:.2f}x the time (500M: {five['bp_over_token']:.2f}x)",
         goal(three["bp_over_token"] <= 1.05, "within 5%")],
        [f"loading the 8B shape ({loading['checkpoint_gib']:.1f} GiB): host peak anonymous memory",
         f"{loading['device_map']['host_peak_anonymous_gib']:.2f} GiB straight to the GPU, "
         f"{loading['cpu_first']['host_peak_anonymous_gib']:.2f} GiB through the CPU", ""],
    ]
    return _rows(["figure (3B shape, bf16, batch 1)", "measured", "goal"], rows,
                 GPU_SOURCES)


TABLES: dict[str, Callable[[], str]] = {
    "generation-cpu": generation_summary,
    "generation-cpu-detail": generation_detail,
    "scoring-cpu": scoring_cpu,
    "features-cpu": features_cpu,
    "speculative-cpu": speculative_cpu,
    "gpu-shapes": gpu_shapes,
    "gpu-goals": gpu_goals,
    "gpu-layers": gpu_layers,
}


def rendered(page: str) -> tuple[str, list[str]]:
    """`page` with every table made anew, and the names of those that changed (an unknown name is refused)."""
    changed = []

    def remake(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"docs/speed.md names a table '{name}' that benchmarks/tables.py does not make")
        body = TABLES[name]()
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return _BLOCK.sub(remake, page), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    text, changed = rendered(page)
    if args.check:
        for name in changed:
            print(f"docs/speed.md: the table '{name}' is not what its result files make")
        return 1 if changed else 0
    PAGE.write_text(text)
    names = f": {', '.join(changed)}" if changed else ""
    print(f"remade {len(changed)} of {len(_BLOCK.findall(page))} tables{names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
