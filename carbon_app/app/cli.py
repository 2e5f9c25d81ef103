"""Command line: `python -m carbon_app generate|score|score-vcf|scan|tokenize|models`.

Results go to stdout (JSON with --json); any problem is one line on stderr
and a non-zero exit code (2 for bad input or models, 1 for internal errors;
128 + the signal's number for a score-vcf stopped by SIGTERM or Ctrl-C, its
partial outputs kept for --resume).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from .. import settings
from ..core.validate import output_file, whole_number
from ..errors import CarbonError, InputError, report_bug
from ..inference.constraints import FIELDS as CONSTRAINT_FIELDS
from ..inference.spec import METHODS, OWN_RADIUS, parse_delta_radius
from .exports import design_name, design_settings, designs_fasta, designs_genbank
from .progress import progress_line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="bundled model name, hub id (owner/name[@revision]) or local directory; "
                        "default: CARBON_MODEL or the bundled demo model")
    parser.add_argument("--species", help="species tag: a scheme key (mammal, vertebrate, invertebrate, plant, "
                        "fungus, protozoa) or a literal tag such as <vertebrate_mammalian>")
    parser.add_argument("--region", help="region tag: a scheme key (protein_coding, pseudogene, trna, tmrna, "
                        "ncrna, misc_rna, rrna) or a literal tag")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--server", help="an OpenAI-compatible server (vLLM) that runs --model: its forward passes go "
                        "there (default: CARBON_SERVER; API key: CARBON_SERVER_API_KEY)")
    parser.add_argument("--served-model", help="the name the server serves the model under (default: its only one)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")


def _add_reference_args(parser: argparse.ArgumentParser, genome: bool = False) -> None:
    """The sequence a score or scan reads (or, with `genome`, a reference genome), and how each variant in it
    is scored."""
    _add_model_args(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sequence", help="reference DNA")
    source.add_argument("--fasta", help="FASTA file with the reference")
    if genome:
        source.add_argument("--reference", help="an indexed reference genome (FASTA, plain or bgzipped; the .fai "
                            "is made when missing): --variant is then at genome coordinates, e.g. "
                            "chr17:41245466:G>A")
    parser.add_argument("--record", help="id of the FASTA record to use when the file has several")
    _add_scoring_args(parser)


def _add_scoring_args(parser: argparse.ArgumentParser) -> None:
    """The scoring spec's settings (`inference.spec`): each left out is the model's own, the setup its
    quality was measured with (its scoring.json), so every command scores a variant alike."""
    parser.add_argument("--window", type=int,
                        help="bases around each variant (default: the model's own; at most what its context holds)")
    parser.add_argument("--strand-average", action=argparse.BooleanOptionalAction, default=None,
                        help="average with the reverse-complement strand (default: the model's own)")
    parser.add_argument("--frames", type=int, help="tokenization frames to average each delta over, 1-6 "
                        "(default: the model's own, else 6; 1: the single centred window of the Carbon evaluations)")
    parser.add_argument("--method", choices=METHODS,
                        help="marginal: reference FNS per-base score; chain: exact per-base split (default: the "
                             "model's own, the method its measured quality was read with; else marginal)")
    parser.add_argument("--delta-radius", type=_delta_radius, default=OWN_RADIUS, metavar="BASES",
                        help="sum each delta within this many bases of its variant, or 'whole' for the whole window "
                             "(default: the model's own, the radius its measured quality was read with; else whole)")


def _settings(args) -> dict:
    """The scoring settings a command was given (None: the model's own), as `resolve_spec` takes them."""
    return dict(window=args.window, strand_average=args.strand_average, species=args.species, region=args.region,
                method=args.method, frames=args.frames, delta_radius=args.delta_radius)


def _delta_radius(text: str) -> int | str | None:
    """--delta-radius: a whole number of bases, 0 or more, 'whole' (None) or the default, the model's own."""
    if text == OWN_RADIUS:
        return OWN_RADIUS
    try:
        return parse_delta_radius(text)
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_cds_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cds", help="the coding sequence, to name each substitution's consequence: a start (51), "
                        "exons (51..142,273..495) or complement(...), 1-based in the sequence or contig "
                        "(default: a GenBank file's CDS feature)")


def _add_ray_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray", metavar="ADDRESS", help="spread the work over a Ray cluster: its address (HOST:6379, "
                        "or auto), or 'local' to start one here")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers, one model replica each (default 2)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m carbon_app", description="Design and score DNA with Carbon models.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = commands.add_parser("generate", help="generate DNA after a prompt")
    _add_model_args(gen)
    gen.add_argument("--prompt", default="", help="DNA to continue (any length; may be empty)")
    gen.add_argument("--bases", type=int, help="exact number of new bases (default: the mask's length)")
    gen.add_argument("--mask", help="IUPAC template over the new bases, e.g. NNNNATGNNN or RYRYRY")
    gen.add_argument("--mode", default="bp", choices=["bp", "token"], help="bp: base level (FNS); token: 6-mer")
    gen.add_argument("--temperature", type=float, default=0.9, help="0 = greedy (default 0.9)")
    gen.add_argument("--top-k", type=int, default=0, help="keep the k most likely 6-mers (0 = off)")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus over 6-mers (1 = off)")
    gen.add_argument("--seed", type=int, help="same seed, same output (default: random, reported)")
    gen.add_argument("--samples", type=int, default=1, help="number of sequences (default 1)")
    for field in CONSTRAINT_FIELDS:  # each design constraint's own flags
        gen.add_argument(field.flag, type=int if field.number else str, help=field.help)
    gen.add_argument("--flank", help="downstream DNA to score each design with (ranked by design + flank)")
    gen.add_argument("--genbank", metavar="FILE", help="also write the designs as GenBank: prompt, designed bases, "
                     "mask runs, the protein's CDS, each constraint's check, every setting")

    score = commands.add_parser("score", help="score a variant (or a whole sequence)")
    _add_reference_args(score, genome=True)
    score.add_argument("--variant", help="POS:REF>ALT, 1-based (120:A>G, 57:AT>A, 88:C>CTT); "
                       "without it the whole sequence is scored")
    score.add_argument("--context", type=int, default=0, help="rank the delta among every substitution within this "
                       "many bases either side (default 0: off)")
    _add_cds_arg(score)

    vcf = commands.add_parser("score-vcf", help="score every ALT of a VCF against a reference genome")
    _add_model_args(vcf)
    vcf.add_argument("--reference", required=True, help="indexed reference genome (FASTA, plain or bgzipped)")
    vcf.add_argument("--vcf", required=True, help="input VCF (.vcf or bgzipped .vcf.gz)")
    vcf.add_argument("--out", required=True, help="the scored VCF to write (.vcf, or .vcf.gz for bgzip)")
    vcf.add_argument("--tsv", help="also a table: line, chrom, pos, id, ref, alt, delta, problem, message")
    vcf.add_argument("--rename-chrs", metavar="FILE", help="map the VCF's contig names to the genome's: 'VCF_NAME "
                     "GENOME_NAME' a line, as bcftools reads it (chr17 and 17 match without one)")
    vcf.add_argument("--context", type=int, default=0, help="also rank each ALT among every substitution within "
                     "this many bases (INFO CARBON_CONTEXT; default 0: off)")
    vcf.add_argument("--resume", action="store_true", help="keep what a stopped run (SIGTERM, Ctrl-C) wrote to --out "
                     "and --tsv, and score only the rest; each record is written once")
    _add_scoring_args(vcf)
    _add_ray_args(vcf)

    regions = commands.add_parser("scan-regions", help="score every substitution of every region of a BED file")
    _add_model_args(regions)
    regions.add_argument("--reference", required=True, help="indexed reference genome (FASTA, plain or bgzipped)")
    regions.add_argument("--bed", required=True, help="regions, 0-based half-open (CHROM START END [NAME])")
    regions.add_argument("--out", required=True, help="the table to write: region, chrom, pos, ref, alt, delta, "
                         "problem")
    _add_scoring_args(regions)
    _add_ray_args(regions)

    scan = commands.add_parser("scan", help="score every single-base substitution of a region")
    _add_reference_args(scan)
    scan.add_argument("--start", type=int, required=True, help="first position of the region (1-based)")
    scan.add_argument("--end", type=int, required=True, help="last position of the region (inclusive)")
    _add_cds_arg(scan)

    tok = commands.add_parser("tokenize", help="show the token ids of a prompt string")
    _add_model_args(tok)
    tok.add_argument("text", help="e.g. '<plant_species><dna>ACGTACGT'")

    models = commands.add_parser("models", help="list bundled and known models")
    models.add_argument("--json", action="store_true")
    return parser


def _bundle(args):
    from ..model.manager import ModelManager

    device = args.device
    if device not in (None, "cpu", "cuda"):
        raise InputError(f"--device must be cpu or cuda, not '{device}'")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda was asked for, but no CUDA GPU is available")
    server = args.server or settings.get("CARBON_SERVER")
    if server:
        from ..model.hub import default_model_name
        from ..serving.served import connect

        return connect(server, args.model or default_model_name(), served_as=args.served_model)
    return ModelManager(device=device).get(args.model)


def _generate(args) -> dict:
    from ..inference.checks import design_reports
    from ..inference.generate import run_design
    from ..inference.request import DesignRequest

    request = DesignRequest.from_options(  # checked before the model loads
        args.prompt, args.bases, mask=args.mask, species=args.species, region=args.region,
        mode=args.mode, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, samples=args.samples, **{field.name: getattr(args, field.name) for field in CONSTRAINT_FIELDS},
    )
    genbank = output_file(args.genbank) if args.genbank else None  # named before any work
    bundle = _bundle(args)
    *_, result = run_design(bundle, request)
    reports = design_reports(bundle, result, args.flank or "")
    if genbank:
        genbank.write_text(designs_genbank(result, reports))
    if not args.json:
        print(designs_fasta(result), end="")
        for i, row in enumerate(reports, start=1):
            checks = " ".join(f"{c['specification']}={'PASS' if c['passes'] else 'FAIL'}" for c in row["constraints"])
            loglik = "-" if row["total"] is None else f"{row['total']:.2f}"
            print(f"# {design_name(i)}: loglik={loglik} rank={row.get('rank', '-')}" + (f" {checks}" if checks else "")
                  + (f" (no log-likelihood: {row['ll_missing']})" if row.get("ll_missing") else ""), file=sys.stderr)
        print(f"# prompt text: {result.prompt_text}\n# prompt ids: {result.prompt_ids}", file=sys.stderr)
    return {"settings": design_settings(result), **result.to_dict(), "reports": reports}


def _reference(args) -> str:
    from ..core.dna import read_fasta

    if args.fasta is not None:
        return read_fasta(args.fasta, args.record).sequence
    if args.record:
        raise InputError("--record only applies with --fasta")
    return args.sequence


def _coding(args, sequence: str):
    """The coding sequence --cds names, else a GenBank record's own CDS feature, else None."""
    from ..core.coding import CodingSequence
    from ..core.dna import read_fasta

    if args.cds:
        return CodingSequence.parse(args.cds, sequence)
    return read_fasta(args.fasta, args.record).coding if args.fasta else None


def _print_variant(name: str, report, window: str, notes=(), scored=None, contig: str = "") -> None:
    """The report's score (`scored`: the same placed on a contig, whose positions it names) as lines of text."""
    s = scored or report.score
    verdict = ("no clear effect: the 6-mer frames disagree on its sign" if s.direction == "unclear"
               else f"the alternate is {s.direction} likely than the reference under the model")
    print(f"{name}: delta = LL(alt) - LL(ref) = {s.delta:+.4f} ({verdict}); frames {min(s.frame_deltas):+.4f} to "
          f"{max(s.frame_deltas):+.4f}; window {window}")
    print(f"normal form {contig}{s.variant.pos}:{s.variant.ref}>{s.variant.alt}, HGVS {contig}{s.hgvs_name}")
    print(s.spec.sentence())
    print(f"setup: {s.provenance.setup_words}; model {s.provenance.model}, weights {s.provenance.weights}, "
          f"{s.provenance.app}")
    if report.consequence:
        print(f"consequence: {report.consequence}")
    if report.context:
        print(f"context: {report.context.sentence()}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def _score(args) -> dict:
    from ..inference.annotate import describe_variant
    from ..inference.score import score_sequence

    if getattr(args, "reference", None):
        return _score_at(args)
    sequence = _reference(args)
    bundle = _bundle(args)
    if args.variant is None:
        if args.cds or args.context:
            raise InputError("--cds and --context describe a variant: give --variant too")
        scored = score_sequence(bundle, sequence, args.species, args.region, args.method or METHODS[0])
        data = {"total_logprob": scored.total, "mean_logprob": scored.mean, "logprobs": scored.logprobs.tolist(),
                "method": scored.method, "prompt_text": scored.prompt_text, "prompt_ids": scored.prompt_ids}
        if not args.json:
            print(f"LL = {scored.total:.4f} over {len(scored.sequence)} bases (mean {scored.mean:.4f} per base)")
        return data
    report = describe_variant(bundle, sequence, args.variant, _coding(args, sequence), args.context,
                              **_settings(args))
    if not args.json:
        _print_variant(report.score.variant.label, report, f"{report.score.window_start}-{report.score.window_end}")
    return {**report.to_dict(), "model_quality": bundle.card.quality}


def _score_at(args) -> dict:
    from ..genome.reference import Reference
    from ..genome.scoring import describe_at

    if not args.variant:
        raise InputError("with --reference, give --variant at genome coordinates, e.g. chr17:41245466:G>A")
    if args.record:
        raise InputError("--record only applies with --fasta")
    reference = Reference(args.reference)
    bundle = _bundle(args)
    scored, report = describe_at(bundle, reference, args.variant, args.cds, args.context, **_settings(args))
    if not args.json:
        _print_variant(f"{scored.variant.label} on {reference.name}", report,
                       f"{scored.contig}:{scored.window_start}-{scored.window_end}", scored.notes, scored.placed,
                       f"{scored.contig}:")
    return {**scored.to_dict(), **{k: v for k, v in report.to_dict().items() if k in ("consequence", "context")},
            "model_quality": bundle.card.quality}


def _progress_bar(unit: str):
    """A progress bar on a terminal; elsewhere (a log, a pipe) a line every CARBON_PROGRESS_EVERY_S seconds
    (10 by default) with what is done, of how much, and an estimate of what is left."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=0, unit=unit, desc="scoring", file=sys.stderr)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return bar, progress
    lines = _ProgressLines(unit, settings.get("CARBON_PROGRESS_EVERY_S"))
    return lines, lines


class _ProgressLines:
    """Progress for a log: a line at least every `every` seconds while the job runs (a clock thread repeats
    the last count when no chunk has reported since: a long chunk is not silence), and one at the end."""

    def __init__(self, unit: str, every: float):
        self.unit, self.every = unit, every
        self.began = self.said = time.monotonic()
        self.done = self.total = 0
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._clock = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self):
        if self.every > 0:  # with 0 every report is said already: a clock would only spin
            self._clock.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._clock.is_alive():
            self._clock.join()

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self.done, self.total = done, total
        if time.monotonic() - self.said >= self.every or done >= total:
            self._say()

    def _tick(self) -> None:
        while not self._stop.wait(min(1.0, self.every)):
            if self.total and time.monotonic() - self.said >= self.every:
                self._say()

    def _say(self) -> None:
        with self._lock:
            now = self.said = time.monotonic()
            line = progress_line(self.done, self.total, self.unit, now - self.began)
        print(f"scoring: {line}", file=sys.stderr, flush=True)


@contextmanager
def _stops_gracefully(what: str):
    """SIGTERM or Ctrl-C while the block runs: the job stops after its current chunk and keeps what it wrote
    (`core.stopping.boundary`); the same signal again stops it at its next checkpoint. Yields the names of the
    signals received."""
    from ..core import stopping

    received: list[str] = []

    def on_signal(number, frame) -> None:
        name = signal.Signals(number).name
        received.append(name)
        if len(received) == 1:
            print(f"{what}: {name}: stopping after the current chunk, keeping what is written (send it again to "
                  "stop at once)", file=sys.stderr, flush=True)
        stopping.shut_down(name, now=len(received) > 1)

    before = {number: signal.signal(number, on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def _ray_scorer(args, reference, options: dict):
    """The Ray scorer --ray asks for: its workers load the model; the driver never does."""
    from ..distributed.ray_jobs import RayScorer
    from ..model.hub import default_model_name

    if args.server or settings.get("CARBON_SERVER"):
        raise InputError("--ray and a server (--server, CARBON_SERVER) both say where the model runs: choose one "
                         "(Ray workers each load the model; a server batches every request itself)")
    workers = whole_number(args.workers, "--workers", 1)
    return RayScorer(args.ray, workers, args.model or default_model_name(), reference.path, reference.name,
                     args.device, options)


def _read_text(path: str, flag: str) -> str:
    try:
        return open(path).read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{flag} '{path}' cannot be read: {getattr(exc, 'strerror', None) or exc}") from None


def _score_vcf(args) -> dict:
    from ..genome.reference import Reference, read_renaming
    from ..genome.vcf import score_vcf
    reference = Reference(args.reference)
    renamed = read_renaming(_read_text(args.rename_chrs, "--rename-chrs")) if args.rename_chrs else None
    options = {**_settings(args), "context": args.context}
    scorer = _ray_scorer(args, reference, options) if args.ray else None
    bundle = None if scorer else _bundle(args)
    bar, progress = _progress_bar("ALT")
    with bar, _stops_gracefully("score-vcf") as signals:
        summary = score_vcf(bundle, reference, args.vcf, args.out, args.tsv, progress=progress, scorer=scorer,
                            resume=args.resume, renamed=renamed, **options)
    for line in summary.lines():
        print(line, file=sys.stderr)
    print(f"setup: {summary.provenance.setup_words} (the VCF's header names it)", file=sys.stderr)
    return {"provenance": summary.provenance.to_dict(), "records": summary.records, "alts": summary.alts,
            "scored": summary.scored,
            "problems": dict(summary.problems), "malformed": summary.malformed, "hint": summary.hint,
            "seconds": summary.seconds, "out": args.out, "tsv": args.tsv, "resumed_records": summary.resumed,
            "partial": summary.partial.sentence() if summary.partial else None,
            "stopped_by": signals[0] if signals and summary.partial else None}


def _scan_regions(args) -> dict:
    from ..genome.reference import Reference
    from ..genome.regions import scan_regions

    reference = Reference(args.reference)
    options = _settings(args)
    scorer = _ray_scorer(args, reference, options) if args.ray else None
    bundle = None if scorer else _bundle(args)
    bar, progress = _progress_bar("region")
    with bar:
        summary = scan_regions(bundle, reference, args.bed, args.out, scorer=scorer, progress=progress, **options)
    print(f"{summary.regions:,} regions, {summary.rows:,} rows in {summary.seconds:.1f} s", file=sys.stderr)
    for line, why in summary.problems:
        print(f"BED line {line}: {why}", file=sys.stderr)
    return {"regions": summary.regions, "rows": summary.rows, "problems": summary.problems,
            "seconds": summary.seconds, "out": args.out}


def _scan(args) -> dict:
    from ..inference.annotate import scan_consequences
    from ..inference.scan import scan_substitutions

    sequence = _reference(args)
    bundle = _bundle(args)
    result = scan_substitutions(bundle, sequence, args.start, args.end, **_settings(args))
    consequences = scan_consequences(result, sequence, _coding(args, sequence))
    if not args.json:
        print(result.to_tsv(consequences), end="")
    rows = [[*row, str(c)] for row, c in zip(result.rows(), consequences, strict=True)] if consequences \
        else [list(row) for row in result.rows()]
    return {"start": result.start, "end": result.end, "window_start": result.window_start,
            "window_end": result.window_end, "frame_bases": result.frame_bases, "method": result.method,
            "delta_radius": result.delta_radius, "spec": result.spec.settings(),
            "provenance": result.provenance.to_dict(),
            "columns": ["position", "ref", "alt", "delta"] + (["consequence"] if consequences else []), "rows": rows,
            "model_quality": bundle.card.quality}


def _tokenize(args) -> dict:
    bundle = _bundle(args)
    ids = bundle.tokenizer.encode(args.text)
    if not args.json:
        print(" ".join(map(str, ids)))
    return {"text": args.text, "ids": ids}


def _models(args) -> dict:
    from ..model.hub import HUB_MODELS, bundled_models

    data = {"bundled": bundled_models(), "hub": {k: v for k, v in HUB_MODELS.items()},
            "default": settings.get("CARBON_MODEL") or (bundled_models() or [None])[0]}
    if not args.json:
        for name in data["bundled"]:
            print(f"bundled  {name}")
        for name, info in data["hub"].items():
            print(f"hub      {name}  draft={info['draft']}")
    return data


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        from transformers.utils import logging as hf_logging

        from ..model.manager import out_of_memory_as_error

        hf_logging.disable_progress_bar()
        settings.check_all()  # a bad value is named before any work
        handler = {"generate": _generate, "score": _score, "score-vcf": _score_vcf, "scan-regions": _scan_regions,
                   "scan": _scan,
                   "tokenize": _tokenize, "models": _models}[args.command]
        with out_of_memory_as_error("this command"):
            data = handler(args)
    except CarbonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: its traceback logged (stderr) under an id, then one line that names the id
        said = report_bug(exc, f"the {args.command} command", lambda text: print(text, file=sys.stderr))
        print(f"error: {said}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data))
    if data.get("stopped_by"):  # the outputs are kept, the job is not done: the shell's code for the signal
        return 128 + signal.Signals[data["stopped_by"]].value
    return 0
