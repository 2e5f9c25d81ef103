"""Saturation scans of genome regions from a BED file: every substitution of every region, in BED order.

    python -m carbon_app scan-regions --reference hg38.fa --bed exons.bed --out scan.tsv [--ray local]

Each row: the region's name, contig, 1-based position, REF, ALT and the delta (each substitution read in
the windows a single `score_at` reads it in, so the deltas are the same); a region that cannot be scanned
(an unknown contig, a line that is not BED) gets one row naming why, and the job goes on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.validate import output_file
from ..errors import InputError
from ..inference.provenance import Provenance
from ..inference.spec import resolve_spec
from ..model.bundle import ModelBundle
from .coordinates import GenomicVariant
from .reference import Reference
from .scoring import score_batch

COLUMNS = ["region", "chrom", "pos", "ref", "alt", "delta", "problem"]
MAX_REGION = 100_000  # bases one region may span: a job is many regions, not one chromosome


@dataclass
class Region:
    line: int
    name: str
    contig: str
    start: int  # 0-based, as BED writes it
    end: int  # exclusive
    problem: str | None = None


@dataclass
class RegionsSummary:
    regions: int = 0
    rows: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)  # (BED line, why)
    seconds: float = 0.0


def read_bed(path: str | Path) -> list[Region]:
    """The regions of a BED file, in order; a line that is not a region is kept, with its problem."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"the BED file '{path}' does not exist or is not a file")
    regions = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip() or line.startswith(("#", "track", "browser")):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        name = fields[3] if len(fields) > 3 else f"{fields[0]}:{fields[1] if len(fields) > 1 else ''}"
        if len(fields) < 3 or not fields[1].isdigit() or not fields[2].isdigit():
            regions.append(Region(number, name, fields[0], 0, 0, "not a BED line (CHROM START END, 0-based)"))
        elif int(fields[2]) <= int(fields[1]):
            regions.append(Region(number, name, fields[0], 0, 0, "END is not after START"))
        elif int(fields[2]) - int(fields[1]) > MAX_REGION:
            regions.append(Region(number, name, fields[0], 0, 0, f"longer than {MAX_REGION:,} bases: split it"))
        else:
            regions.append(Region(number, name, fields[0], int(fields[1]), int(fields[2])))
    return regions


def scan_region(bundle: ModelBundle, reference: Reference, contig: str, start: int, end: int, **options) -> list:
    """(contig, position, ref, alt, delta or None, problem or None) for every substitution of [start, end)."""
    name = reference.contig(contig)
    bases = reference.fetch(name, start, end)
    variants, rows = [], []
    for i, ref in enumerate(bases):
        if ref not in "ACGT":
            rows.append((name, start + i + 1, ref, ".", None, "not_ACGT"))
            continue
        for alt in "ACGT":
            if alt != ref:
                variants.append(GenomicVariant(name, start + i + 1, ref, alt))
    outcomes = score_batch(bundle, reference, variants, **options)
    rows += [(v.contig, v.pos, v.ref, v.alt, o.delta, o.problem) for v, o in zip(variants, outcomes, strict=True)]
    return sorted(rows, key=lambda row: (row[1], row[3]))


def scan_regions(bundle: ModelBundle | None, reference: Reference, bed: str | Path, out: str | Path,
                 scorer=None, progress: Callable[[int, int], None] | None = None, **options) -> RegionsSummary:
    """Scan every region of `bed`, writing `out` (TSV) in BED order; with a `scorer` (a `RayScorer`) the
    regions are scanned by its workers, `bundle` may then be None."""
    began = time.perf_counter()
    out = output_file(out)  # a folder that cannot take it is named before any work
    regions = read_bed(bed)
    summary = RegionsSummary(regions=len(regions))
    in_flight: deque = deque()
    done = 0
    spec = None if scorer else resolve_spec(bundle, **options)  # made once, as the workers make theirs
    made_by = scorer.provenance if scorer else Provenance.of(bundle, spec)
    with open(out, "w") as table:
        table.writelines(f"{line}\n" for line in made_by.comment_lines())  # what made the table, first
        table.write("\t".join(COLUMNS) + "\n")

        def write(region: Region, rows: list | None, problem: str | None) -> None:
            nonlocal done
            if problem:
                summary.problems.append((region.line, problem))
                table.write(f"{region.name}\t{region.contig}\t\t\t\t\tline {region.line}: {problem}\n")
            for contig, pos, ref, alt, delta, why in rows or []:
                table.write(f"{region.name}\t{contig}\t{pos}\t{ref}\t{alt}\t"
                            f"{'' if delta is None else f'{delta:.6f}'}\t{why or ''}\n")
                summary.rows += 1
            done += 1
            if progress:
                progress(done, len(regions))

        def drain(keep: int) -> None:
            """Write the oldest regions until at most `keep` are still being scanned."""
            while len(in_flight) > keep:
                region, handle = in_flight.popleft()
                if region.problem:
                    write(region, None, region.problem)
                    continue
                try:
                    rows = scorer.result(handle) if scorer else handle
                except InputError as exc:
                    write(region, None, str(exc))
                    continue
                write(region, rows, None)

        for region in regions:
            if region.problem:
                in_flight.append((region, None))
            else:
                try:
                    reference.contig(region.contig)
                except InputError as exc:
                    region.problem = str(exc)
                    in_flight.append((region, None))
                else:
                    handle = (scorer.submit_scan(region.contig, region.start, region.end) if scorer else
                              scan_region(bundle, reference, region.contig, region.start, region.end, spec=spec))
                    in_flight.append((region, handle))
            drain(scorer.in_flight if scorer else 0)
        drain(0)
    summary.seconds = time.perf_counter() - began
    return summary
