"""What the web handlers call: input gathering, engine calls and result files, without Gradio.

Keeping this free of Gradio makes each handler a few lines (widgets in, this,
widgets out) and lets the same logic be tested directly.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .. import settings
from ..assets import ASSETS
from ..core import stopping
from ..core.align import anchored, shared_ends
from ..core.coding import CodingSequence, Consequence
from ..core.dna import FastaRecord, clean_sequence, is_record_text, read_fasta
from ..core.tags import DEFAULT_SCHEME, SCHEMES, load_tag_scheme
from ..core.validate import whole_number
from ..errors import CarbonError, InputError, ModelError
from ..genome.reference import Reference, configured_references, read_renaming, uploaded_reference
from ..genome.scoring import GenomicScore, describe_at_stages
from ..genome.vcf import UploadLimits, VcfSummary, count_alts, score_vcf
from ..inference.annotate import VariantReport, describe_stages, last, scan_consequences
from ..inference.checks import design_reports
from ..inference.generate import GenerationResult, run_design
from ..inference.request import DesignRequest
from ..inference.scan import ScanResult, scan_substitutions
from ..inference.score import Variant, VariantScore
from ..inference.spec import ScoringSpec, resolve_spec
from ..model.backend import OWN_DRAFTS, Backend, require_cache
from ..model.card import CARBON_EVALUATION, measured_quality, measured_setup
from ..model.hub import (
    bundled_default,
    bundled_models,
    configured_models,
    default_model_name,
    model_role,
    resolve_model_dir,
    space_models,
)
from ..model.manager import ModelManager, out_of_memory_as_error
from ..serving.client import ServerClient
from ..serving.served import connect
from .exports import design_settings, designs_fasta, designs_genbank
from .results import ResultSpace, Retention

log = logging.getLogger("carbon_app")
MAX_UPLOAD_BYTES = 5 * 2**20
MAX_PASTE_CHARS = 2_000_000
ONE_RECORD = "paste or upload only the record you want"


#: the bundled 3-kb human beta-globin locus, offered as a genome where the server names none
DEMO_GENOME = "HBB-locus-demo"
NO_GENOME = "none"


@dataclass
class AppConfig:
    """Server-side settings; model names and genome paths never come from the browser."""

    models: list[str]
    output_dir: Path
    genomes: dict[str, Path] = field(default_factory=dict)
    max_vcf_alts: int = 5000
    max_job_reads: int = 150_000  # windows one job may read (`ScoringSpec.reads`): the largest scan fits
    upload_limits: UploadLimits = field(default_factory=UploadLimits)
    retention: Retention = field(default_factory=Retention)  # how long result files are kept
    server: str | None = None  # an inference server (CARBON_SERVER) that runs the models' forward passes
    server_concurrency: int = 16  # with a server: requests of all users sent to it at once (the rest queue)
    released: bool = False  # the models are a Space's released defaults (`hub.space_models`), nobody's choice
    notice: str = ""  # what the page and the log say of how the server's models came to be (a fall-back)

    @classmethod
    def from_env(cls) -> AppConfig:
        configured = list(configured_models())  # by the names clients see: never a server path
        released = space_models()
        if not configured:
            configured = released or ([default_model_name()] if bundled_models() else [])
        out = Path(settings.get("CARBON_OUTPUT_DIR") or tempfile.mkdtemp(prefix="carbon-studio-"))
        out.mkdir(parents=True, exist_ok=True)
        genomes = configured_references() or {DEMO_GENOME: ASSETS / "examples" / "hbb.fa"}
        expanded = settings.get("CARBON_VCF_MAX_EXPANDED_MB")
        return cls(models=configured, output_dir=out, genomes=genomes, max_vcf_alts=settings.get("CARBON_VCF_MAX_ALTS"),
                   max_job_reads=settings.get("CARBON_MAX_JOB_READS"),
                   upload_limits=UploadLimits(expanded_bytes=expanded * 2**20), retention=Retention.from_env(),
                   server=settings.get("CARBON_SERVER"), server_concurrency=settings.get("CARBON_SERVER_CONCURRENCY"),
                   released=bool(released))


class Service:
    def __init__(self, manager: ModelManager, config: AppConfig):
        self.manager = manager
        self.config = config
        self.results = ResultSpace(config.output_dir, config.retention)  # where result files go, within bounds
        self.running = 0  # requests inside the engine now; back to 0 when each ends, fails or is cancelled
        self.stopped = 0  # streams closed before their end: cancelled, or the client went away
        self._running_lock = threading.Lock()
        self._genomes: dict[str, Reference] = {}
        self._genomes_lock = threading.Lock()
        self._dirs: dict[str, Path] = {}
        self._dirs_lock = threading.Lock()
        self._drafts: list[str] | None = None
        self._connected: dict[str, Backend] = {}  # with a server: each model as it runs it, connected once
        self._connect_lock = threading.Lock()

    @contextmanager
    def _request(self, what: str) -> Iterator[None]:
        """Count a request while it runs and turn running out of memory into a message.

        A cancelled or disconnected streaming request closes its generator, which
        leaves this block too: its counter drops and its tensors are freed.
        """
        if stopping.shutting_down():  # a job begun now would be stopped before it could finish anything
            raise InputError(stopping.shutdown_refusal(what))
        with self._running_lock:
            self.running += 1
        try:
            with stopping.job(), out_of_memory_as_error(what):
                yield
        except stopping.Stopped:  # asked to stop (a cancel, a closed tab) and stopped between batches
            with self._running_lock:
                self.stopped += 1
            raise
        finally:
            with self._running_lock:
                self.running -= 1

    # -- inputs -----------------------------------------------------------------------

    def served(self, name: str | None) -> str:
        """The one gate for a model name a client sends: `name`, or the first configured model when empty,
        refused unless this server serves it (a configured model or its draft).

        Every handler goes through it before anything is looked up, so a hub id, a path or a traversal typed
        into the page is never downloaded, probed on the disk or read: the answer for a name that is not served
        is the same whether or not such a repository or directory exists."""
        if not self.config.models:
            raise InputError("no model is configured on this server (set CARBON_MODEL or CARBON_MODELS)")
        if name is not None and not isinstance(name, str):
            raise InputError("the model must be given by its name")
        name = (name or "").strip() or self.config.models[0]
        if name not in self.served_models():
            raise InputError(f"'{name[:80]}' is not one of this server's models ({', '.join(self.config.models)})")
        return name

    def served_models(self) -> list[str]:
        """The configured models and their drafts: every name `served` lets through."""
        return self.config.models + [d for d in self.drafts() if d not in self.config.models]

    def model(self, name: str | None):
        """A served model to compute with: loaded here, or as the configured server runs it."""
        name = self.served(name)
        if not self.config.server:
            return self.manager.get(name)
        with self._connect_lock:
            if name not in self._connected:
                self._connected[name] = connect(self.config.server, name)
            return self._connected[name]

    def fetch_models(self) -> None:
        """Every served model's files (drafts too) fetched now, at start: a hub model is downloaded here, never
        because of a request. A Space serving its released defaults whose hub cannot be reached serves the
        bundled demo model instead, and says so (`AppConfig.notice`, in the page and the log)."""
        try:
            for name in self.served_models():
                self.model_dir(name)
        except ModelError as exc:
            if not self.config.released:
                raise
            demo = bundled_default()
            self.config.notice = (f"The released model {', '.join(self.config.models)} could not be fetched from "
                                  f"the hub ({exc}). This Space serves the bundled demo model {demo} instead: a "
                                  "3 MB model for trying the page, not for research results.")
            log.warning("%s", self.config.notice)
            self.config.models, self.config.released = [demo], False
            self._drafts = None
            with self._dirs_lock:
                self._dirs.clear()

    def server_status(self) -> dict | None:
        """The configured server, its model and whether it answers now (None without a server)."""
        if not self.config.server:
            return None
        try:
            info = ServerClient(self.config.server, tries=1).info()
            return {"url": self.config.server, "model": info.model, "context_tokens": info.max_tokens,
                    "answers": True}
        except CarbonError as exc:
            return {"url": self.config.server, "answers": False, "why": str(exc)}

    def model_dir(self, name: str | None) -> Path:
        """A served model's directory, looked up once (a configured hub id is the server's own choice)."""
        name = self.served(name)
        with self._dirs_lock:
            if name not in self._dirs:
                self._dirs[name] = resolve_model_dir(name, weights=not self.config.server)  # a server holds them
            return self._dirs[name]

    def model_card(self, name: str | None) -> str:
        """A model's card (its README without the hub's front matter), read from its directory without
        loading the model, so it is shown at once even while a long request holds the model thread."""
        path = self.model_dir(name) / "README.md"
        if not path.exists():
            return f"No model card for {self.served(name)}."
        text = path.read_text()
        if text.startswith("---"):  # YAML front matter is for the hub, not for reading
            text = text.split("---", 2)[-1]
        return text

    def model_facts(self, name: str | None) -> dict:
        """What a served model's directory says of it, read without loading it: its shown name, config, k,
        measured quality and role (target or draft), as `formatting.model_summary` takes them."""
        path = self.model_dir(name)
        try:
            config = json.loads((path / "config.json").read_text())
            k = json.loads((path / "dna_config.json").read_text()).get("k", 6)
        except (OSError, ValueError, AttributeError) as exc:
            raise InputError(f"{self.served(name)}'s config.json or dna_config.json cannot be read: {exc}") from None
        return {"name": self.served(name), "config": config, "k": k, "quality": measured_quality(path),
                "role": model_role(path).get("role")}

    def tag_choices(self, name: str | None) -> tuple[list[str], list[str]]:
        """The species and region keys of a served model's own tag scheme (read from its directory, without
        loading it), each list led by "none"; the default scheme's where no model is configured."""
        if not self.config.models:
            scheme = SCHEMES[DEFAULT_SCHEME]
        else:
            scheme = load_tag_scheme(self.model_dir(name))
        return ["none", *scheme.species], ["none", *scheme.regions]

    def variant_method(self, name: str | None) -> str:
        """The scoring method of a served model's own setup (`ModelCard.method`)."""
        return self.scoring_setup(name)["method"]

    def scoring_setup(self, name: str | None) -> dict:
        """A served model's own scoring setup (`model.card.measured_setup`), read without loading it, its frames
        a number (None there: all k); the Carbon evaluation's where no model is configured."""
        if not self.config.models:
            return {**CARBON_EVALUATION, "frames": 6, "measured": False}
        setup = measured_setup(self.model_dir(name))
        return {**setup, "frames": setup["frames"] or self.model_facts(name)["k"]}

    def unload(self, name: str | None) -> bool:
        return self.manager.unload(self.served(name))

    def genome(self, name: str | None) -> Reference | None:
        """A configured genome, opened once (None for "none": the variant is in a pasted sequence)."""
        if not name or name == NO_GENOME:
            return None
        if name not in self.config.genomes:
            known = ", ".join(self.config.genomes) or "none configured (CARBON_REFERENCES)"
            raise InputError(f"'{name}' is not one of this server's genomes ({known})")
        with self._genomes_lock:
            if name not in self._genomes:
                self._genomes[name] = Reference(self.config.genomes[name], name)
            return self._genomes[name]

    def drafts(self) -> list[str]:
        """The drafts the configured models pair with, looked up once."""
        if self._drafts is None:  # a server runs the configured models only: no draft beside them
            self._drafts = [] if self.config.server else [
                d for d in (self.manager.draft_for(m) for m in self.config.models) if d]
        return self._drafts

    @staticmethod
    def sequence(text: str | None, upload: str | None, what: str, allow_empty: bool = False) -> str:
        """Bases from an uploaded FASTA/GenBank file, else from the text box (bare bases, possibly
        numbered GenBank-style, or a pasted FASTA/GenBank record)."""
        return Service.record(text, upload, what, allow_empty).sequence

    @staticmethod
    def small_upload(upload: str, what: str, beyond: str = "") -> Path:
        """An uploaded file's path, refused past MAX_UPLOAD_BYTES (`beyond`: what to do instead)."""
        path = Path(upload)
        if path.stat().st_size > MAX_UPLOAD_BYTES:
            raise InputError(f"the uploaded {what} is larger than {MAX_UPLOAD_BYTES // 2**20} MB{beyond}")
        return path

    @staticmethod
    def record(text: str | None, upload: str | None, what: str, allow_empty: bool = False) -> FastaRecord:
        """As `sequence`, with the record's id and, for GenBank, its CDS."""
        if upload:
            return read_fasta(Service.small_upload(upload, "file"), what=f"{what} file", choose=ONE_RECORD)
        text = text or ""
        if len(text) > MAX_PASTE_CHARS:
            raise InputError(f"the {what} is {len(text):,} characters; the limit is {MAX_PASTE_CHARS:,}")
        if not text.strip():
            if allow_empty:
                return FastaRecord("", "", "")
            raise InputError(f"the {what} is empty: paste bases or upload a FASTA file")
        if is_record_text(text):
            return read_fasta(text, what=what, choose=ONE_RECORD)
        return FastaRecord("pasted", "", clean_sequence(text, what=what))

    def bounded(self, spec: ScoringSpec, what: str, alleles: int = 0, scanned: int = 0) -> ScoringSpec:
        """`spec`, once the job it sets up (`ScoringSpec.reads`) is within this server's bound on one job."""
        reads = spec.reads(alleles, scanned)
        if reads > self.config.max_job_reads:
            context = f" with a context of {spec.context:,} bases either side" if spec.context else ""
            raise InputError(f"{what}{context} would read {reads:,} windows ({spec.frames} frames, "
                             f"{'both strands' if spec.strand_average else 'one strand'}); this server runs at most "
                             f"{self.config.max_job_reads:,} a job: ask for less (a smaller context, fewer "
                             "positions or records), or use the command line, which has no bound")
        return spec

    def _write(self, name: str, text: str) -> str:
        path = self.results.new_folder(len(text.encode())) / name
        path.write_text(text)
        return str(path)

    # -- design ---------------------------------------------------------------------

    def design_stream(self, model: str, prompt: str, n_bases, speculative: bool, stream_every: int = 0, **options):
        """(result, note) as the design runs; `options` as the form sends them (`DesignRequest.from_options`)."""
        request = DesignRequest.from_options(prompt, n_bases, **options)
        target = self.model(model)
        draft = None
        note = ""
        if speculative:
            require_cache(target, "speculative decoding with a draft model", OWN_DRAFTS)
            if target.draft:
                draft = self.manager.get(target.draft)
            else:
                note = f"'{target.name}' has no paired draft model, so it ran alone."
        with self._request("this design"):
            try:
                for result in run_design(target, request, draft, stream_every):
                    yield result, note
            except GeneratorExit:
                with self._running_lock:
                    self.stopped += 1
                raise

    def design_files(self, result: GenerationResult, reports: list[dict] | None = None) -> list[str]:
        """FASTA of the new bases, FASTA of prompt + design (short headers: `exports.fasta_header`), GenBank
        with features, and the JSON with every setting (`exports.design_settings`) and each design's checks."""
        return [self._write("designs.fa", designs_fasta(result)),
                self._write("designs_with_prompt.fa", designs_fasta(result, with_prompt=True)),
                self._write("designs.gb", designs_genbank(result, reports)),
                self._write("designs.json", json.dumps({"settings": design_settings(result), **result.to_dict(),
                                                        "reports": reports or []}, indent=1))]

    def design_reports(self, result: GenerationResult, flank: str | None = None) -> list[dict]:
        """Each design's checks, constraints and log-likelihood (with a downstream flank when given), ranked:
        part of the design's own request (its stream asks for them before it ends), so not counted again."""
        flank = self.sequence(flank, None, "downstream flank", allow_empty=True) if flank else ""
        with out_of_memory_as_error("these designs' checks"):
            return design_reports(self.model(result.model), result, flank)

    # -- variants ---------------------------------------------------------------------

    def score(self, model: str, reference: str, variant: str | None, alternate: str | None, cds: str | None = None,
              coding: CodingSequence | None = None, context=0, progress=None, **options) -> VariantReport:
        """A variant in a pasted sequence: its score, its consequence where a coding sequence is known (`cds`
        typed, else `coding` from a GenBank upload), its context when `context` > 0."""
        return last(self.score_stages(model, reference, variant, alternate, cds, coding, context, progress, **options))

    def score_stages(self, model: str, reference: str, variant: str | None, alternate: str | None,
                     cds: str | None = None, coding: CodingSequence | None = None, context=0, progress=None,
                     **options) -> Iterator[VariantReport]:
        """`score` as soon as the delta is known, then again with its context (`describe_stages`)."""
        if variant and variant.strip():
            if alternate and alternate.strip():
                raise InputError("give either a variant (POS:REF>ALT) or a full alternate sequence, not both")
            change: str | Variant = variant
        elif alternate and alternate.strip():
            change = variant_from_sequences(reference, self.sequence(alternate, None, "alternate sequence"))
        else:
            raise InputError("give a variant as POS:REF>ALT (e.g. 120:A>G) or a full alternate sequence")
        if cds and cds.strip():
            coding = CodingSequence.parse(cds, clean_sequence(reference, what="reference sequence"))
        target = self.model(model)
        spec = self.bounded(resolve_spec(target, context=context, **options), "this score", alleles=1)
        with self._request("this variant score"):
            yield from describe_stages(target, reference, change, spec, coding, progress)

    def score_at(self, model: str, genome: str, variant: str | None, cds: str | None = None, context=0,
                 progress=None, **options) -> tuple[GenomicScore, VariantReport]:
        """A variant at coordinates on one of the server's genomes."""
        return last(self.score_at_stages(model, genome, variant, cds, context, progress, **options))

    def score_at_stages(self, model: str, genome: str, variant: str | None, cds: str | None = None, context=0,
                        progress=None, **options) -> Iterator[tuple[GenomicScore, VariantReport]]:
        """`score_at` as soon as the delta is known, then again with its context."""
        reference = self.genome(genome)
        if not variant or not variant.strip():
            raise InputError(f"give the variant at {genome} coordinates, e.g. chr11:5227002:T>A")
        target = self.model(model)
        spec = self.bounded(resolve_spec(target, context=context, **options), "this score", alleles=1)
        with self._request("this variant score"):
            yield from describe_at_stages(target, reference, variant, spec, cds, progress)

    def score_vcf(self, model: str, genome: str, upload: str | None, progress=None, genome_upload: str | None = None,
                  renaming: str | None = None, **options) -> tuple[VcfSummary, list[str], list[list]]:
        """An uploaded VCF scored against one of the server's genomes, or against a FASTA uploaded beside it
        (`genome_upload`), its contig names mapped through `renaming` ('VCF_NAME GENOME_NAME' lines): the
        summary, the annotated VCF (with its tabix index when it has one) and the TSV to download, and the
        TSV's rows."""
        if not upload:
            raise InputError("upload a VCF (.vcf or bgzipped .vcf.gz)")
        renamed = read_renaming(renaming)  # a malformed table is named before any work
        genome_file = self.small_upload(genome_upload, "genome") if genome_upload else None
        reference = None if genome_file else self.genome(genome)
        if reference is None and genome_file is None:
            raise InputError("choose the genome the VCF's coordinates are on, or upload one (FASTA)")
        path = self.small_upload(upload, "VCF", "; the command line (score-vcf) has no limit")
        alts = count_alts(path, self.config.upload_limits)  # before any model work, in constant memory
        if alts > self.config.max_vcf_alts:
            raise InputError(f"the VCF holds {alts:,} ALT alleles; this server scores at most "
                             f"{self.config.max_vcf_alts:,} at a time (the command line, score-vcf, has no limit)")
        target = self.model(model)
        spec = self.bounded(resolve_spec(target, **options), f"this VCF's {alts:,} ALT alleles", alleles=alts)
        # room for an uploaded genome as it may expand, and for the annotated copy of the VCF and its table
        room = (self.config.upload_limits.expanded_bytes if genome_file else 0) + 4 * path.stat().st_size
        with self.results.held(room) as folder:
            if genome_file:  # copied and indexed once every cheaper check has passed
                reference = uploaded_reference(genome_file, folder, self.config.upload_limits.expanded_bytes)
            # the outputs are named after the upload, never a dotfile (an upload named ".vcf" or "..vcf.gz")
            stem = path.name.removesuffix(".gz").removesuffix(".vcf").strip(".") or "uploaded"
            vcf_out, tsv_out = folder / f"{stem}.carbon.vcf.gz", folder / f"{stem}.carbon.tsv"
            with self._request("this VCF"):
                summary = score_vcf(target, reference, path, vcf_out, tsv_out, spec=spec, progress=progress,
                                    renamed=renamed)
        if summary.partial:  # a shutdown: the page may not hear of it, the server's log does
            log.warning("VCF job %s: %s; outputs kept in %s", folder.name, summary.partial.sentence(), folder)
        table = [line for line in tsv_out.read_text().splitlines() if not line.startswith("## ")]  # no provenance
        rows = [line.split("\t") for line in table[1:]]  # under its header
        index = Path(f"{vcf_out}.tbi")  # made where the records are in coordinate order
        return summary, [str(vcf_out), *([str(index)] if index.exists() else []), str(tsv_out)], rows

    def variant_files(self, scored: VariantScore, data: dict) -> list[str]:
        """The aligned tracks (TSV, positions as `scored` has them) and the whole result (`data`, JSON)."""
        lines = [*scored.provenance.comment_lines(), "column\tref_position\tref_logprob\talt_logprob\tdelta"]
        for i, (pos, r, a, d) in enumerate(zip(scored.aligned_ref_pos, scored.aligned_ref_logprobs,
                                                scored.aligned_alt_logprobs, scored.aligned_delta, strict=True)):
            lines.append("\t".join(["" if v is None else (f"{v:.6f}" if isinstance(v, float) else str(v))
                                    for v in (i + 1, pos, r, a, d)]))
        return [self._write("variant_tracks.tsv", "\n".join(lines) + "\n"),
                self._write("variant.json", json.dumps(data, indent=1))]

    # -- scan ---------------------------------------------------------------------------

    def scan(self, model: str, sequence: str, start: int, end: int, cds: str | None = None,
             coding: CodingSequence | None = None, **options) -> tuple[ScanResult, list[Consequence]]:
        """Every substitution of a region, and each one's consequence where a coding sequence is known."""
        if cds and cds.strip():
            coding = CodingSequence.parse(cds, clean_sequence(sequence, what="sequence"))
        target = self.model(model)
        progress = options.pop("progress", None)
        first, last = whole_number(start, "the scan start", 1), whole_number(end, "the scan end", 1)
        spec = self.bounded(resolve_spec(target, **options), f"this scan of {last - first + 1:,} positions",
                            scanned=max(0, last - first + 1))
        with self._request("this scan"):
            result = scan_substitutions(target, sequence, first, last, spec=spec, progress=progress)
        return result, scan_consequences(result, sequence, coding)

    def scan_file(self, scan: ScanResult, consequences: list[Consequence]) -> str:
        return self._write("mutation_scan.tsv", scan.to_tsv(consequences))


def variant_from_sequences(reference: str, alternate: str) -> Variant:
    """The single POS:REF>ALT change that turns `reference` into `alternate` (VCF-style anchoring)."""
    ref, alt = clean_sequence(reference, what="reference sequence"), alternate
    if ref == alt:
        raise InputError("the alternate sequence equals the reference")
    head, tail = shared_ends(ref, alt)
    return Variant(*anchored(ref, head, len(ref) - tail, alt[head : len(alt) - tail]))
