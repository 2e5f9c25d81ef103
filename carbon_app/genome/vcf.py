"""VCF batches: every record written back, in order, with a delta per ALT or the reason it has none.

    python -m carbon_app score-vcf --reference hg38.fa --vcf in.vcf.gz --out scored.vcf --tsv scored.tsv

Records are read with pysam and streamed in chunks (memory stays flat however
long the file). Each ALT gets INFO `CARBON_DELTA` (Number=A; `.` where it
could not be scored) and `CARBON_PROBLEM` (Number=A: `unknown_contig`,
`REF_mismatch`, `symbolic_allele`, `not_ACGT`, `mostly_N`, `beyond_contig`);
a record none of whose ALTs could be scored gets FILTER `CARBON_UNSCORED`.
Sample columns and other INFO fields pass through. A line that is not a VCF
record at all is named by its line number in the summary and the TSV (it
cannot be a record of the output); nothing stops the batch.
"""

from __future__ import annotations

import gzip
import re
import tempfile
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from ..core.stopping import Stopped, boundary
from ..core.validate import output_file
from ..errors import InputError
from ..inference.provenance import Provenance
from ..inference.spec import ScoringSpec, resolve_spec
from ..model.bundle import ModelBundle
from .coordinates import GenomicVariant, VariantProblem, _checked
from .partial import Partial, earlier_output, kept_rows
from .reference import Reference
from .scoring import Outcome, score_batch

DELTA, PROBLEM, UNSCORED, CONTEXT = "CARBON_DELTA", "CARBON_PROBLEM", "CARBON_UNSCORED", "CARBON_CONTEXT"
NORMAL = "CARBON_NORMAL"  # each ALT's normal form, POS:REF>ALT as bcftools norm -f writes it (`Variant.normalized`)
CHUNK = 512  # records scored together: enough to share windows, little enough to keep memory flat
WRONG_BUILD_SHARE = 0.2  # REF mismatches above this share (and at least 5) suggest the wrong genome build
_BASES = re.compile(r"^[ACGTNacgtn]+$")
_CONTIG = re.compile(r"[!-~]+")  # a contig name: printable, no space (VCF 4.3 section 1.6.1)
MAX_POS = 2**31 - 2  # the largest position a VCF may hold (and an index may reach)
OWN_KEYS = (DELTA, NORMAL, PROBLEM, CONTEXT)  # this app's INFO keys: an earlier run's are replaced, not kept
_OWN_HEADER = re.compile(rf"^##(INFO=<ID=({'|'.join(OWN_KEYS)})[,>]|FILTER=<ID={UNSCORED}[,>]|carbon_studio)")
TSV_COLUMNS = ["line", "chrom", "pos", "id", "ref", "alt", "delta", "problem", "message", "more_damaging_than",
               "window_start", "window_end"]  # the contig span the delta's windows lie in, as scored


@dataclass
class VcfSummary:
    records: int = 0
    alts: int = 0
    scored: int = 0
    problems: Counter = field(default_factory=Counter)
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (line number, what is wrong)
    hint: str | None = None  # e.g. many REF mismatches: the wrong genome build?
    seconds: float = 0.0
    sorted: bool = True  # records in coordinate order (contigs in blocks, positions rising): can be indexed
    method: str = ""  # the scoring method the deltas were read with (the model's own where none was named)
    spec: ScoringSpec | None = None  # the whole setup, as used
    provenance: Provenance | None = None  # the app, the model, its weights and the setup, as the headers name them
    partial: Partial | None = None  # where the job stopped, if it stopped part-way (the outputs hold that much)
    resumed: int = 0  # records kept from the partial output this job resumed
    genome: str = ""  # the genome's name and its contigs, to say what a VCF's unknown contigs could be
    genome_contigs: list[str] = field(default_factory=list)
    missing_contigs: Counter = field(default_factory=Counter)  # VCF contig -> ALT alleles the genome lacks it for
    _last: tuple[str, int] | None = None
    _contigs_done: set = field(default_factory=set)

    def saw(self, contig: str, pos: int) -> None:
        if self._last and self._last[0] != contig:
            self._contigs_done.add(self._last[0])
        if contig in self._contigs_done or (self._last and self._last[0] == contig and pos < self._last[1]):
            self.sorted = False
        self._last = (contig, pos)

    def tally(self, contig: str, pos: int, problems: list[str | None]) -> None:
        """Count one record written, `problems` naming why each of its ALTs has no delta (None: scored)."""
        self.saw(contig, pos)
        self.records += 1
        self.alts += len(problems)
        self.scored += problems.count(None)
        self.problems.update(problem for problem in problems if problem is not None)
        if "unknown_contig" in problems:
            self.missing_contigs[contig] += problems.count("unknown_contig")

    def lines(self, remedies: Remedies | None = None) -> list[str]:
        """The summary in sentences, each fix said in the words of the face it is read in (`remedies`: the
        command line's unless given)."""
        remedies = remedies or COMMAND_LINE
        out = [f"{self.records:,} records, {self.alts:,} ALT alleles: {self.scored:,} scored in {self.seconds:.1f} s"]
        if self.resumed:
            out.append(f"{self.resumed:,} records kept from the partial output this run resumed")
        if self.partial:
            out.append(self.partial.sentence())
        out += [f"{n:,} not scored: {code}" for code, n in self.problems.most_common()]
        out += [f"line {line}: {reason} (not a VCF record; left out of the VCF, listed in the TSV)"
                for line, reason in self.malformed]
        if self.missing_contigs:
            out.append(self.contig_hint(remedies))
        if self.hint:
            out.append(self.hint)
        if not self.sorted and self.records:
            out.append("The records are not in coordinate order, so the annotated VCF has no tabix index (.tbi): "
                       f"sort the input ({remedies.sort}) to get one.")
        return out

    def contig_hint(self, remedies: Remedies | None = None) -> str:
        """Which of the VCF's contigs the genome lacks, which it has, and how to score them."""
        top = self.missing_contigs.most_common(5)
        lacked = ", ".join(f"{name} ({n:,} ALT allele{'s' if n != 1 else ''})" for name, n in top)
        if len(self.missing_contigs) > len(top):
            lacked += f" and {len(self.missing_contigs) - len(top):,} more"
        has = ", ".join(self.genome_contigs[:6]) + (f", ... ({len(self.genome_contigs):,} in all)"
                                                    if len(self.genome_contigs) > 6 else "")
        remedies = remedies or COMMAND_LINE
        return (f"The genome {self.genome} has no contig {lacked}; its contigs are {has}. Score these against a "
                f"genome that has them ({remedies.other_genome}), or map the VCF's contig names to the genome's "
                f"({remedies.renaming}).")


@dataclass(frozen=True)
class Remedies:
    """How a person fixes what a VCF summary names, in the words of the face they read it in."""

    other_genome: str
    renaming: str
    sort: str = "bcftools sort in.vcf -Oz -o sorted.vcf.gz"


COMMAND_LINE = Remedies(
    other_genome="score-vcf --reference FASTA; on a server, a FASTA uploaded beside the VCF or a genome added to "
                 "CARBON_REFERENCES=NAME=PATH",
    renaming="a renaming table, 'VCF_NAME GENOME_NAME' a line: --rename-chrs FILE")


def _open_text(path: Path):
    return gzip.open(path, "rt") if path.suffix in (".gz", ".bgz") else open(path)


@dataclass(frozen=True)
class UploadLimits:
    """What an uploaded VCF may expand to, checked while it is read, in constant memory: its size after
    decompression (a gzip bomb is small only before), its header lines, its longest line, its blank lines."""

    expanded_bytes: int = 64 * 2**20
    header_lines: int = 20_000
    line_bytes: int = 2**20
    blank_lines: int = 10_000


def count_alts(path: str | Path, limits: UploadLimits | None = None) -> int:
    """ALT alleles in a VCF, counted from its text (what a server checks against its limit before scoring).
    With `limits`, the file is read line by line in bounded pieces and refused, naming the limit, as soon as
    it passes one: the memory it takes does not grow with what it expands to."""
    path = Path(path)
    count = expanded = headers = blanks = 0
    try:
        with (gzip.open(path, "rb") if path.suffix in (".gz", ".bgz") else open(path, "rb")) as source:
            while True:
                line = source.readline(limits.line_bytes + 1) if limits else source.readline()
                if not line:
                    break
                if limits:
                    expanded += len(line)
                    if len(line) > limits.line_bytes:
                        raise InputError(f"the VCF '{path.name}' has a line longer than "
                                         f"{limits.line_bytes // 2**20} MB; this server reads no longer lines")
                    if expanded > limits.expanded_bytes:
                        raise InputError(f"the VCF '{path.name}' expands to more than "
                                         f"{limits.expanded_bytes // 2**20} MB; this server scores smaller ones (the "
                                         "command line, score-vcf, has no limit)")
                if line.startswith(b"#"):
                    headers += 1
                    if limits and headers > limits.header_lines:
                        raise InputError(f"the VCF '{path.name}' has more than {limits.header_lines:,} header lines; "
                                         "this server reads no more")
                    continue
                if not line.strip():
                    blanks += 1
                    if limits and blanks > limits.blank_lines:
                        raise InputError(f"the VCF '{path.name}' has more than {limits.blank_lines:,} blank lines; "
                                         "this server reads no more")
                    continue
                fields = line.split(b"\t", 5)
                count += fields[4].count(b",") + 1 if len(fields) > 4 else 1
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"the VCF '{path.name}' cannot be read: {exc}") from None
    return count


def _malformed(fields: list[str]) -> str | None:
    """Why a data line is not a VCF record htslib can read and index, or None: every such line is named in
    the outputs and left out, the records around it scored."""
    if len(fields) < 8:
        return f"has {len(fields)} tab-separated columns; a VCF record has at least 8"
    if not _CONTIG.fullmatch(fields[0]):
        return f"CHROM '{fields[0][:40]}' is not a contig name (it is empty or holds a space or a tab)"
    if not fields[1].isdigit() or not 1 <= int(fields[1]) <= MAX_POS:
        return f"POS '{fields[1][:24]}' is not a position (1 to {MAX_POS:,})"
    if not _BASES.match(fields[3]):
        return f"REF '{fields[3][:20]}' is not bases"
    if not fields[4]:
        return "ALT is empty"
    end = next((item[4:] for item in fields[7].split(";") if item.startswith("END=")), None)
    if end is not None and not (end.isdigit() and int(fields[1]) <= int(end) <= MAX_POS):
        return f"INFO END={end[:24]} is not a position at or after POS (at most {MAX_POS:,})"
    return None


def _without_own(fields: list[str]) -> list[str]:
    """A record's columns without an earlier run's annotations (this app's INFO keys and its FILTER), which this
    run writes afresh: scoring an output again gives one value of each, never two that disagree."""
    info = [item for item in fields[7].split(";") if item.split("=", 1)[0] not in OWN_KEYS]
    kept = [name for name in fields[6].split(";") if name != UNSCORED]
    return [*fields[:6], ";".join(kept) or ".", ";".join(info) or ".", *fields[8:]]


def _prepare(vcf_in: Path, clean: Path, settings: str, context: int, made_by: Provenance
             ) -> tuple[list[int], list[tuple[int, str]], int]:
    """Copy `vcf_in` to `clean` with the Carbon header lines added, contigs and INFO/FORMAT keys the records
    use but the header lacks declared (as htslib would assume them), and lines that are not records left out.
    Returns the line number of every record kept, (line, reason) of every line left out, and the number of
    ALT alleles of the records kept."""
    header: list[str] = []
    declared: dict[str, set[str]] = {"contig": set(), "INFO": set(), "FORMAT": set()}
    used: dict[str, set[str]] = {"contig": set(), "INFO": set(), "FORMAT": set()}
    records: list[int] = []
    malformed: list[tuple[int, str]] = []
    alts = 0
    column_line = None
    body = clean.with_suffix(".body")
    try:
        with _open_text(vcf_in) as source, open(body, "w") as out:
            for number, line in enumerate(source, start=1):
                if line.startswith("##"):
                    if _OWN_HEADER.match(line):  # an earlier run's: this run writes its own
                        continue
                    header.append(line.rstrip("\n"))
                    found = re.match(r"##(contig|INFO|FORMAT)=<ID=([^,>]+)", line)
                    if found:
                        declared[found.group(1)].add(found.group(2))
                    continue
                if line.startswith("#"):
                    column_line = line.rstrip("\n")
                    continue
                if not line.strip():
                    continue
                fields = line.rstrip("\n").split("\t")
                reason = _malformed(fields)
                if reason:
                    malformed.append((number, reason))
                    continue
                fields = _without_own(fields)
                used["contig"].add(fields[0])
                used["INFO"].update(item.split("=", 1)[0] for item in fields[7].split(";") if item and item != ".")
                if len(fields) > 8:
                    used["FORMAT"].update(key for key in fields[8].split(":") if key and key != ".")
                records.append(number)
                alts += fields[4].count(",") + 1
                out.write("\t".join(fields) + "\n")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"the VCF '{vcf_in.name}' cannot be read: its compressed data is damaged ({exc}); "
                         "compress it again (bgzip) or send it unpacked") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"the VCF '{vcf_in.name}' cannot be read: {exc}") from None
    if column_line is None:
        raise InputError(f"the VCF '{vcf_in.name}' has no #CHROM header line: is it a VCF?")
    added = [f"##contig=<ID={c}>" for c in sorted(used["contig"] - declared["contig"])]
    added += [f'##{kind}=<ID={key},Number=.,Type=String,Description="not declared in the input">'
              for kind in ("INFO", "FORMAT") for key in sorted(used[kind] - declared[kind])]
    added += [
        f'##INFO=<ID={DELTA},Number=A,Type=Float,Description="Carbon delta = LL(alt) - LL(ref), natural log: '
        f'{settings}">',
        f'##INFO=<ID={NORMAL},Number=A,Type=String,Description="The change scored, in one normal form: trimmed and '
        'left-aligned as bcftools norm -f writes it, POS:REF>ALT">',
        f'##INFO=<ID={PROBLEM},Number=A,Type=String,Description="Why an ALT has no {DELTA}: unknown_contig, '
        'REF_mismatch, symbolic_allele, not_ACGT, mostly_N or beyond_contig">',
        f'##FILTER=<ID={UNSCORED},Description="No ALT of this record could be scored (see {PROBLEM})">',
        f"##carbon_studio=<{settings}>",
        f"##carbon_studio_version={made_by.app}",
        f"##carbon_studio_setup={made_by.setup_words}",
    ]
    if context:
        added.insert(-4, f'##INFO=<ID={CONTEXT},Number=A,Type=Float,Description="Share of the possible substitutions '
                         f'within {context} bases whose {DELTA} is higher: this ALT is more damaging than that share">')
    with open(clean, "w") as out, open(body) as rest:
        out.write("\n".join(header + added + [column_line]) + "\n")
        for line in rest:
            out.write(line)
    body.unlink()
    return records, malformed, alts


def _records(clean: Path) -> Iterator[tuple[int, object]]:
    """(index, pysam record) of each record; a record pysam still cannot read is yielded as (index, error)
    and reading goes on from a fresh handle past it (pysam's state after a failed parse is not trusted)."""
    import pysam

    done = 0
    while True:
        with pysam.VariantFile(str(clean)) as vcf:
            records = iter(vcf)
            for _ in range(done):  # past the records read before, the one that failed among them
                try:
                    next(records)
                except (OSError, ValueError):
                    pass
            while True:
                try:
                    record = next(records)
                except StopIteration:
                    return
                except (OSError, ValueError) as exc:
                    yield done, exc
                    done += 1
                    break
                yield done, record
                done += 1


@contextmanager
def _writer(path: Path):
    """A text sink for the output VCF: bgzip-compressed when its name ends in .gz."""
    if path.suffix in (".gz", ".bgz"):
        import pysam

        handle = pysam.BGZFile(str(path), "wb")
        try:
            yield lambda text: handle.write(text.encode())
        finally:
            handle.close()
    else:
        with open(path, "w") as handle:
            yield handle.write


def score_vcf(bundle: ModelBundle | None, reference: Reference, vcf_in: str | Path, vcf_out: str | Path,
              tsv_out: str | Path | None = None, progress: Callable[[int, int], None] | None = None,
              scorer: ChunkScorer | None = None, spec: ScoringSpec | None = None, resume: bool = False,
              renamed: dict[str, str] | None = None, **settings) -> VcfSummary:
    """Score every ALT of every record of `vcf_in` against `reference` as `spec` says (else `resolve_spec` of
    `settings`: the model's own for what is not given); write `vcf_out` (and `tsv_out`). With the spec's
    `context` > 0 each ALT is also ranked among the substitutions within that many bases (INFO
    CARBON_CONTEXT). `progress(done, total)` follows the ALT alleles. `scorer` scores the chunks (default:
    in this process; `distributed.RayScorer` spreads them over a Ray cluster, its workers resolving the same
    spec); the file is written here, in order, whoever scored each chunk (with a scorer, `bundle` may be None).
    The headers name the spec as used: the window scored, never the one asked for. `renamed` maps the VCF's
    contig names to the genome's (`reference.read_renaming`); the records keep their own.

    The outputs are written beside their final names and moved there at the end. A job stopped part-way
    (`core.stopping`: a shutdown after its current chunk, a cancel, or an error while scoring) still leaves
    valid outputs that hold every chunk it finished and say so (`partial`); with `resume` a partial `vcf_out`
    is kept and only the rest is scored. A cancelled job raises `Stopped` once its outputs are written; a
    shutdown returns the summary, its `partial` set."""
    vcf_in, vcf_out = Path(vcf_in), Path(vcf_out)
    tsv_out = Path(tsv_out) if tsv_out else None
    if not vcf_in.is_file():
        raise InputError(f"the VCF '{vcf_in}' does not exist or is not a file")
    for out in (vcf_out, tsv_out):
        if out is not None:
            output_file(out)
    scorer = scorer or LocalScorer(bundle, reference, resolve_spec(bundle, spec, **settings))
    spec, made_by = scorer.spec, scorer.provenance
    # what a resumed job must share with the output it finishes: the model, its weights, the genome, the setup
    settings_line = f"model={made_by.model},weights={made_by.weights},genome={reference.name}," + spec.header()
    began = time.perf_counter()
    summary = VcfSummary(method=spec.method, spec=spec, genome=reference.name, genome_contigs=list(reference.lengths),
                         provenance=made_by)
    with tempfile.TemporaryDirectory(dir=vcf_out.parent, prefix=".carbon-") as tmp:
        clean = Path(tmp) / "input.vcf"
        line_of, summary.malformed, total_alts = _prepare(vcf_in, clean, settings_line, spec.context, made_by)
        earlier = None
        if resume and vcf_out.is_file():
            earlier = earlier_output(vcf_out, settings_line, line_of)
        staged_vcf, staged_tsv = Path(tmp) / f"output{vcf_out.suffix}", Path(tmp) / "output.tsv"
        job = _VcfJob(scorer, summary, line_of, total_alts, spec.context, progress, renamed or {})
        with _writer(staged_vcf) as write, open(staged_tsv, "w") if tsv_out else nullcontext() as tsv:
            job.begin(clean, write, tsv)
            if earlier is not None:
                job.carry_over(vcf_out, earlier, tsv_out if tsv else None)
            stopped = job.run()
        if stopped is None:
            staged_vcf.replace(vcf_out)
        else:
            summary.partial = Partial(job.done, len(line_of), job.last_line, stopped.why)
            _mark_partial(staged_vcf, vcf_out, summary.partial)
        if tsv_out:
            staged_tsv.replace(tsv_out)
    if vcf_out.suffix in (".gz", ".bgz") and summary.sorted:  # sorted and bgzipped: a tabix index beside it
        import pysam

        pysam.tabix_index(str(vcf_out), preset="vcf", force=True, keep_original=True)
    mismatches = summary.problems.get("REF_mismatch", 0)
    if mismatches >= 5 and mismatches > WRONG_BUILD_SHARE * summary.alts:
        summary.hint = (f"{mismatches:,} of {summary.alts:,} ALT alleles have a REF that differs from "
                        f"{reference.name}: is this the right genome build?")
    summary.seconds = time.perf_counter() - began
    if job.error is not None:
        raise job.error
    if stopped is not None and stopped.cancelled:  # nobody waits for it: its caller only learns it stopped
        raise stopped
    return summary


def _mark_partial(staged: Path, out: Path, partial: Partial) -> None:
    """Copy the finished VCF text of `staged` to `out`, the partial line added just before its #CHROM line."""
    with _open_text(staged) as source, _writer(out) as write:
        for line in source:
            if line.startswith("#CHROM"):
                write(partial.header_line() + "\n")
            write(line)


class _VcfJob:
    """One pass over a prepared VCF: records in chunks to the scorer, written back in order as each is done."""

    def __init__(self, scorer: ChunkScorer, summary: VcfSummary, line_of: list[int], total_alts: int,
                 context: int, progress: Callable[[int, int], None] | None, renamed: dict[str, str]):
        self.scorer, self.summary, self.line_of, self.total_alts = scorer, summary, line_of, total_alts
        self.renamed = renamed
        self.options, self.progress = {"context": context}, progress
        self.pending_malformed = list(summary.malformed)
        self.counted = 0
        self.done = 0  # records of the input (in `_records`' order) written: where a stop leaves the output
        self.in_flight: deque = deque()  # (chunk, jobs, handle), oldest first: written in this order
        self.writing = False  # inside a chunk's records
        self.error: Exception | None = None  # what stopped the scoring, raised again once the outputs are kept

    @property
    def last_line(self) -> int:
        return self.line_of[self.done - 1] if self.done else 0

    def step(self, n: int) -> None:
        self.counted += n
        if self.progress:
            self.progress(self.counted, self.total_alts)

    def begin(self, clean: Path, write, tsv) -> None:
        import pysam

        self.write, self.tsv = write, tsv
        self.records = _records(clean)
        with pysam.VariantFile(str(clean)) as vcf:
            write(str(vcf.header))
        if tsv:  # the table names what made it, as the VCF's header does
            tsv.writelines(f"{line}\n" for line in self.scorer.provenance.comment_lines())
            tsv.write("\t".join(TSV_COLUMNS) + "\n")

    def carry_over(self, earlier_vcf: Path, earlier: Partial, earlier_tsv: Path | None) -> None:
        """Keep what a stopped run of the same job wrote (`earlier`): its records, each checked against the
        input's, and its table's rows; the summary counts them as this run's."""
        import pysam

        if self.tsv:
            rows = kept_rows(earlier_tsv, earlier.last_line)
            next(rows)  # its first line: this table has written its own header (rows are told by their line)
            self.tsv.writelines(rows)
            self.pending_malformed = [(line, why) for line, why in self.pending_malformed if line > earlier.last_line]
        carried = 0
        with pysam.VariantFile(str(earlier_vcf)) as kept_vcf:
            kept = iter(kept_vcf)
            for index, record in islice(self.records, earlier.records_done):
                line = self.line_of[index]
                if isinstance(record, Exception):
                    self.summary.malformed.append((line, f"cannot be read as a VCF record ({record})"))
                    continue
                old = next(kept, None)
                if old is None or (old.chrom, old.pos, old.ref, old.alts) != (record.chrom, record.pos, record.ref,
                                                                              record.alts):
                    raise InputError(f"the output '{earlier_vcf.name}' does not hold the input's record of line "
                                     f"{line} ({record.chrom}:{record.pos}): was it made from another VCF? Leave "
                                     "out --resume to score it again")
                deltas, problems = old.info.get(DELTA) or (), old.info.get(PROBLEM) or ()
                self.summary.tally(old.chrom, old.pos, [None if d is not None else (problems[a] if a < len(problems)
                                                                                     else "not_scored")
                                                        for a, d in enumerate(deltas)])
                self.write(str(old))
                carried += len(deltas)
        self.step(carried)
        self.done = earlier.records_done
        self.summary.resumed = self.done

    def run(self) -> Stopped | None:
        """Score and write every record not yet written; the `Stopped` that ended it early, if one did. A
        shutdown lets the chunks being scored finish; a cancel, a stop at once or an error keeps the chunks
        already written (an error is raised again once the outputs are closed)."""
        chunk: list[tuple[int, object]] = []
        try:
            for index, record in self.records:
                chunk.append((index, record))
                if len(chunk) >= CHUNK:  # the same chunks whoever scores them: the same batches, the same deltas
                    self.submit(chunk)
                    chunk = []
            if chunk:
                self.submit(chunk)
            while self.in_flight:
                self.finish(*self.in_flight.popleft())
        except Stopped as stop:
            if not stop.at_once:  # a shutdown: what is being scored is finished and kept
                try:
                    while self.in_flight:
                        self.finish(*self.in_flight.popleft())
                except Stopped:
                    pass
            return stop
        except Exception as error:
            if self.writing:  # a chunk half written cannot be kept: no partial output, the earlier one stays
                raise
            self.error = error
            return Stopped(f"an error while scoring: {type(error).__name__}")
        if self.tsv:
            for line, reason in self.pending_malformed:
                self.tsv.write(_tsv_row(line=line, problem="malformed", message=reason))
        return None

    def submit(self, chunk: list) -> None:
        boundary()  # a shutdown stops here, between chunks: the finished ones are kept whole
        jobs = _jobs(chunk, self.renamed)
        variants = [job[2] for job in jobs if isinstance(job[2], GenomicVariant)]
        self.in_flight.append((chunk, jobs, self.scorer.submit(variants, self.step)))
        while len(self.in_flight) > self.scorer.in_flight:
            self.finish(*self.in_flight.popleft())

    def finish(self, chunk: list, jobs: list, handle) -> None:
        outcomes = self.scorer.result(handle, self.step)
        self.writing = True
        _write_chunk(chunk, jobs, outcomes, self.write, self.tsv, self.line_of, self.pending_malformed,
                     self.summary, self.options, self.step)
        self.writing = False
        self.done = chunk[-1][0] + 1


def _jobs(chunk, renamed: dict[str, str]) -> list[tuple[int, int, GenomicVariant | VariantProblem]]:
    """(chunk row, ALT index, the variant or why it cannot be one, on the genome's contig name) for every ALT
    of a chunk's records."""
    jobs: list[tuple[int, int, GenomicVariant | VariantProblem]] = []
    for row, (_, record) in enumerate(chunk):
        if isinstance(record, Exception):
            continue
        for a, alt in enumerate(record.alts or ()):
            try:
                contig = renamed.get(record.chrom, record.chrom)
                jobs.append((row, a, _checked(contig, record.pos, record.ref, alt, "")))
            except VariantProblem as exc:
                jobs.append((row, a, exc))
            except Exception as exc:  # REF equals ALT and the like: named, not fatal
                jobs.append((row, a, VariantProblem("not_scorable", str(exc))))
    return jobs


class LocalScorer:
    """Scores a chunk's variants in this process, as it is submitted."""

    in_flight = 0  # chunks scored ahead of the one being written

    def __init__(self, bundle: ModelBundle, reference: Reference, spec: ScoringSpec):
        self.bundle, self.reference, self.spec = bundle, reference, spec
        self.provenance = Provenance.of(bundle, spec)

    def submit(self, variants: list[GenomicVariant], step: Callable[[int], None]) -> list[Outcome]:
        return score_batch(self.bundle, self.reference, variants, spec=self.spec, progress=step)

    def result(self, handle: list[Outcome], step: Callable[[int], None]) -> list[Outcome]:
        return handle


ChunkScorer = LocalScorer  # anything with in_flight, spec, provenance, submit(variants, step), result(handle, step)


def _tsv_row(**values) -> str:
    """One TSV line: each of TSV_COLUMNS from `values`, empty where not given."""
    return "\t".join(str(values.get(column, "")) for column in TSV_COLUMNS) + "\n"


def _write_chunk(chunk, jobs, outcomes, write, tsv, line_of, pending_malformed, summary, options, step) -> None:
    """Write one scored chunk of records (and their TSV rows, with any malformed lines before them), in order."""
    scored = iter(outcomes)
    outcome: dict[tuple[int, int], Outcome] = {}
    for row, a, job in jobs:
        if isinstance(job, VariantProblem):
            outcome[(row, a)] = Outcome(problem=job.code, message=str(job))
            step(1)
        else:
            outcome[(row, a)] = next(scored)
    for row, (index, record) in enumerate(chunk):
        line = line_of[index]
        while pending_malformed and pending_malformed[0][0] < line:
            bad, reason = pending_malformed.pop(0)
            if tsv:
                tsv.write(_tsv_row(line=bad, problem="malformed", message=reason))
        if isinstance(record, Exception):  # pysam could not read it after all: named, the batch goes on
            reason = f"cannot be read as a VCF record ({record})"
            summary.malformed.append((line, reason))
            if tsv:
                tsv.write(_tsv_row(line=line, problem="malformed", message=reason))
            continue
        results = [outcome[(row, a)] for a in range(len(record.alts or ()))]
        summary.tally(record.chrom, record.pos, [(r.problem or "not_scored") if r.delta is None else None
                                                         for r in results])
        if results:
            record.info[DELTA] = tuple(None if r.delta is None else round(r.delta, 6) for r in results)
            if any(r.normal for r in results):
                record.info[NORMAL] = tuple(r.normal or "." for r in results)
            if any(r.problem for r in results):
                record.info[PROBLEM] = tuple(r.problem or "." for r in results)
            if all(r.delta is None for r in results):
                record.filter.add(UNSCORED)
            if options["context"]:
                record.info[CONTEXT] = tuple(None if r.context is None else round(r.context.more_damaging_than, 4)
                                             for r in results)
        write(str(record))
        if tsv:
            for alt, result in zip(record.alts or (), results, strict=True):
                delta = "" if result.delta is None else f"{result.delta:.6f}"
                note = result.message or "; ".join(result.notes)
                ranked = "" if result.context is None else f"{result.context.more_damaging_than:.4f}"
                first, last = result.window or ("", "")
                tsv.write(_tsv_row(line=line, chrom=record.chrom, pos=record.pos, id=record.id or ".", ref=record.ref,
                                   alt=alt, delta=delta, problem=result.problem or "", message=note,
                                   more_damaging_than=ranked, window_start=first, window_end=last))
